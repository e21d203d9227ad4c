"""A built program in a job's ranks: ``compile`` (rank 0 builds, the others load), ``load``, and the
``Program`` each rank calls, which checks the arguments on every rank and passes device arrays through.
"""
import ctypes
import enum
import os
import time
from typing import Dict, Tuple

import numpy as np

import dace
from dace.sdfg import SDFG

from ..compat import array_pointer, construct_arguments, fast_call
from ..errors import ScheduleError
from ..ir import ranks_needed
from ..ir.record import record_of
from ..ir.residency import ARGS_ON_GPU
from .device_arrays import DeviceArray, DeviceCall, DeviceView
from ._plain_worker import global_array_hint
from .build import _BOUND_FILE, build


def as_array(value):
    """NumPy view of an argument (torch tensors included, without importing torch)."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return np.asarray(value)
    return value


def by_argument_name(aliases, kwargs):
    """``kwargs`` with a caller's name for an argument that the front end renamed (``aliases``: an ONNX
    graph input ``0`` is the argument ``t_0``) replaced by the argument's own name."""
    if not aliases:
        return kwargs
    out, given_as = {}, {}
    for k, v in kwargs.items():
        name = aliases.get(k, k)
        if name in out:
            raise ValueError(f"argument '{name}' is given twice: as '{given_as[name]}' and as '{k}'")
        out[name], given_as[name] = v, k
    return out


def _with_bound(bound, kwargs):
    merged = {k: v for k, v in bound.items() if k not in kwargs}
    merged.update({k: as_array(v) for k, v in kwargs.items()})
    return merged


def _wait(comm, poll=0.02):
    """A barrier that sleeps instead of spinning (MPICH busy-polls while rank 0 compiles)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll)


def _supplied_by_runtime(record) -> set:
    """The arguments of a GPU-lowered program that the runtime passes, never the caller: the device twins
    and the symbol saying where the caller's arrays are (runtime/device_arrays.py)."""
    if record is None or not record.device_twins:
        return set()
    return set(record.device_twins.values()) | {ARGS_ON_GPU}


