"""Type-checked (not run) by tests/typing/test_stubs.py: each marked line must be a mypy error."""

from dnnbind.gen import cudnn

desc = cudnn.cudnnTensorDescriptor_t()
filt = cudnn.cudnnFilterDescriptor_t()
cudnn.cudnnSetTensor4dDescriptor(filt, 0, 0, 1, 1, 1, 1)  # error: filter where a tensor belongs
cudnn.cudnnSetTensor4dDescriptor(desc, 0, 0, 1, 1, 1)  # error: one argument missing
cudnn.cudnnConvolutionForward(None, None, desc, "x", None, None, None, 0, None, 0, None, desc, None)  # error: str as device
cudnn.cudnnNotAFunction()  # error: no such function
version: str = cudnn.cudnnGetVersion()  # error: returns int
