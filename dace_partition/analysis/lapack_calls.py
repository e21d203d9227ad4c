"""LAPACK calls (``np.linalg.solve``, ``inv``, ``cholesky``), which a GPU lowering cannot run yet.

DaCe's LAPACK nodes expand to host calls of MKL or OpenBLAS, or to cuSOLVER's. With ``device="gpu"`` the
arrays they read live in GPU memory, so a host expansion would hand host LAPACK device pointers, and the
cuSOLVER expansion has not been run on a card by this package. Such a program is refused before any rank
starts; on CPUs the calls run on the BLAS library of the rest of the program (``toolchain.blas_build``).
"""
from typing import List, NamedTuple

from ..compat import nodes_of
from ..schedule.discover import first_read


def lapack_types() -> tuple:
    """DaCe's library nodes that call LAPACK (imported on use: DaCe's libraries load on first import)."""
    from dace.libraries.lapack import nodes as lapack
    from dace.libraries.linalg import nodes as linalg
    return (lapack.Getrf, lapack.Getri, lapack.Getrs, lapack.Potrf, linalg.Solve, linalg.Inv, linalg.Cholesky)


class LapackCall(NamedTuple):
    """One LAPACK node: its label, the array and subset it reads first, and its state."""
    label: str
    kind: str
    array: str
    subset: str
    state: str

    def reason(self) -> str:
        return (f"in state '{self.state}': it is read by '{self.label}' ({self.kind}, a LAPACK call such as "
                "np.linalg.solve, inv or cholesky). With device='gpu' its data lives in GPU memory, where the "
                "host LAPACK that DaCe calls cannot read it, and running it on cuSOLVER is not supported yet; "
                "lower this program with device='cpu'")


def lapack_calls(sdfg) -> List[LapackCall]:
    """Every LAPACK node of ``sdfg`` (nested SDFGs included), in state order."""
    kinds = lapack_types()
    out = []
    for _, st, node in nodes_of(sdfg, kinds):
        array, subset = first_read(st, node)
        out.append(LapackCall(node.label, type(node).__name__, array, subset, st.label))
    return out
