"""Device arrays in and out of a program lowered with ``device="gpu"``.

A CuPy array, a PyTorch CUDA tensor, or any object with ``__cuda_array_interface__`` or a CUDA DLPack
device goes into a compiled program (:class:`~dace_partition.runtime.launch.Program`) without a copy to
the host: the lowering gave each argument the GPU kernels use a *device twin* (``passes.gpu.place``), an
argument of the program in GPU memory, and a symbol that says where the caller's arrays are. Given device
arrays, the runtime passes them as the twins and the program skips its copies at the call's start and end;
given NumPy arrays, it passes twins it keeps (allocated once per shape) and the program copies in and out
as before. Results come back where the inputs were: device arrays of the caller's kind (CuPy in, CuPy out;
PyTorch in, PyTorch out; otherwise a :class:`DeviceArray`), NumPy for NumPy.

MPI works on host memory (``passes.gpu.stage_communication``); an argument that only MPI or host code
touches (a scatter's source on rank 0, a gather's target) is copied between the caller's device array and
a host buffer here, once per call, where the program needs it. The host buffers the runtime keeps (those,
and the host side of a device argument whose halo MPI moves) are page-locked where the build can allocate
such memory: a copy from pageable memory runs at about half PCIe's rate and blocks the calling thread.

Device memory is the program's own: allocation and copies go through functions its CUDA file exports
(the CUDA runtime it was built with, on the GPU its rank selected). A program emulated on the host (the
tests run the GPU data flow without a GPU) uses :class:`HostMemory`, where "device" memory is host memory.
"""
import ctypes
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

#: DLPack's device types of memory a CUDA kernel can read (kDLCUDA, kDLCUDAManaged)
_DLPACK_CUDA = (2, 13)


def _c_strides(shape, itemsize) -> Tuple[int, ...]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


class _Flags:
    def __init__(self, c_contiguous: bool):
        self.c_contiguous = c_contiguous


@dataclass(frozen=True)
class DeviceView:
    """A caller's array in GPU memory, as the checks and the call need it: pointer, shape, dtype, strides
    (bytes). ``owner`` is the caller's object (kept alive for the call, and telling the result's kind).
    ``stream``: where the caller's work on it may still run, as ``__cuda_array_interface__`` says it (1 the
    legacy default stream, 2 the per-thread one, else a ``cudaStream_t``); None: nothing to wait for."""
    owner: object
    ptr: int
    shape: Tuple[int, ...]
    dtype: np.dtype
    strides: Tuple[int, ...]
    stream: Optional[int] = None

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python ints: exact, and no NumPy reduction per call

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def flags(self):
        return _Flags(self.strides == _c_strides(self.shape, self.itemsize) or self.size <= 1)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": self.strides, "version": 3}


