"""Passes over a partitioned SDFG, in pipeline order: fusion of round trips through rank 0
(:mod:`.fusion`), rank-local arguments (:mod:`.localize_io`). Each decides first (a list of frozen
decisions, testable without changing the SDFG) and then rewrites."""
from .fusion import Fusion, FusionKind, FuseRoundTrips
from .localize_io import LocalizeArguments

__all__ = ["Fusion", "FusionKind", "FuseRoundTrips", "LocalizeArguments"]
