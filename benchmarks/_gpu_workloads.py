"""The four workloads of the GPU issue, as a user writes them in NumPy, with their row-split schedules.

Each workload builds a DaCe program specialized to its sizes (``io="distributed"`` needs them when
lowering), gives its inputs, and computes the reference with PyTorch in float64 (on the GPU when there is
one: the Jacobi's 200 sweeps of 8192^2 would take a minute in NumPy). ``--small`` sizes exercise the
same code paths on a machine without a GPU.
"""
import contextlib
import os
from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np


@dataclass(frozen=True)
class GpuWorkload:
    name: str
    label: str
    sizes: Dict[str, int]  # specialized before lowering
    small: Dict[str, int]
    arrays: Dict[str, Tuple[Tuple[str, ...], str]]  # argument -> (shape in size names, dtype)
    inplace: Tuple[str, ...] = ()  # arguments the program updates (the Jacobi's A and B)
    rtol: float = 1e-4
    base: str = ""  # a variant of this workload's program, lowered under ``settings``
    settings: Tuple[Tuple[str, str], ...] = ()  # environment while lowering (a GPU pass's switch)

    @property
    def program(self):
        return self.base or self.name

    @property
    def is_variant(self) -> bool:
        """A variant of another workload (the peers run only the workload itself)."""
        return bool(self.base)

    def shape(self, arg, sizes):
        return tuple(sizes[s] for s in self.arrays[arg][0])

    def inputs(self, rng, sizes):
        out = {}
        for arg, (_, dtype) in self.arrays.items():
            out[arg] = rng.random(self.shape(arg, sizes), dtype=np.float64).astype(dtype)
        return out


WORKLOADS = {
    w.name: w
    for w in (
        GpuWorkload("softmax", "row softmax float32[8192, 4096]", dict(N=8192, M=4096), dict(N=64, M=48),
                    {"x": (("N", "M"), "float32")}),
        GpuWorkload("softmax_apart", "row softmax float32[8192, 4096], four kernels (not fused)",
                    dict(N=8192, M=4096), dict(N=64, M=48), {"x": (("N", "M"), "float32")}, base="softmax",
                    settings=(("DACE_PARTITION_GPU_FUSION", "0"), )),
        GpuWorkload("softmax_unstaged", "row softmax float32[8192, 4096], one row kernel reading x three times",
                    dict(N=8192, M=4096), dict(N=64, M=48), {"x": (("N", "M"), "float32")}, base="softmax",
                    settings=(("DACE_PARTITION_GPU_ROW_CACHE", "0"), )),
        GpuWorkload("matmul", "matmul float64 4096^2", dict(N=4096), dict(N=64),
                    {"A": (("N", "N"), "float64"), "B": (("N", "N"), "float64")}, rtol=1e-10),
        GpuWorkload("mlp", "MLP float32 x[8192,1024] @ W1[1024,4096], ReLU, @ W2[4096,1024]",
                    dict(N=8192, K=1024, H=4096), dict(N=64, K=16, H=32),
                    {"x": (("N", "K"), "float32"), "W1": (("K", "H"), "float32"), "W2": (("H", "K"), "float32")}),
        GpuWorkload("jacobi", "Jacobi float32[8192, 8192], T=100 (200 sweeps) as written",
                    dict(N=8192, T=100), dict(N=40, T=3),
                    {"A": (("N", "N"), "float32"), "B": (("N", "N"), "float32")}, inplace=("A", "B")),
    )
}


def lowered(name, ranks, small=False):
    """The workload's SDFG lowered with ``device="gpu"``, ``io="distributed"``, rows split over ``ranks``."""
    import dace_partition as dp
    w = WORKLOADS[name]
    sizes = w.small if small else w.sizes
    sdfg = programs()[w.program].to_sdfg()
    sdfg.name = f"gpu_{name}_{ranks}r{'_small' if small else ''}"
    sdfg.specialize({k: v for k, v in sizes.items() if k != "T"})
    schedule = {m.name: (ranks, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}
    with variant_settings(w):
        dp.lower(sdfg, schedule, device="gpu", io="distributed")
    return sdfg


@contextlib.contextmanager
def variant_settings(w):
    """The variant's settings (``DACE_PARTITION_GPU_FUSION=0``, ...) while it is lowered or priced; the
    caller's settings are back afterwards."""
    before = {k: os.environ.get(k) for k, _ in w.settings}
    os.environ.update(dict(w.settings))
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def torch_of(torch, a):
    """A PyTorch tensor sharing ``a``'s memory (DLPack where this PyTorch cannot read this NumPy's arrays)."""
    a = np.ascontiguousarray(a)
    try:
        return torch.from_numpy(a)
    except (RuntimeError, TypeError):
        return torch.utils.dlpack.from_dlpack(a)


def numpy_of(t):
    t = t.detach().cpu()
    try:
        return t.numpy()
    except (RuntimeError, TypeError):
        return np.from_dlpack(t)


def reference(name, data, sizes, torch, device):
    """The workload's result in float64 (PyTorch): {argument or '__return': array}."""
    t = {k: torch_of(torch, v).to(device=device, dtype=torch.float64) for k, v in data.items()}
    name = WORKLOADS[name].program
    if name == "softmax":
        return {"__return": torch.softmax(t["x"], dim=-1)}
    if name == "matmul":
        return {"__return": t["A"] @ t["B"]}
    if name == "mlp":
        return {"__return": torch.relu(t["x"] @ t["W1"]) @ t["W2"]}
    A, B = t["A"], t["B"]
    for _ in range(sizes["T"]):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return {"A": A, "B": B}


def programs():
    """The DaCe programs (imported here: the peers' process has no DaCe)."""
    import dace
    f32, f64 = dace.float32, dace.float64
    N, M, K, H, T = (dace.symbol(s) for s in "NMKHT")

    @dace.program
    def softmax(x: f32[N, M]):
        mx = np.max(x, axis=-1)
        e = np.exp(x - mx[:, np.newaxis])
        s = np.sum(e, axis=-1)
        return e / s[:, np.newaxis]

    @dace.program
    def matmul(A: f64[N, N], B: f64[N, N]):
        return A @ B

    @dace.program
    def mlp(x: f32[N, K], W1: f32[K, H], W2: f32[H, K]):
        h = np.maximum(x @ W1, 0.0)
        return h @ W2

    @dace.program
    def jacobi(A: f32[N, N], B: f32[N, N]):
        for t in range(T):
            B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
            A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])

    return dict(softmax=softmax, matmul=matmul, mlp=mlp, jacobi=jacobi)