def device_view(value) -> Optional[DeviceView]:
    """The :class:`DeviceView` of ``value`` if it is an array in GPU memory, else None (NumPy, a CPU tensor,
    a scalar). DLPack-only objects are taken through CuPy or PyTorch, whichever is installed."""
    if isinstance(value, (np.ndarray, DeviceView)) or np.isscalar(value):
        return value if isinstance(value, DeviceView) else None
    try:
        cai = value.__cuda_array_interface__
    except (AttributeError, RuntimeError):  # a PyTorch CPU tensor raises instead of lacking it
        cai = None
    if cai is None:
        where = getattr(value, "__dlpack_device__", None)
        if where is None or where()[0] not in _DLPACK_CUDA:
            return None
        value = _from_dlpack(value)
        cai = value.__cuda_array_interface__
    shape = tuple(int(n) for n in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = tuple(int(s) for s in cai["strides"]) if cai.get("strides") else _c_strides(shape, dtype.itemsize)
    # The interface's version 3 names the stream to wait for (None: none); without the entry (PyTorch's
    # version 2), the legacy default stream, where CuPy and PyTorch run unless told otherwise.
    stream = cai.get("stream", 1)
    return DeviceView(value, int(cai["data"][0]), shape, dtype, strides, None if stream is None else int(stream))


def _from_dlpack(value):
    for module in ("cupy", "torch"):
        try:
            lib = __import__(module)
        except ImportError:
            continue
        return lib.from_dlpack(value)
    raise ValueError(f"a {type(value).__name__} on a CUDA device reaches the program through DLPack only with CuPy "
                     "or PyTorch installed; pass a CuPy array or a PyTorch tensor (or install one of them)")


class DeviceArray:
    """An array in the program's GPU memory that the runtime allocated (a result, a kept twin). Exposes
    ``__cuda_array_interface__`` (CuPy, PyTorch, Numba take it without a copy); ``get()`` copies it to a
    NumPy array. Freed when the last reference goes."""

    def __init__(self, memory, shape, dtype):
        self.memory = memory
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.strides = _c_strides(self.shape, self.dtype.itemsize)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.ptr, self._keep = memory.malloc(self.nbytes)

    @property
    def __cuda_array_interface__(self):
        return self.view().__cuda_array_interface__

    def view(self) -> DeviceView:
        return DeviceView(self, self.ptr, self.shape, self.dtype, self.strides)

    def get(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.memory.copy(out.ctypes.data, self.ptr, self.nbytes)
        return out

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"

    def __del__(self):
        try:
            self.memory.free(self.ptr, self._keep)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the process frees it
            pass


class BufferPool:
    """Freed device buffers kept for the next allocation of the same size (up to ``keep`` per size and
    ``keep_bytes`` in all), as CuPy's and PyTorch's pools do: a program that returns a new device array per
    call would otherwise pay a ``cudaMalloc`` and a ``cudaFree`` (which waits for the whole device) per call.
    Before a kept buffer is handed out again ``sync`` runs (the device is synchronized), so no kernel the
    caller queued on the old array (on any stream) still reads it when the program writes it. ``free``
    gives memory back to the device."""

    def __init__(self, free, sync, keep: int = 2, keep_bytes: int = 4 << 30):
        self._free, self._sync = free, sync
        self.keep, self.keep_bytes = keep, keep_bytes
        self._kept: Dict[int, List[int]] = {}
        self.kept_bytes = 0

    def take(self, nbytes: int) -> Optional[int]:
        """A kept buffer of ``nbytes``, safe to write, or None."""
        kept = self._kept.get(nbytes)
        if not kept:
            return None
        p = kept.pop()  # taken before the synchronization, which lets other threads run
        self.kept_bytes -= nbytes
        err = self._sync()
        if err:
            self._free(p)
            raise RuntimeError(f"cudaDeviceSynchronize failed (CUDA error {err}) before reusing a buffer")
        return p

    def give(self, ptr: int, nbytes: int):
        """Keeps ``ptr`` for a later allocation of ``nbytes``, or frees it where enough is kept."""
        if len(self._kept.get(nbytes, ())) < self.keep and self.kept_bytes + nbytes <= self.keep_bytes:
            self._kept.setdefault(nbytes, []).append(ptr)
            self.kept_bytes += nbytes
        else:
            self._free(ptr)

    def release(self):
        """Frees every kept buffer."""
        for kept in self._kept.values():
            for p in kept:
                self._free(p)
        self._kept.clear()
        self.kept_bytes = 0


class _PinnedBlock:
    """Page-locked host memory of a program, freed when the last NumPy array on it goes."""

    def __init__(self, free, library, ptr: int):
        self._free, self._library, self.ptr = free, library, ptr

    def __del__(self):
        if self._library.is_loaded():  # at exit the library may be gone first: the process frees it
            self._free(self.ptr)


class CudaMemory:
    """GPU memory through the functions the program's CUDA file exports (``passes.gpu._DEVICE_MEMORY``),
    freed buffers kept in a :class:`BufferPool` (``memory.pool.release()`` frees them; an allocation that
    fails does so first). Builds older than the pool (no ``__dp_gpu_sync``) free at once."""

    def __init__(self, compiled):
        self._compiled = compiled

        def fn(name, restype, *argtypes):
            f = compiled._lib.get_symbol(name, restype)
            return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(f, ctypes.c_void_p).value)
        vp, size = ctypes.c_void_p, ctypes.c_size_t
        self._malloc = fn("__dp_gpu_malloc", vp, size)
        self._free = fn("__dp_gpu_free", None, vp)
        self._copy = fn("__dp_gpu_copy", ctypes.c_int, vp, vp, size)
        self._device_of = fn("__dp_gpu_device_of", ctypes.c_int, vp)
        self._current = fn("__dp_gpu_current", ctypes.c_int)
        sync = compiled.get_exported_function("__dp_gpu_sync", ctypes.c_int)  # None in builds older than the pool
        self.pool = BufferPool(self._free, sync, keep=2 if sync is not None else 0)
        wait = compiled.get_exported_function("__dp_gpu_wait_stream", ctypes.c_int)
        self._wait = fn("__dp_gpu_wait_stream", ctypes.c_int, ctypes.c_ulonglong) if wait is not None else None
        self._sync = sync
        pinned = compiled.get_exported_function("__dp_gpu_host_malloc", ctypes.c_void_p)  # None in older builds
        self._host_malloc = fn("__dp_gpu_host_malloc", vp, size) if pinned is not None else None
        self._host_free = fn("__dp_gpu_host_free", None, vp) if pinned is not None else None

    def host_empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised host array in page-locked memory, pageable where the build exports no such
        allocation or it fails (page-locked memory is a limited resource of the host)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        ptr = self._host_malloc(nbytes) if self._host_malloc is not None else None
        if not ptr:
            return np.empty(shape, dtype)
        buf = (ctypes.c_byte * max(nbytes, 1)).from_address(ptr)
        buf._block = _PinnedBlock(self._host_free, self._compiled._lib, ptr)  # lives as long as the array
        return np.ndarray(shape, dtype, buffer=buf)

    def wait_for(self, streams):
        """Waits for the caller's work on the streams its device arrays name (see :class:`DeviceView`);
        builds older than that export wait for the whole device."""
        for stream in streams:
            err = self._wait(stream) if self._wait is not None else (self._sync() if self._sync is not None else 0)
            if err:
                raise RuntimeError(f"waiting for the caller's CUDA stream {stream:#x} failed (CUDA error {err})")

    def malloc(self, nbytes):
        p = self.pool.take(nbytes)
        if p is not None:
            return p, nbytes
        p = self._malloc(nbytes)
        if not p and self.pool.kept_bytes:  # out of memory: give the kept buffers back and try again
            self.pool.release()
            p = self._malloc(nbytes)
        if not p:
            raise MemoryError(f"cudaMalloc of {nbytes} bytes failed on GPU {self.current()}")
        return p, nbytes

    def free(self, ptr, nbytes):
        if self._compiled._lib.is_loaded():  # at exit the library may be gone first: the process frees it
            self.pool.give(ptr, nbytes)

    def copy(self, dst: int, src: int, nbytes: int):
        err = self._copy(dst, src, nbytes)
        if err:
            raise RuntimeError(f"cudaMemcpy of {nbytes} bytes failed (CUDA error {err})")

    def device_of(self, ptr: int) -> int:
        return self._device_of(ptr)

    def current(self) -> int:
        return self._current()

    def argument(self, view: DeviceView):
        return view  # DaCe passes __cuda_array_interface__'s pointer for GPU storage


class HostBackedDeviceArray:
    """A host NumPy array presented as a device array (only ``__cuda_array_interface__``): what a caller
    passes to a program whose GPU data flow is emulated on the host (:class:`HostMemory`), in the tests
    and in ``benchmarks/gpu.py --emulated``. ``host`` is the array itself (the program updates it)."""

    def __init__(self, arr):
        self.host = np.ascontiguousarray(arr)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "data": (self.host.ctypes.data, False),
                "strides": None, "version": 3}


