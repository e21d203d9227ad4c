"""``ProgramRecord``: what a lowered program needs to be run, in one typed record; ``Notes``: the one
place where the package keeps what it knows about an SDFG object.

Ranks needed, io mode and argument layouts are decided by ``lower``; the record is saved as JSON beside
the build (``dace_partition.json`` in the build folder), so a program loaded from its folder on any rank
knows them without the SDFG's Python object, and so do the names a caller may use for arguments that a
front end renamed (an ONNX graph input named ``0`` is the argument ``t_0``). :func:`notes` holds the
record, the lowering's report, a training step's names, whether discovery has converted its loops, the
values bound to its arguments (``bind``), the renamed arguments and its last build; it is one attribute
of the SDFG, so it travels with the object (also through ``copy.deepcopy``) and nothing is kept in
module-level tables.
"""
import json
import os
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

from .kinds import IoMode
from .layout import Layout

FILE = "dace_partition.json"
_ATTR = "_dace_partition"


@dataclass(frozen=True)
class ProgramRecord:
    program: str
    ranks_needed: int
    io: IoMode = IoMode.ROOT
    layouts: Dict[str, Layout] = field(default_factory=dict, hash=False)
    # device="gpu": argument -> its device twin, the argument the runtime passes in GPU memory (the
    # caller's device array, or a buffer it keeps for NumPy callers; runtime/device_arrays.py)
    device_twins: Dict[str, str] = field(default_factory=dict, hash=False)
    # a caller's name -> the argument it names, where a front end had to rename (ONNX input '0': 't_0')
    aliases: Dict[str, str] = field(default_factory=dict, hash=False)

    def to_json(self) -> str:
        return json.dumps({"program": self.program, "ranks_needed": self.ranks_needed, "io": str(self.io),
                           "layouts": {k: v.to_json() for k, v in self.layouts.items()},
                           "device_twins": dict(self.device_twins), "aliases": dict(self.aliases)}, indent=1)

    @staticmethod
    def from_json(text: str) -> "ProgramRecord":
        d = json.loads(text)
        return ProgramRecord(d["program"], int(d["ranks_needed"]), IoMode(d["io"]),
                             {k: Layout.from_json(v) for k, v in d["layouts"].items()},
                             dict(d.get("device_twins", {})), dict(d.get("aliases", {})))


@dataclass
class Notes:
    """What the package knows about one SDFG object (see the module docstring)."""
    record: Optional[ProgramRecord] = None  # set by lower
    report: Optional[object] = None  # the LoweringReport of lower
    train: Optional[dict] = None  # from_torch_train_step: {"outputs": [...], "arguments": {...}}
    normalised: bool = False  # schedule.normalise rewrote it (loops to maps, DaCe 2's regions inlined)
    bound: Dict[str, object] = field(default_factory=dict)  # runtime.bind: argument -> its value (an array)
    aliases: Dict[str, str] = field(default_factory=dict)  # from_onnx: a graph input's name -> its argument
    build: Optional[Tuple[str, str]] = None  # runtime.build: (digest of the lowered SDFG, its build folder)


def notes(sdfg) -> Notes:
    """The notes of ``sdfg`` (created empty on first use)."""
    found = getattr(sdfg, _ATTR, None)
    if found is None:
        found = Notes()
        setattr(sdfg, _ATTR, found)
    return found


def attach(sdfg, record: ProgramRecord):
    """Keeps ``record`` with the SDFG; the names its front end renamed go into it, to be saved beside the build."""
    found = notes(sdfg)
    if found.aliases and not record.aliases:
        record = replace(record, aliases=dict(found.aliases))
    found.record = record


def record_of(sdfg) -> Optional[ProgramRecord]:
    """The record of an SDFG lowered in this process, None if it was not lowered (a loaded program reads
    its record from the build folder: :func:`read`)."""
    found = getattr(sdfg, _ATTR, None)
    return found.record if found is not None else None


def is_lowered(sdfg) -> bool:
    return record_of(sdfg) is not None


def ranks_needed(sdfg) -> int:
    """MPI ranks a lowered program needs (its largest grid)."""
    rec = record_of(sdfg)
    if rec is None:
        raise ValueError(f"SDFG '{sdfg.name}' is not a lowered dace-partition program")
    return rec.ranks_needed


def layouts_of(sdfg) -> Dict[str, Layout]:
    """The layouts of a lowered SDFG or a loaded Program (empty for root-in/root-out)."""
    rec = getattr(sdfg, "record", None) or record_of(getattr(sdfg, "sdfg", sdfg))
    return dict(rec.layouts) if rec is not None else {}


def save(record: ProgramRecord, folder: str):
    with open(os.path.join(folder, FILE), "w") as f:
        f.write(record.to_json())


def read(folder: str) -> Optional[ProgramRecord]:
    path = os.path.join(folder, FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return ProgramRecord.from_json(f.read())