class CallSignature:
    """What a call of one program must look like, worked out once: argument names and descriptors, the
    symbols that size them, and (per set of symbol values) every array's shape and strides. Checking a
    call is then a few comparisons, with nothing of DaCe's symbolic machinery on the per-call path."""

    def __init__(self, sdfg: SDFG, record=None):
        supplied = _supplied_by_runtime(record or record_of(sdfg))  # device twins and their symbol
        self.args = {k: v for k, v in sdfg.arglist().items() if not k.startswith("__return") and k not in supplied}
        self.arrays = {k: d for k, d in self.args.items() if isinstance(d, dace.data.Array)}
        needed, accepted = call_symbols(sdfg, self.args)
        #: symbols a call must give or its arrays' shapes must tell, and those it may give (:func:`call_symbols`)
        self.free, self.accepted = needed - supplied, accepted - supplied
        self.scalars = [k for k in self.args if k not in self.arrays]
        self.dtypes = {k: np.dtype(d.dtype.as_numpy_dtype()) for k, d in self.arrays.items()}
        self.symbol_names = sorted(self.free)
        # sizes fixed by sdfg.specialize() are constants, no longer arguments
        self.constants = {k: int(v) for k, v in sdfg.constants.items() if isinstance(v, (int, np.integer))}
        self.sizers = sizing_dimensions({k: d.shape for k, d in self.arrays.items()}, self.free)
        self._layouts = {}

    def with_symbols(self, kwargs, sizers=None):
        """``kwargs`` with the symbols it does not give read off the arrays' shapes, as calling the SDFG in
        one process does (``A: float64[N, M]`` given a 37 x 70 array: N = 37, M = 70); ``sizers`` replaces
        the signature's own dimensions (the global shapes of ``dp.run``'s arguments). Raises ValueError naming
        the arrays when two of them disagree on a symbol, and the symbols that nothing gives."""
        out = dict(kwargs)
        for sym, dims in (self.sizers if sizers is None else sizers).items():
            if sym in kwargs:
                continue
            seen = {(name, dim): np.shape(kwargs[name])[dim] for name, dim in dims
                    if name in kwargs and dim < np.ndim(kwargs[name])}
            if len(set(seen.values())) > 1:
                raise ValueError(f"the arguments disagree on symbol '{sym}': " +
                                 ", ".join(f"{n}.shape[{d}] = {v}" for (n, d), v in seen.items()))
            if seen:
                out[sym] = int(next(iter(seen.values())))
        missing = sorted(s for s in self.free - set(self.constants) if s not in out)
        if missing:
            raise ValueError(f"symbol(s) {missing} not given and no argument's shape gives them: pass them by "
                             f"name ({', '.join(f'{s}=...' for s in missing)})")
        return out

    def layout(self, symbols: Dict[str, int]):
        """{array: (shape, strides in bytes)} for these symbol values (cached)."""
        key = tuple(sorted(symbols.items()))
        lay = self._layouts.get(key)
        if lay is None:
            lay = {}
            symbols = {**self.constants, **symbols}
            for name, desc in self.arrays.items():
                shape = tuple(int(dace.symbolic.evaluate(s, symbols)) for s in desc.shape)
                strides = tuple(int(dace.symbolic.evaluate(s, symbols)) * self.dtypes[name].itemsize
                                for s in desc.strides)
                lay[name] = (shape, strides)
            self._layouts[key] = lay
        return lay

    def in_layout(self, kwargs) -> dict:
        """``kwargs`` with each array of a parameter's shape but not its layout copied into that layout where
        the layout is C or Fortran order: what ``run`` passes from the caller's file of inputs, which holds
        each array in its own order (a Fortran-ordered parameter needs a Fortran-ordered array)."""
        try:
            lay = self.layout(_syms(self.with_symbols(kwargs)))
        except ValueError:
            return kwargs  # the call's check names what is wrong
        out = dict(kwargs)
        for name, (shape, strides) in lay.items():
            arr = out.get(name)
            if not isinstance(arr, np.ndarray) or arr.shape != tuple(shape) or arr.strides == tuple(strides):
                continue
            out[name] = _order(shape, strides, arr.itemsize).copy(arr)
        return out

    def check(self, kwargs) -> tuple:
        """Raises ValueError naming the argument when a call is wrong; returns the call's key (shapes,
        scalar values and symbols), equal for calls that the other ranks can mirror without new metadata."""
        unknown = [k for k in kwargs if k not in self.args and k not in self.accepted]
        if unknown:
            raise ValueError(f"unknown argument(s) {unknown}; the program takes {sorted(self.args)}")
        symbols = _syms(kwargs)
        lay = self.layout(symbols)
        for name in self.args:
            if name not in kwargs:
                raise ValueError(f"missing argument '{name}'" + global_array_hint(name))
        shapes = []
        for name, (shape, strides) in lay.items():
            arr = kwargs[name]
            if not isinstance(arr, (np.ndarray, DeviceView)):
                raise ValueError(f"argument '{name}' must be a NumPy array, a tensor or a device array (CuPy, "
                                 f"PyTorch CUDA, __cuda_array_interface__), got {type(arr).__name__}")
            if arr.dtype != self.dtypes[name]:
                raise ValueError(f"argument '{name}' has dtype {arr.dtype}, expected {self.dtypes[name]}")
            check_layout(name, arr, shape, strides)
            shapes.append((shape, arr.dtype.str))
        scalars = tuple(_scalar(kwargs[k]) for k in self.scalars)
        return tuple(shapes), scalars, tuple(symbols.get(k) for k in self.symbol_names)

    def describe(self, kwargs) -> Dict[str, tuple]:
        """What the other ranks need to mirror a call given on rank 0 (shapes, dtypes, scalar values)."""
        out = {}
        for name in self.args:
            if name in self.arrays:
                out[name] = ("array", (kwargs[name].shape, kwargs[name].dtype))  # .str drops a struct's fields
            else:
                out[name] = ("value", _scalar(kwargs[name]))
        for name in self.free:
            if name in kwargs and name not in out:
                out[name] = ("value", int(kwargs[name]))
        return out


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def call_symbols(sdfg: SDFG, args: Dict[str, dace.data.Data]) -> Tuple[set, set]:
    """(needed, accepted): the free symbols a call of the compiled ``sdfg`` needs, those its argument list
    takes (as DaCe's own call passes them) and those that size its array arguments, and every free symbol,
    which a call may give. A nested SDFG's own symbol can show among the free symbols through a memlet's
    other side (NPBench's azimint_hist: 'bins', mapped from 'npt') without being an argument. ``args``: the
    SDFG's argument list (``sdfg.arglist()``)."""
    free = {str(s) for s in sdfg.free_symbols}
    sized = {str(s) for d in args.values() if isinstance(d, dace.data.Array) for s in d.free_symbols}
    return {s for s in free if s in args or s in sized}, free


