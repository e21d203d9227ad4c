"""Passes, in pipeline order: preparation (:mod:`.prepare`), the partition of scheduled kernels
(:mod:`.partition`), fusion of round trips through rank 0 (:mod:`.fusion`), loop carry (:mod:`.loops`),
rank-local arguments (:mod:`.localize_io`), GPU offload (:mod:`.gpu`); rank-local optimization around
them (:mod:`.local_optimize`: map fusion before partitioning, :mod:`.contractions` to BLAS after it).
Fusion, loop carry and rank-local arguments decide nothing: they carry out the plan's edits
(:mod:`dace_partition.plan`)."""
from .fusion import Fusion, FusionKind, FuseRoundTrips
from .localize_io import LocalizeArguments
from .local_optimize import LocalOptimize, LocalStep, optimize_local
from .contractions import Contraction, ContractionsToBlas

__all__ = ["Fusion", "FusionKind", "FuseRoundTrips", "LocalizeArguments", "LocalOptimize", "LocalStep", "optimize_local",
           "Contraction", "ContractionsToBlas"]