class HostMemory:
    """The same interface on host memory, for programs whose GPU data flow is emulated on the host."""

    def malloc(self, nbytes):
        buf = np.empty(max(nbytes, 1), np.uint8)
        return buf.ctypes.data, buf

    def host_empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def free(self, ptr, keep):
        pass

    def wait_for(self, streams):
        pass  # host code runs in order

    def copy(self, dst: int, src: int, nbytes: int):
        ctypes.memmove(dst, src, nbytes)

    def device_of(self, ptr: int) -> int:
        return 0

    def current(self) -> int:
        return 0

    def argument(self, view: DeviceView) -> np.ndarray:
        """The view as a NumPy array on the same memory (the emulated program's arguments are host arrays)."""
        span = (sum((n - 1) * s for n, s in zip(view.shape, view.strides)) + view.itemsize) if view.size else 0
        buf = (ctypes.c_byte * max(span, 1)).from_address(view.ptr)
        return np.ndarray(view.shape, view.dtype, buffer=buf, strides=view.strides)


def page_locked(arr) -> bool:
    """Whether ``arr`` is a host array in a program's page-locked memory (:meth:`CudaMemory.host_empty`)."""
    return isinstance(getattr(arr, "base", None), ctypes.Array) and isinstance(getattr(arr.base, "_block", None),
                                                                               _PinnedBlock)


