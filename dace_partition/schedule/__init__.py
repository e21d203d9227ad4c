"""Schedule: which maps a program has (:mod:`.discover`) and the grid each scheduled map runs on
(:mod:`.resolve`). The first stage of the pipeline. ``normalise`` rewrites an SDFG once into the form
discovery reads (loops whose iterations are independent become maps, DaCe 2's regions are inlined);
``discover`` only reads, and refuses an SDFG that is not normalised. ``maps()`` normalises a copy, and
``lower`` normalises its own copy once and discovers each form of it once: as written (the names a
schedule uses), after map fusion where maps fused, and after the states are split (the kernels that the
search prices and the lowering plans)."""
from .discover import (Kernel, KernelKind, MapInfo, discover, expand_all, expand_pure, maps, normalise, ordered_states,
                       top_level_kernels)
from .resolve import FreeSymbols, FusedMapName, Replicated, fused_map, names_fused_maps, check_grid, grid_size, replicate, resolve

__all__ = ["FusedMapName", "Kernel", "KernelKind", "MapInfo", "fused_map", "names_fused_maps", "Replicated", "check_grid", "discover", "expand_all", "expand_pure", "grid_size",
           "maps", "normalise", "ordered_states", "replicate", "resolve", "top_level_kernels"]
