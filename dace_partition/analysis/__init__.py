"""Analysis: rank tiling of each scheduled kernel and the constraints it puts on every array it touches
(:class:`~dace_partition.analysis.constraints.KernelPlan`), from which the passes build Moves."""
