"""SDFG transformations of the lowering pipeline."""
from .rank_tiling import RankTileMap, tile_range
