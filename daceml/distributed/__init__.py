"""Compatibility with the thesis' entry point: ``daceml.distributed.lower(sdfg, schedule)``.

``daceml`` is a PEP 420 namespace package here (no ``daceml/__init__.py``), so an installed DaCeML still
provides the rest of ``daceml``.
"""
from dace_partition import compile, lower, maps, report, run

__all__ = ["lower", "maps", "compile", "run", "report"]
