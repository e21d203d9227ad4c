"""Enums of the intermediate representation: what a move does, how partial results combine, where a
program's arguments live, which way a kernel's access goes and which rank-local buffer it uses. ``str`` enums, so reports and JSON read as words."""
from enum import Enum
from typing import Optional


class MoveKind(str, Enum):
    """What a :class:`~dace_partition.ir.Move` does, derived from its two distributions."""
    SCATTER = "scatter"  # rank 0 -> a grid
    GATHER = "gather"  # a grid -> rank 0
    REDISTRIBUTE = "redistribute"  # one grid's blocks -> another grid's blocks
    ALLREDUCE = "allreduce"  # partial results combined into the same blocks on the same ranks

    def __str__(self):
        return self.value


class ReduceOp(str, Enum):
    """Write-conflict resolution MPI can apply to partial results."""
    SUM = "sum"
    PROD = "prod"
    MIN = "min"
    MAX = "max"

    @property
    def mpi(self) -> str:
        return f"MPI_{self.name}"

    @property
    def code(self) -> int:
        """The runtime header's operator code (``dace_partition::mpi_op``)."""
        return _CODES[self]

    def __str__(self):
        return self.value

    @classmethod
    def of(cls, op) -> Optional["ReduceOp"]:
        return None if op is None or op == "" else cls(op)


_CODES = {ReduceOp.SUM: 1, ReduceOp.PROD: 2, ReduceOp.MIN: 3, ReduceOp.MAX: 4}


def op_code(op: Optional[ReduceOp]) -> int:
    return 0 if op is None else ReduceOp(op).code


class Direction(str, Enum):
    """Whether a kernel reads (``IN``) or writes (``OUT``) an array."""
    IN = "in"
    OUT = "out"

    def __str__(self):
        return self.value


class Role(str, Enum):
    """Which of its two rank-local buffers in one kernel an array's access fills or empties: the reads'
    (``IN``) or the write's (``OUT``, which also receives the prior values of a write)."""
    IN = "in"
    OUT = "out"

    def __str__(self):
        return self.value


class IoMode(str, Enum):
    """Where a lowered program's arguments live (``lower(..., io=...)``)."""
    ROOT = "root"  # whole arrays on rank 0
    DISTRIBUTED = "distributed"  # every rank passes and gets back its own tiles

    def __str__(self):
        return self.value


class Device(str, Enum):
    """Where a lowered program's rank-local kernels run (``lower(..., device=...)``)."""
    CPU = "cpu"
    GPU = "gpu"  # CUDA GPUs, the arrays kept in GPU memory

    def __str__(self):
        return self.value
