"""Passes, in pipeline order: preparation (:mod:`.prepare`), the partition of scheduled kernels
(:mod:`.partition`), fusion of round trips through rank 0 (:mod:`.fusion`), rank-local arguments
(:mod:`.localize_io`), GPU offload (:mod:`.gpu`); rank-local optimization around them (:mod:`.local_optimize`: map
fusion before partitioning, :mod:`.contractions` to BLAS after it). Fusion and rank-local arguments each decide first (a list of frozen
decisions, testable without changing the SDFG) and then rewrites."""
from .fusion import Fusion, FusionKind, FuseRoundTrips
from .localize_io import LocalizeArguments
from .local_optimize import LocalOptimize, LocalStep, optimize_local
from .contractions import Contraction, ContractionsToBlas

__all__ = ["Fusion", "FusionKind", "FuseRoundTrips", "LocalizeArguments", "LocalOptimize", "LocalStep", "optimize_local",
           "Contraction", "ContractionsToBlas"]
