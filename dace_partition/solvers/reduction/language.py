"""The reduction language of P^2 (sec. 3.3): programs are lists of (slice, form, collective).

A synthesis hierarchy is ``[root] + sizes``: level 0 is the root (size 1, appended as in the
appendix), level ``i >= 1`` has ``sizes[i-1]`` children per parent.  Devices of one reduction
group are numbered in mixed radix over ``sizes`` (outermost major), so a device's coordinates
are ``c_1 .. c_n``.

* ``slice = e_i`` cuts the devices into groups that share ``c_1 .. c_i``;
* ``InsideGroup`` reduces inside each of those groups (varying ``c_{i+1} .. c_n``);
* ``Parallel(e_j)`` (``j < i``) reduces the first devices of the groups under the same ``e_j``
  together, the second ones together, ... (shared ``c_1..c_j`` and ``c_{i+1}..c_n``, varying
  ``c_{j+1}..c_i``, lemma B.2);
* ``Master(e_j)`` forms the same groups as ``Parallel(e_j)`` but keeps only the first one under
  every ``e_j`` (``c_{i+1} .. c_n`` all zero).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import reduce as _fold
from operator import mul
from typing import Optional, Tuple


class Form(enum.Enum):
    """How a slice's groups are combined into device groups."""
    INSIDE_GROUP = "InsideGroup"
    PARALLEL = "Parallel"
    MASTER = "Master"


class Collective(enum.Enum):
    """The collectives of sec. 3.2; the root of Reduce/Broadcast is a group's first device."""
    ALL_REDUCE = "AllReduce"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_GATHER = "AllGather"
    REDUCE = "Reduce"
    BROADCAST = "Broadcast"


@dataclass(frozen=True)
class Instruction:
    """``(slice, form, collective)``; ``form_level`` is the ``e`` of Parallel/Master (None for InsideGroup)."""
    slice_level: int
    form: Form
    collective: Collective
    form_level: Optional[int] = None

    def __post_init__(self):
        if self.form is Form.INSIDE_GROUP:
            if self.form_level is not None:
                raise ValueError("InsideGroup carries no level")
        elif self.form_level is None or not 0 <= self.form_level < self.slice_level:
            raise ValueError(f"{self.form.value}(e) needs an ancestor e of the slice level "
                             f"{self.slice_level}, got {self.form_level}")

    def describe(self, names=None) -> str:
        n = (lambda i: names[i]) if names else (lambda i: f"e{i}")
        f = self.form.value if self.form is Form.INSIDE_GROUP else f"{self.form.value}({n(self.form_level)})"
        return f"({n(self.slice_level)}, {f}, {self.collective.value})"

    def __str__(self):
        return self.describe()


@dataclass(frozen=True)
class Program:
    """A reduction strategy: instructions applied in order."""
    steps: Tuple[Instruction, ...]

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))

    def __len__(self):
        return len(self.steps)

    def describe(self, names=None) -> str:
        return " ; ".join(s.describe(names) for s in self.steps)

    def __str__(self):
        return self.describe()


@dataclass(frozen=True)
class SynthesisHierarchy:
    """Sizes of the non-root synthesis levels, outermost first (the root is implicit level 0)."""
    sizes: Tuple[int, ...]
    names: Tuple[str, ...] = ()

    def __post_init__(self):
        sizes = tuple(int(s) for s in self.sizes)
        if any(s < 1 for s in sizes):
            raise ValueError(f"synthesis level sizes must be positive: {sizes}")
        object.__setattr__(self, "sizes", sizes)
        names = tuple(self.names) if self.names else tuple(f"e{i + 1}" for i in range(len(sizes)))
        if len(names) != len(sizes):
            raise ValueError("one name per synthesis level")
        object.__setattr__(self, "names", names)

    @property
    def depth(self) -> int:
        """Number of levels including the root."""
        return len(self.sizes) + 1

    @property
    def num_devices(self) -> int:
        return _fold(mul, self.sizes, 1)

    @property
    def level_names(self) -> Tuple[str, ...]:
        return ("root",) + self.names

    def coords(self, d: int) -> Tuple[int, ...]:
        out = []
        for s in reversed(self.sizes):
            out.append(d % s)
            d //= s
        return tuple(reversed(out))

    def groups(self, ins: Instruction) -> Tuple[Tuple[int, ...], ...]:
        """The disjoint device groups an instruction derives, members in device order.

        Groups of one device are kept (they do nothing); the synthesizer drops instructions
        whose groups all have one device.
        """
        n = len(self.sizes)
        i = ins.slice_level
        if not 0 <= i <= n:
            raise ValueError(f"slice level {i} outside 0..{n}")
        lo = i if ins.form is Form.INSIDE_GROUP else ins.form_level
        hi = n if ins.form is Form.INSIDE_GROUP else i
        # varying coordinates: 1-based levels lo+1 .. hi  -> 0-based indices lo .. hi-1
        by_key = {}
        for d in range(self.num_devices):
            c = self.coords(d)
            if ins.form is Form.MASTER and any(c[k] for k in range(hi, n)):
                continue
            key = c[:lo] + c[hi:]
            by_key.setdefault(key, []).append(d)
        return tuple(tuple(g) for _, g in sorted(by_key.items()))

    def instructions(self):
        """Every syntactically valid instruction, InsideGroup first, then Parallel, then Master."""
        out = []
        for c in Collective:
            for i in range(self.depth):
                out.append(Instruction(i, Form.INSIDE_GROUP, c))
            for form in (Form.PARALLEL, Form.MASTER):
                for i in range(1, self.depth):
                    for j in range(i):
                        out.append(Instruction(i, form, c, j))
        return out

    def __str__(self):
        return "[root " + " ".join(f"{n}:{s}" for n, s in zip(self.names, self.sizes)) + "]"