def _like(template, arr: DeviceArray):
    """``arr`` as the caller's kind of device array (no copy; the result keeps ``arr`` alive)."""
    module = type(template).__module__.split(".")[0]
    if module == "cupy":
        import cupy
        return cupy.asarray(arr)
    if module == "torch":
        import torch
        return torch.as_tensor(arr, device=f"cuda:{arr.memory.current()}")
    return arr


class DeviceCall:
    """How one program's arguments reach it when some arrays are on the GPU (see the module docstring).

    ``twins``: argument -> its device twin (the lowering's record); ``written``: the arguments the program
    writes (or a function that lists them); ``returns``: its ``__return*`` arrays. ``memory`` is created on first use (the library must be
    loaded): :class:`CudaMemory` for a CUDA build, :class:`HostMemory` for a host emulation."""

    def __init__(self, compiled, twins: Dict[str, str], written, returns, flag: str):
        self.compiled = compiled
        self.twins = dict(twins)
        self._written = written  # a set, or a function giving it (worked out on first need)
        self.returns = tuple(returns)
        self.flag = flag
        self._memory = None
        self._kept: Dict[tuple, object] = {}  # (name, shape, dtype) -> a buffer kept across calls
        self._shapes: Dict[tuple, tuple] = {}  # (array, symbol values) -> (shape, dtype): no sympy per call

    @property
    def written(self) -> set:
        if callable(self._written):
            self._written = set(self._written())
        return self._written

    @property
    def memory(self):
        if self._memory is None:
            gpu = self.compiled.get_exported_function("__dp_gpu_malloc", ctypes.c_void_p) is not None
            self._memory = CudaMemory(self.compiled) if gpu else HostMemory()
        return self._memory

    def select_device(self) -> int:
        """The rank's GPU, selected now: the first selection is a collective over ``MPI_COMM_WORLD``
        (``MPI_Comm_split_type``, for the node-local rank), so every rank makes it at the same point, when
        it loads the program. -1 where the process sees no GPU; 0 for a host emulation."""
        return self.memory.current()

    def views(self, kwargs) -> Tuple[dict, bool]:
        """``kwargs`` with every device array replaced by its :class:`DeviceView`; whether there was one."""
        out, on_gpu = {}, False
        for k, v in kwargs.items():
            view = device_view(v)
            on_gpu |= view is not None
            out[k] = v if view is None else view
        return out, on_gpu

    def _kept_buffer(self, name, shape, dtype, device: bool):
        key = (name, tuple(shape), np.dtype(dtype).str, device)
        buf = self._kept.get(key)
        if buf is None:
            buf = DeviceArray(self.memory, shape, dtype) if device else self.memory.host_empty(shape, dtype)
            self._kept[key] = buf
        return buf

    def _check_device(self, name: str, view: DeviceView):
        where, here = self.memory.device_of(view.ptr), self.memory.current()
        if where == -1:
            raise ValueError(f"argument '{name}' says it is a device array, but its memory is host memory")
        if where >= 0 and here >= 0 and where != here:
            raise ValueError(f"argument '{name}' is on GPU {where}, but this rank runs on GPU {here} (ranks take "
                             "GPUs by node-local rank: give each rank its arrays on its own GPU)")

    def prepare(self, kwargs, on_gpu: bool, placeholders: bool = False):
        """The program's arguments for one call, and a function that turns its results into the caller's.

        ``kwargs`` is the checked call (device arrays as views); ``placeholders``: the arrays are another
        rank's stand-ins (io="root" on ranks other than 0), which hold no data to move."""
        if not on_gpu and not self.twins:  # a CPU program called with NumPy: nothing to do
            return kwargs, _unchanged
        memory = self.memory
        memory.current()  # the rank's GPU on this thread (CUDA's current device is per thread)
        if on_gpu:
            memory.wait_for({v.stream for v in kwargs.values() if isinstance(v, DeviceView) and v.stream is not None})
        full = dict(kwargs)
        after = []  # (copy to, copy from, bytes) once the program returned
        template = next((v.owner for v in kwargs.values() if isinstance(v, DeviceView)), None)
        for name, value in kwargs.items():
            view = value if isinstance(value, DeviceView) else None
            if view is not None:
                self._check_device(name, view)
            twin = self.twins.get(name)
            if twin is not None:
                if not on_gpu:  # NumPy callers: a twin kept across calls; the program copies in and out
                    full[twin] = memory.argument(self._kept_buffer(twin, value.shape, value.dtype, True).view())
                elif view is not None:  # the caller's device array is the twin; the host side is scratch
                    full[twin] = memory.argument(view)
                    full[name] = self._kept_buffer(name, view.shape, view.dtype, False)
                else:  # a host array beside device arrays: uploaded to a kept twin, copied back if written
                    dev = self._kept_buffer(twin, value.shape, value.dtype, True)
                    full[twin] = memory.argument(dev.view())
                    if not placeholders:
                        memory.copy(dev.ptr, value.ctypes.data, value.nbytes)
                        if name in self.written:
                            after.append((value.ctypes.data, dev.ptr, value.nbytes))
            elif view is not None:  # only MPI or host code touches it: through a host buffer
                host = self._kept_buffer(name, view.shape, view.dtype, False)
                memory.copy(host.ctypes.data, view.ptr, view.nbytes)
                full[name] = host
                if name in self.written:
                    after.append((view.ptr, host.ctypes.data, view.nbytes))
        if self.twins:
            full[self.flag] = int(on_gpu)
        results = {}
        for ret in self.returns:  # DaCe allocates the host side of a result; its twin is ours to pass
            twin = self.twins.get(ret)
            if twin is None:
                continue
            shape, dtype = self._shape(twin, full)
            if on_gpu and not placeholders:  # a new device array per call: each call's result is the caller's
                results[ret] = dev = DeviceArray(memory, shape, dtype)
            else:
                dev = self._kept_buffer(twin, shape, dtype, True)
            full[twin] = memory.argument(dev.view())

        def finish(result):
            for dst, src, nbytes in after:
                memory.copy(dst, src, nbytes)
            if not on_gpu or placeholders or result is None:
                return result
            values = list(result) if isinstance(result, tuple) else [result]
            out = []
            for ret, val in zip(self.returns, values):
                dev = results.get(ret)
                if dev is None and isinstance(val, np.ndarray):  # a host result (a gather's target): uploaded
                    dev = DeviceArray(memory, val.shape, val.dtype)
                    memory.copy(dev.ptr, np.ascontiguousarray(val).ctypes.data, val.nbytes)
                out.append(val if dev is None else _like(template, dev))
            return out[0] if len(out) == 1 else tuple(out)
        return full, finish

    def _shape(self, name, full):
        from .program import _syms
        symbols = _syms(full)
        key = (name, tuple(sorted(symbols.items())))
        found = self._shapes.get(key)
        if found is None:
            import dace
            sdfg = self.compiled.sdfg
            symbols = {**{k: int(v) for k, v in sdfg.constants.items() if isinstance(v, (int, np.integer))}, **symbols}
            desc = sdfg.arrays[name]
            found = self._shapes[key] = (tuple(int(dace.symbolic.evaluate(s, symbols)) for s in desc.shape),
                                         desc.dtype.as_numpy_dtype())
        return found


def _unchanged(result):
    return result
