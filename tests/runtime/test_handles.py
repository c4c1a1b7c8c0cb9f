"""Handle lifetimes (runtime/handles.py) through the generated cuDNN wrappers and the real libcudnn: a
library object is destroyed once, whichever Python object or thread asks, and an address the library
hands out again is live again. Crashes would kill the process, so the cases run in a child interpreter."""
from __future__ import annotations

import ctypes
from ctypes import POINTER

from childproc import run_python
from dnnbind.runtime import handles

CASES = r'''
import ctypes, threading
from ctypes import byref
from dnnbind.gen import cudnn as c
from dnnbind.runtime.errors import DnnArgumentError

def make():
    t = c.cudnnTensorDescriptor_t(); c.cudnnCreateTensorDescriptor(byref(t)); return t

# an alias (another object with the same address) cannot destroy it again
t = make()
alias = ctypes.cast(t, c.cudnnTensorDescriptor_t)
c.cudnnDestroyTensorDescriptor(t)
try:
    c.cudnnDestroyTensorDescriptor(alias)
    print("alias destroyed twice")
except DnnArgumentError as exc:
    print("alias refused:", "which a destroy freed already" in str(exc))

# an address cuDNN hands out again is live again: the new descriptor destroys normally
freed = set()
for _ in range(50):
    t = make(); freed.add(ctypes.cast(t, ctypes.c_void_p).value); c.cudnnDestroyTensorDescriptor(t)
reused = 0
for _ in range(50):
    t = make(); reused += ctypes.cast(t, ctypes.c_void_p).value in freed
    c.cudnnSetTensor4dDescriptor(t, 0, 0, 1, 2, 3, 4)
    c.cudnnDestroyTensorDescriptor(t)
print("reused addresses destroyed normally:", reused > 0)

# two threads destroying one handle at once: one succeeds, the other is refused
outcomes = []
for _ in range(300):
    t = make()
    barrier = threading.Barrier(2)
    def destroy():
        barrier.wait()
        try:
            c.cudnnDestroyTensorDescriptor(t); outcomes.append("destroyed")
        except DnnArgumentError:
            outcomes.append("refused")
    threads = [threading.Thread(target=destroy) for _ in range(2)]
    [x.start() for x in threads]; [x.join() for x in threads]
print("threads:", outcomes.count("destroyed"), outcomes.count("refused"))
'''


def test_destroyed_once_whatever_object_or_thread_asks() -> None:
    result = run_python(CASES)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["alias refused: True", "reused addresses destroyed normally: True",
                                          "threads: 300 300"]


def test_clear_handle_sets_a_pointer_to_null() -> None:
    class Opaque(ctypes.Structure):
        pass
    handle = POINTER(Opaque)(Opaque())
    assert handle
    handles.clear_handle(handle)
    assert not handle


def test_created_forgets_the_addresses_it_is_given() -> None:
    class Opaque(ctypes.Structure):
        pass
    objects = [Opaque() for _ in range(3)]
    pointers = (POINTER(Opaque) * 3)(*(POINTER(Opaque)(o) for o in objects))
    addresses = {ctypes.addressof(o) for o in objects}
    handles._freed.update(addresses)
    try:
        handles.created(ctypes.byref(pointers[0]))
        assert ctypes.addressof(objects[0]) not in handles._freed
        handles.created(pointers)
        assert not addresses & handles._freed
    finally:
        handles._freed.difference_update(addresses)
