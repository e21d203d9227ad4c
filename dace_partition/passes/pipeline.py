"""The lowering as one DaCe ``Pipeline``: every pass applies a :class:`~dace_partition.plan.LoweringPlan`
made before it (:func:`lowering_pipeline`), in the order their dependencies declare.

    PartitionKernels      the plan's kernels on their grids: rank-local buffers, scatters and gathers
    FuseRoundTrips        the round trips through rank 0 between kernels that the plan removes (fuse=True)
    FuseLoops             ... and across a loop's iterations (fuse=True)
    LocalizeArguments     rank-local arguments (io="distributed")
    BroadcastBranchData   the data that conditions read, broadcast to every rank as planned
    GuardRankZeroCode     everything not partitioned runs on rank 0 only
    ContractionsToBlas    contractions on rank-local tiles become GEMMs (on a GPU: before the offload, on cuBLAS)
    OffloadToGpu          kernels and their arrays to the GPU (device=GPU)
    StartGrids            grids made at start-up, rank-local buffers allocated once
    CheckMoves            every remaining move's blocks lie inside its array
    SingleThreaded        one thread per rank (CPU, threads=1)

Each pass's result is in the pipeline's results under its class name; the report is rendered from the plan
and those results (:func:`dace_partition.passes.partition.partition`).
"""
import time
from dataclasses import dataclass
from typing import Dict, List

from dace.sdfg import SDFG
from dace.transformation import pass_pipeline as ppl

from ..ir import Device, IoMode
from ..plan import LoweringPlan
from .conditions import BroadcastBranchData
from .contractions import ContractionsToBlas
from .fusion import FuseRoundTrips
from .localize_io import LocalizeArguments
from .loops import FuseLoops


@dataclass(frozen=True)
class LoweringOptions:
    """How ``lower`` was asked to lower (each field is one of its keyword arguments)."""
    solvers: tuple
    device: Device = Device.CPU
    fuse: bool = True
    io: IoMode = IoMode.ROOT
    contractions: bool = True  # contraction maps become BLAS / cuBLAS GEMMs
    single_threaded: bool = True  # threads=1 (CPU only)


class TimedPipeline(ppl.Pipeline):
    """A Pipeline that records each pass's wall time under its step name (the report's timings)."""

    def __init__(self, passes: List[ppl.Pass], names: Dict[type, str]):
        super().__init__(passes)
        self.names = names
        self.times: Dict[str, float] = {}

    def apply_subpass(self, sdfg: SDFG, p: ppl.Pass, state: Dict[str, object]):
        t = time.perf_counter()
        try:
            return super().apply_subpass(sdfg, p, state)
        finally:
            step = self.names.get(type(p), type(p).__name__)
            self.times[step] = self.times.get(step, 0.0) + time.perf_counter() - t


# The report's step names (LoweringReport.timings) by pass; passes that share a name add up.
STEP_NAMES = (
    ("PartitionKernels", "partition kernels"),
    ("FuseRoundTrips", "fusion (kernels and loops), rank-local arguments"),
    ("FuseLoops", "fusion (kernels and loops), rank-local arguments"),
    ("LocalizeArguments", "fusion (kernels and loops), rank-local arguments"),
    ("BroadcastBranchData", "guards, branch data"),
    ("GuardRankZeroCode", "guards, branch data"),
    ("ContractionsToBlas", "contractions to BLAS"),
    ("OffloadToGpu", "GPU offload"),
    ("StartGrids", "report"),
    ("CheckMoves", "report"),
    ("SingleThreaded", "single-threaded ranks"),
)


def lowering_pipeline(plan: LoweringPlan, options: LoweringOptions, report) -> TimedPipeline:
    """The passes that apply ``plan`` under ``options``, each after the one before it. ``report`` receives
    what the GPU offload decides about residency (its own plan, made on the partitioned graph)."""
    from .gpu import OffloadToGpu
    from .partition import CheckMoves, GuardRankZeroCode, PartitionKernels, SingleThreaded, StartGrids
    passes: List[ppl.Pass] = [PartitionKernels(plan)]

    def then(p):
        p.after = frozenset({type(passes[-1])})
        passes.append(p)

    if options.fuse:
        then(FuseRoundTrips(plan))
        then(FuseLoops(plan))
    if options.io == IoMode.DISTRIBUTED:
        then(LocalizeArguments(plan))
    then(BroadcastBranchData(plan))
    then(GuardRankZeroCode(plan))
    gpu = options.device == Device.GPU
    # library nodes replaced by their pure expansion (uneven tiles): their products on BLAS again
    expanded = {km.kernel.node: km.analysis.principal for km in plan.kernels if km.kernel.label in plan.expanded}
    if gpu:
        from ..runtime import cuda_build
        cublas = cuda_build.cublas_available()  # decided once: which contractions to pack, and for what
        if options.contractions and cublas:  # else a GEMM is DaCe's pure GPU maps: packing would only add copies
            then(ContractionsToBlas(expanded))
        then(OffloadToGpu(plan, report, cublas=cublas))
    then(StartGrids(plan))
    then(CheckMoves(plan))
    if not gpu and options.contractions:
        then(ContractionsToBlas(expanded))
    if not gpu and options.single_threaded:
        then(SingleThreaded(plan))
    steps = dict(STEP_NAMES)
    names = {type(p): steps.get(type(p).__name__, type(p).__name__) for p in passes}
    return TimedPipeline(passes, names)
