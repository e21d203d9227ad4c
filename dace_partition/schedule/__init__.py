"""Schedule: which maps a program has (:mod:`.discover`) and the grid each scheduled map runs on
(:mod:`.resolve`). The first stage of the pipeline; it reads the SDFG and changes nothing but library
node expansions."""
from .discover import Kernel, KernelKind, MapInfo, discover, expand_all, expand_pure, maps, ordered_states, top_level_kernels
from .resolve import FreeSymbols, Replicated, check_grid, grid_size, replicate, resolve

__all__ = ["Kernel", "KernelKind", "MapInfo", "Replicated", "check_grid", "discover", "expand_all", "expand_pure", "grid_size",
           "maps", "ordered_states", "replicate", "resolve", "top_level_kernels"]
