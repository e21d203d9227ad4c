"""What the runtime reads off a caller's device array (``runtime.device_arrays.device_view``): pointer,
shape, dtype, strides, and the stream the caller's work on it may still run on, which the program waits
for before its kernels (they run on non-blocking streams)."""
import numpy as np
import pytest

from dace_partition.runtime.device_arrays import DeviceView, HostBackedDeviceArray, device_view


class Interface:
    """A producer known only by ``__cuda_array_interface__``, with the entries given."""

    def __init__(self, arr, **entries):
        self.arr = arr
        self.entries = entries

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.arr.shape, "typestr": self.arr.dtype.str, "data": (self.arr.ctypes.data, False),
                **self.entries}


@pytest.mark.parametrize("entries,stream", [
    ({"version": 2}, 1),  # PyTorch's version 2 names no stream: the legacy default stream
    ({"version": 3}, 1),
    ({"version": 3, "stream": None}, None),  # the producer says nothing is pending
    ({"version": 3, "stream": 1}, 1),
    ({"version": 3, "stream": 2}, 2),  # the per-thread default stream
    ({"version": 3, "stream": 0x7f00deadbeef}, 0x7f00deadbeef),  # a cudaStream_t
])
def test_the_stream_a_caller_names_is_the_one_waited_for(entries, stream):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = device_view(Interface(a, **entries))
    assert isinstance(v, DeviceView)
    assert v.stream == stream
    assert (v.ptr, v.shape, v.dtype, v.strides) == (a.ctypes.data, (3, 4), np.dtype(np.float32), (16, 4))


def test_strides_and_host_arrays():
    a = np.zeros((4, 6))
    t = a[:, ::2]
    v = device_view(Interface(t, version=3, strides=t.strides))
    assert v.strides == (48, 16) and not v.flags.c_contiguous
    assert device_view(a) is None and device_view(3.0) is None
    emulated = device_view(HostBackedDeviceArray(a))
    assert emulated.stream == 1 and emulated.flags.c_contiguous
