"""The lowering's intermediate values: frozen, hashable, printable.

``Distribution`` (where an array's elements live), ``Move`` (one array between two distributions, with
its derived ``MoveKind``), ``Cost`` (a solver's answer), ``Layout`` and ``ProgramRecord`` (what a built
program needs at run time)."""
from .distribution import ROOT, Distribution
from .kinds import Device, Direction, IoMode, MoveKind, ReduceOp, Role, op_code
from .layout import Layout
from .boxes import intersection, volume
from .move import Cost, Move
from .record import Notes, ProgramRecord, attach, is_lowered, layouts_of, notes, ranks_needed, record_of

__all__ = ["ROOT", "Device", "Direction", "Distribution", "IoMode", "MoveKind", "ReduceOp", "Role", "op_code", "Layout", "Cost", "Move",
           "intersection", "volume", "ProgramRecord", "attach", "is_lowered", "layouts_of", "ranks_needed",
           "record_of", "Notes", "notes"]
