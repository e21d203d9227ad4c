"""Passes, in pipeline order: preparation (:mod:`.prepare`), the partition of scheduled kernels
(:mod:`.partition`), fusion of round trips through rank 0 (:mod:`.fusion`), rank-local arguments
(:mod:`.localize_io`), GPU offload (:mod:`.gpu`). Fusion and rank-local arguments each decide first (a list of frozen
decisions, testable without changing the SDFG) and then rewrites."""
from .fusion import Fusion, FusionKind, FuseRoundTrips
from .localize_io import LocalizeArguments

__all__ = ["Fusion", "FusionKind", "FuseRoundTrips", "LocalizeArguments"]
