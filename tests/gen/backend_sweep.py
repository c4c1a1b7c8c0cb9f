"""Run as a child process (a misclassified descriptor-valued attribute can crash cuDNN): for every classified
backend attribute, what the real library answers to cudnnBackendSetAttribute with the declared element type
and with other types. Prints one JSON object per attribute: name, declared status, wrong statuses by type."""
from __future__ import annotations

import ctypes
import json
import sys

import dnnbind
from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.runtime import deviceless

deviceless.enable()                    # DNNBIND_LIBCUDA / DNNBIND_CUBLASLT name the files


def status(call) -> str:
    try:
        call()
        return "OK"
    except dnnbind.CudnnError as exc:
        return exc.status.name


def tensor(uid: int) -> b.TensorDescriptor:
    return b.TensorDescriptor(dimensions=[1, 1, 1, 1], strides=[1, 1, 1, 1], unique_id=uid,
                              data_type=c.CUDNN_DATA_FLOAT, byte_alignment=4).finalize()


def element_value(a) -> b.BackendDescriptor:
    """A descriptor an attribute takes: finalized where that is simple (a tensor, a knob choice, a
    convolution operation for a group of operations), else created."""
    if len(a.elements) > 1:
        conv = b.ConvolutionDescriptor(comp_type=c.CUDNN_DATA_FLOAT, conv_mode=c.CUDNN_CROSS_CORRELATION,
                                       spatial_dims=2, dilations=[1, 1], filter_strides=[1, 1], pre_paddings=[0, 0],
                                       post_paddings=[0, 0]).finalize()
        op = b.OperationConvolutionForwardDescriptor(conv_desc=conv, x=tensor(1), w=tensor(2), y=tensor(3),
                                                     alpha=[1.0], beta=[0.0])
        assert isinstance(op, a.elements)
        return op.finalize()
    cls = a.elements[0]
    if cls is b.TensorDescriptor:
        return tensor(7)
    if cls is b.KnobChoiceDescriptor:
        return cls(knob_type=c.CUDNN_KNOB_TYPE_SPLIT_K, knob_value=1).finalize()
    return cls()


def declared_array(a) -> tuple[object, list]:
    """(ctypes array of one valid element of the declared type, objects to keep alive)."""
    if a.kind == "descriptor":
        d = element_value(a)
        return (c.cudnnBackendDescriptor_t * 1)(d.handle), [d]
    if a.kind == "enum":
        return (ctypes.c_int32 * 1)(int(next(iter(a.ctype)))), []
    if a.kind == "struct":
        return (a.ctype * 1)(a.ctype(1, 1)), []
    if a.kind == "pointer":     # NULL, but a tensor's constant must point at a value (cuDNN reads it on set);
        memory = (ctypes.c_int64 * 8)()     # override shapes/strides point at arrays of pointers
        reads = a.attr == c.CUDNN_ATTR_TENSOR_CONSTANT_VALUE
        return (ctypes.c_void_p * 1)(ctypes.addressof(memory) if reads else None), [memory]
    value = {"int": 1, "float": 1.0, "bool": True, "char": b"{"}[a.kind]
    return (a.ctype * 1)(value), []


def main() -> None:
    wrong_types = [t for t in c.cudnnBackendAttributeType_t
                   if t not in (c.CUDNN_TYPE_HANDLE, c.CUDNN_TYPE_BACKEND_DESCRIPTOR)]
    for cls in b.CLASSES.values():
        try:
            cls().close()
        except dnnbind.CudnnError as exc:
            for name, a in cls.attributes.items():
                print(json.dumps({"attr": a.attr.name, "create": exc.status.name}), flush=True)
            continue
        for name, a in cls.attributes.items():
            print(json.dumps({"attr": a.attr.name, "start": True}), flush=True)   # names a crash, if any
            declared = "skipped"
            if a.kind != "handle":          # a cudnnHandle_t needs a device
                try:
                    array, keep = declared_array(a)
                except dnnbind.CudnnError as exc:      # an element type this cuDNN cannot create
                    declared = "element " + exc.status.name
                else:
                    d = cls()
                    if a.attr == c.CUDNN_ATTR_TENSOR_CONSTANT_VALUE:      # only a by-value tensor has one
                        d.set("is_by_value", True).set("data_type", c.CUDNN_DATA_FLOAT)
                    declared = status(lambda: c.cudnnBackendSetAttribute(d.handle, a.attr, a.attr_type, 1, array))
                    d.close()
            wrong = {}
            for t in wrong_types:
                if t == a.attr_type:
                    continue
                d = cls()
                buf = bytearray(32)            # (raw memory: the wrapper checks no element type of it)
                wrong[t.name] = status(lambda: c.cudnnBackendSetAttribute(d.handle, a.attr, t, 1, buf))
                d.close()
            print(json.dumps({"attr": a.attr.name, "declared": declared, "wrong": wrong}), flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