def sizing_dimensions(shapes: Dict[str, tuple], free) -> Dict[str, list]:
    """{symbol: [(array, dimension)]} for every dimension that is exactly one free symbol."""
    out = {}
    for name, shape in shapes.items():
        for dim, extent in enumerate(shape):
            if str(extent) in free:
                out.setdefault(str(extent), []).append((name, dim))
    return out


def _c_order(shape, strides, itemsize) -> bool:
    """Whether ``strides`` (bytes) are those of a C-contiguous array of ``shape`` (extent-1 dimensions
    may have any stride, as in NumPy)."""
    step = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True


class Order(enum.Enum):
    """A parameter's layout as far as a caller's array can be put into it by one NumPy call."""
    C = "a C-ordered copy, e.g. np.ascontiguousarray"
    FORTRAN = "a Fortran-ordered copy, e.g. np.asfortranarray"
    OTHER = "an array with those strides"

    @property
    def remedy(self) -> str:
        return self.value

    def copy(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` in this order (itself where the order is neither C nor Fortran: the call's check refuses it)."""
        if self is Order.OTHER:
            return arr
        return np.ascontiguousarray(arr) if self is Order.C else np.asfortranarray(arr)


def _order(shape, strides, itemsize) -> Order:
    if _c_order(shape, strides, itemsize):
        return Order.C
    if _c_order(shape[::-1], strides[::-1], itemsize):
        return Order.FORTRAN
    return Order.OTHER


def check_layout(name: str, arr: np.ndarray, shape: tuple, strides: tuple):
    """Raises ValueError (naming the argument and both shapes) unless ``arr`` can be passed for a parameter
    of ``shape`` and ``strides`` (bytes).

    DaCe's own call of a program (``CompiledSDFG._construct_args``) passes only an array's data pointer
    and checks no shape: the program reads the parameter's elements in its own layout from that pointer.
    So, as there, an array of another shape is accepted when that reading is the one NumPy's
    ``arr.reshape(shape)`` gives: the same number of elements, both C-contiguous (a ``float64[25]``
    parameter takes an array of shape (25, 1), NPBench's nbody passes ``mass`` so). An array of the
    parameter's own shape must have its strides (extent-1 dimensions aside)."""
    if arr.shape == tuple(shape):
        if any(n != 1 and a != s for n, a, s in zip(shape, arr.strides, strides)):
            how = _order(shape, strides, arr.itemsize).remedy
            raise ValueError(f"argument '{name}' has strides {arr.strides}, expected {strides} (pass {how})")
        return
    size = 1
    for n in shape:
        size *= n
    if arr.size != size:
        raise ValueError(f"argument '{name}' has shape {arr.shape}, expected {shape} ({arr.size} element(s), "
                         f"the parameter has {size})")
    if not (arr.flags.c_contiguous and _c_order(shape, strides, arr.itemsize)):
        raise ValueError(f"argument '{name}' has shape {arr.shape}, expected {shape}: the same number of elements, "
                         "but an array of another shape is taken only when both are C-contiguous (pass "
                         f"np.ascontiguousarray({name}).reshape({shape}))")


def conform(name: str, arr: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    """``arr`` checked by :func:`check_layout` and seen with the parameter's shape (a view, no copy)."""
    check_layout(name, arr, shape, strides)
    return arr if arr.shape == tuple(shape) else arr.reshape(shape)


class _Caller:
    """Calls a compiled program through DaCe's ``fast_call``: the argument tuple is built by DaCe once per
    call key; later calls with the same key only swap in the arrays' data pointers.

    Every call returns new arrays: DaCe allocates its return arrays once and hands the same objects back
    at every call, each call overwriting the last one's result. Here each call allocates its own return
    arrays (``np.empty``, no copy: the program writes into them) and swaps their pointers into the
    argument tuple, so a result stays the caller's.

    The program's persistent buffers (rank-local arrays) are sized for the symbol values of its first
    call; when they change, the program is finalized and initialized again (on every rank, since every
    rank sees the same keys)."""

    def __init__(self, program: "Program"):
        self.program = program  # its ``compiled`` may be wrapped later (the PMPI counter does)
        self.key = None
        self.symbols = None
        self.template = None
        self.positions = ()
        self.returns = ()  # (position in the argument tuple, DaCe's description of the array) per result
        self.scalar = ()  # per result: returned as a Python scalar
        self.initargs = ()

    @staticmethod
    def _construct(c, kwargs):
        """DaCe's argument tuple with new return arrays. Views are allowed: ``CallSignature.check`` has
        checked every array's layout (DaCe refuses a view only to keep its own analysis sound)."""
        old = dace.Config.get_bool("compiler", "allow_view_arguments")
        dace.Config.set("compiler", "allow_view_arguments", value=True)
        try:
            return construct_arguments(c, kwargs)
        finally:
            dace.Config.set("compiler", "allow_view_arguments", value=old)

    def __call__(self, kwargs, key):
        c = self.program.compiled
        if key != self.key:
            symbols = key[2]
            if c._initialized and symbols != self.symbols:
                c.finalize()
            argtuple, initargs = self._construct(c, kwargs)
            sig = list(c._sig)
            self.key, self.symbols, self.initargs = key, symbols, initargs
            self.template = None  # constants folded out of the signature: keep DaCe's own path
            if len(argtuple) == len(sig):
                descs = list(c._retarray_shapes)
                if all(len(d) == 6 and d[0] in sig for d in descs):
                    self.template = list(argtuple)
                    self.positions = tuple((i, name) for i, name in enumerate(sig)
                                           if isinstance(kwargs.get(name), (np.ndarray, DeviceView, DeviceArray)))
                    self.returns = tuple((sig.index(d[0]), d) for d in descs)
                    arrays = self.program.sdfg.arrays
                    self.scalar = tuple(isinstance(arrays[d[0]], dace.data.Scalar)
                                        or isinstance(arrays[d[0]].dtype, dace.dtypes.pyobject) for d in descs)
            return fast_call(c, argtuple, initargs, True)
        if self.template is None:
            argtuple, initargs = self._construct(c, kwargs)
            return fast_call(c, argtuple, initargs, True)
        args = self.template
        for i, name in self.positions:
            v = kwargs[name]
            args[i] = ctypes.c_void_p(v.__array_interface__["data"][0] if isinstance(v, np.ndarray) else
                                      v.__cuda_array_interface__["data"][0])
        results = []
        for i, desc in self.returns:
            arr = c._create_array(*desc)
            args[i] = ctypes.c_void_p(_array_pointer(arr, desc[2]))
            results.append(arr)
        c.fast_call(tuple(args), self.initargs, do_gpu_check=c.has_gpu_code)
        # what DaCe's _convert_return_values makes of its own arrays, made of ours
        results = [r.item() if s else r for r, s in zip(results, self.scalar)]
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)


def _array_pointer(arr, storage) -> int:
    return array_pointer(arr, storage)


class Program:
    """A lowered program loaded on every rank of an MPI job. Call it on every rank; pass inputs on rank 0.

    Per call, rank 0 checks its arguments against a signature computed once and broadcasts one integer
    (whether the other ranks can repeat the last call's metadata); only a call with new shapes, scalars
    or symbol values broadcasts metadata."""

    _SAME, _NEW, _ERROR = 0, 1, 2

    def __init__(self, compiled, comm, bound=None, record=None):
        self.compiled = compiled
        self.sdfg = compiled.sdfg
        self.comm = comm
        self.bound = bound or {}
        twins = dict(record.device_twins) if record else {}
        self.signature = CallSignature(self.sdfg, record)
        # device arrays in and out, and the twins of a GPU-lowered program (runtime/device_arrays.py)
        self.device = DeviceCall(compiled, twins, lambda: written_arguments(self.sdfg),
                                 [k for k in self.sdfg.arglist() if k.startswith("__return")], ARGS_ON_GPU)
        self.device.select_device()  # a GPU build: every rank here, not at its first CUDA call (a collective)
        self._caller = _Caller(self)
        self._flag = np.zeros(1, dtype=np.int64)
        self._key = None
        self._mirror = None  # on ranks other than 0: the arguments of the last call, as placeholders
        self.record = record  # the ProgramRecord saved beside the build
        self.layouts = dict(record.layouts) if record else {}  # argument tiles for io="distributed" (else empty)

    def __call__(self, **kwargs):
        kwargs = by_argument_name(self.record.aliases if self.record else {}, kwargs)
        if self.layouts:
            return self._call_distributed(kwargs)
        comm, flag = self.comm, self._flag
        on_gpu = False
        if comm.rank == 0:
            kwargs, on_gpu = self.device.views(kwargs)  # device arrays first: as_array would copy them to the host
            kwargs = _with_bound(self.bound, kwargs)
            try:
                kwargs = self.signature.with_symbols(kwargs)
                key = self.signature.check(kwargs) + (on_gpu, )
                flag[0] = self._SAME if key == self._key else self._NEW
            except Exception as e:  # reported on every rank, so no rank waits forever
                flag[0], error = self._ERROR, f"{type(e).__name__}: {e}"
        comm.Bcast(flag, root=0)
        if flag[0] == self._ERROR:
            error = comm.bcast(error if comm.rank == 0 else None, root=0)
            raise ValueError(f"rank 0 rejected the inputs: {error}")
        if flag[0] == self._NEW:
            meta, on_gpu = comm.bcast((self.signature.describe(kwargs), on_gpu) if comm.rank == 0 else None, root=0)
            if comm.rank != 0:
                self._mirror = self.signature.in_layout({name: (np.empty(v[0], dtype=v[1]) if kind == "array" else v)
                                                         for name, (kind, v) in meta.items()})
                key = self.signature.check(self._mirror) + (on_gpu, )
            self._key = key
        on_gpu = self._key[-1]
        if comm.rank != 0:
            kwargs = self._mirror
        kwargs, finish = self.device.prepare(kwargs, on_gpu, placeholders=comm.rank != 0)
        result = finish(self._caller(kwargs, self._key))
        return result if comm.rank == 0 else None

    def _call_distributed(self, kwargs):
        """io="distributed": every rank passes its own tiles and gets its own results back. The arguments
        are checked on every rank, and a mistake on any rank is raised on all of them."""
        lays = self.layouts
        kwargs, on_gpu = self.device.views(kwargs)  # device arrays first: as_array would copy them to the host
        kwargs = {k: as_array(v) for k, v in kwargs.items()}
        kwargs.update({k: v for k, v in self.bound.items() if k not in kwargs and k not in lays})
        error, flag = None, self._flag
        try:
            kwargs = self.signature.with_symbols(kwargs)  # from the tiles' dimensions that are not split
            syms = _syms(kwargs)
            for k, v in self.bound.items():  # bound weights with a layout are whole arrays: each rank's tile
                if k not in kwargs:
                    kwargs[k] = lays[k].scatter(v, self.comm.rank, **syms)
            key = self.signature.check(kwargs) + (on_gpu, )
            kwargs, finish = self.device.prepare(kwargs, on_gpu)
            flag[0] = 0
        except Exception as e:
            error, flag[0] = f"rank {self.comm.rank}: {type(e).__name__}: {e}", 1
        from mpi4py import MPI
        self.comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        if flag[0]:
            errors = [e for e in self.comm.allgather(error) if e]
            raise ValueError("inputs rejected: " + "; ".join(errors))
        return finish(self._caller(kwargs, key))


def describe_inputs(sdfg: SDFG, kwargs) -> Dict[str, tuple]:
    """Checks the arguments given on rank 0 and returns what the other ranks need to call the program."""
    sig = CallSignature(sdfg)
    kwargs = {k: (np.asarray(v) if k in sig.arrays else v) for k, v in kwargs.items()}
    sig.check(kwargs)
    return sig.describe(kwargs)


def _syms(kwargs):
    return {k: v for k, v in kwargs.items() if isinstance(v, (int, np.integer))}


def compile(sdfg: SDFG, comm=None) -> Program:
    """For a script started with ``mpiexec -n N python -m mpi4py script.py``: rank 0 builds the lowered
    program, the other ranks wait without spinning and then load the same library. A build error on
    rank 0 is raised on every rank."""
    from mpi4py import MPI
    comm = comm or MPI.COMM_WORLD
    need = ranks_needed(sdfg)
    if comm.size < need:
        raise ScheduleError(f"'{sdfg.name}' needs {need} MPI ranks, but this job has {comm.size}")
    status = None
    folder = None
    if comm.rank == 0:
        try:
            folder = build(sdfg)
        except Exception as e:
            status = f"{type(e).__name__}: {e}"
    _wait(comm)
    status, folder = comm.bcast((status, folder), root=0)
    if status is not None:
        raise RuntimeError(f"building '{sdfg.name}' failed on rank 0: {status}")
    return load(folder, comm)


def load(build_folder: str, comm=None) -> Program:
    from mpi4py import MPI
    from dace.sdfg.utils import load_precompiled_sdfg
    from .toolchain import runtime_environment
    comm = comm or MPI.COMM_WORLD
    for k, v in runtime_environment({}).items():  # before the library's first BLAS call
        os.environ.setdefault(k, v)
    bound = {}
    path = os.path.join(build_folder, _BOUND_FILE)
    if os.path.exists(path):
        with np.load(path, allow_pickle=False) as f:
            bound = {k: f[k].copy() for k in f.files}
    from ..ir.record import read
    record = read(build_folder)
    if record is None:
        raise ValueError(f"'{build_folder}' holds no dace-partition program (no {'dace_partition.json'}): build it "
                         "with dace_partition.compile or dace_partition.run")
    prog = Program(load_precompiled_sdfg(build_folder), comm, bound, record)
    prog.folder = build_folder  # where it was built (DaCe 2 under mpiexec: not what sdfg.build_folder says)
    return prog

def written_arguments(sdfg: SDFG):
    """Non-transient arrays the program writes (its results when it returns nothing)."""
    from ..schedule import ordered_states
    names = []
    for st in ordered_states(sdfg):
        for n in st.data_nodes():
            desc = sdfg.arrays[n.data]
            if not desc.transient and st.in_degree(n) > 0 and not n.data.startswith("__return") and n.data not in names:
                names.append(n.data)
    return names
