"""The general block solver: any rectangular per-rank block, evaluated when the program runs.

Covers what the grid-mapped solver refuses: uneven tiles (ceil/floor sizes), halos and other
overlapping reads, blocks that depend on several grid coordinates, symbolic array sizes. Rank 0 sends
each rank its block with one ``MPI_Alltoallw`` (a block datatype per rank, so no packing on rank 0);
disjoint writes come back the same way. Writes that may overlap (replicated or halo writes, or
write-conflict resolution over several ranks) are gathered packed (``MPI_Gatherv``) and merged on rank 0:
with the operator for conflicted writes, by a single writer otherwise.
"""
from typing import List, Optional

from dace.codegen.targets.cpp import sym2cpp

from .base import CommSpec, Solver

_OP_CODES = {None: 0, "sum": 1, "prod": 2, "min": 3, "max": 4}


def _arr(vals) -> str:
    return "{" + ", ".join(f"(long long)({sym2cpp(v)})" for v in vals) + "}"


def _block_fn(subset, coords) -> str:
    """C++ lambda giving the block (start, count per dimension) of the rank at grid coordinates __c."""
    lines = ["[&](const int *__c, long long *__s, long long *__n) {"]
    for d, c in enumerate(coords):
        if c:
            lines.append(f"    const int {c} = __c[{d}];")
    for j, (b, e, _) in enumerate(subset):
        lines.append(f"    __s[{j}] = {sym2cpp(b)};")
        lines.append(f"    __n[{j}] = ({sym2cpp(e)}) - ({sym2cpp(b)}) + 1;")
    lines.append("}")
    return "\n".join(lines)


class BlockSolver(Solver):
    name = "blocks"

    def refuse(self, spec: CommSpec) -> Optional[str]:
        for j, (b, e, s) in enumerate(spec.subset):
            if s != 1:
                return f"dimension {j} is strided (step {s}); rank-local arrays hold contiguous blocks"
        return None

    def _combine(self, spec: CommSpec) -> bool:
        return spec.direction == "gather" and spec.may_overlap()

    def calls(self, spec: CommSpec) -> List[str]:
        if spec.direction == "scatter":
            if spec.accumulates and spec.may_overlap():
                return ["identity fill (prior value added on rank 0)"]
            return ["MPI_Alltoallw(grid, from rank 0)"]
        if self._combine(spec):
            return ["MPI_Gatherv(grid, packed)", f"merge on rank 0 ({spec.op or 'one writer'})"]
        return ["MPI_Alltoallw(grid, to rank 0)"]

    def bytes_moved(self, spec: CommSpec) -> Optional[int]:
        if spec.direction == "scatter" and spec.accumulates and spec.may_overlap():
            return 0  # identity fill: the prior value stays on rank 0
        return spec.bytes_moved()

    def emit(self, spec: CommSpec, node, gdesc, ldesc) -> str:
        fn = _block_fn(spec.subset, spec.coords)

        nd = len(spec.subset)
        decl = (f"const long long __gshape[] = {_arr(gdesc.shape)}; const long long __gstr[] = {_arr(gdesc.strides)};\n"
                f"const long long __lshape[] = {_arr(ldesc.shape)}; const long long __lstr[] = {_arr(ldesc.strides)};\n")
        ctype = gdesc.dtype.ctype
        op = _OP_CODES[spec.op]
        if spec.direction == "scatter":
            fill = 1 if (spec.accumulates and spec.may_overlap()) else 0
            call = (f'dace_partition::scatter_blocks<{ctype}>({node.grid_id}, "{spec.array}", _in, _out, {nd}, '
                    f"__gshape, __gstr, __lshape, __lstr, {fn}, {fill}, {op});")
        else:
            combine = 1 if self._combine(spec) else 0
            acc = 1 if spec.accumulates else 0
            call = (f'dace_partition::gather_blocks<{ctype}>({node.grid_id}, "{spec.array}", _in, _out, {nd}, '
                    f"__gshape, __gstr, __lshape, __lstr, {fn}, {op}, {combine}, {acc});")
        return "{\n" + decl + call + "\n}"

    def emit_redistribute(self, node, src_desc, dst_desc) -> str:
        """Grid -> grid without rank 0 (see ``redistribute`` in the runtime header)."""
        src_fn = _block_fn(node.src_subset, [c or None for c in node.src_coords])
        dst_fn = _block_fn(node.subset, [c or None for c in node.coords])
        op = _OP_CODES[node.op]
        return ("{\n" f"const long long __sstr[] = {_arr(src_desc.strides)};\n"
                f"const long long __dshape[] = {_arr(dst_desc.shape)}; const long long __dstr[] = {_arr(dst_desc.strides)};\n"
                f'dace_partition::redistribute<{dst_desc.dtype.ctype}>("{node.array}", {len(node.subset)}, '
                f"{node.src_grid_id}, {src_fn}, _in, __sstr, {node.grid_id}, {dst_fn}, _out, __dshape, __dstr, {op});\n}}")
