"""Lowering time (``dp.lower`` only, no compiler) of the test and example programs, best of N.

Run it against two source trees to compare them (the package is imported from ``--tree``):

    python benchmarks/lowering_time.py --tree /tmp/dp_before --out benchmarks/results/lowering_time_before.json
    python benchmarks/lowering_time.py
"""
import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cases(P, dp):
    """(name, program factory, schedule by map index, io)."""
    megatron = (("_MatMult_.gemm_map", (1, 4, 1)), ("_Add__map", (1, 4)), ("_numpy_maximum__map", (1, 4)),
                ("_MatMult_.gemm_map_1", (1, 1, 4)), ("_Add__map_1", dp.replicate((1, 1), 4)))
    dp4 = lambda prog: tuple((i, (4, ) + (1, ) * (len(m.params) - 1)) for i, m in enumerate(dp.maps(prog.to_sdfg())))
    return [
        ("add5", P.add5.to_sdfg, ((0, (4, )), ), "root"),
        ("bcast_add", P.bcast_add.to_sdfg, ((0, (2, 2, 1)), ), "root"),
        ("offset_read", P.offset_read.to_sdfg, ((0, (4, )), ), "root"),
        ("sum_rows", P.sum_rows.to_sdfg, (("Reduce.reduce_output", (1, 4)), ), "root"),
        ("matmul_2x2x2", P.matmul.to_sdfg, (("_MatMult_.gemm_map", (2, 2, 2)), ), "root"),
        ("spmv", P.spmv.to_sdfg, ((0, (4, )), ), "root"),
        ("stencil3", P.stencil3.to_sdfg, ((0, (4, )), ), "root"),
        ("histogram", P.histogram.to_sdfg, ((0, (4, )), ), "root"),
        ("mlp_data_parallel", P.mlp.to_sdfg, dp4(P.mlp), "root"),
        ("mlp_partial", P.mlp.to_sdfg, ((1, (2, 1, 2)), (2, (4, 1)), (3, (4, 1)), (5, (4, 1, 1)), (6, (4, 1))), "root"),
        ("mlp_megatron", P.mlp.to_sdfg, megatron, "root"),
        ("mlp_megatron_dio", P.mlp.to_sdfg, megatron, "distributed"),
        ("axpy_chain", P.axpy_chain.to_sdfg, ((0, (4, )), (1, (2, ))), "root"),
        ("matmul_chain", P.matmul_chain.to_sdfg, (("_MatMult_.gemm_map", (2, 2, 1)), ("_MatMult_.gemm_map_1", (4, 1, 1))),
         "root"),
        ("two_readers_dio", P.two_readers.to_sdfg, ((0, (4, )), (1, (4, ))), "distributed"),
        ("fused_softmax4", P.fused_softmax4, "softmax", "root"),
        ("mha_heads", P.mha.to_sdfg, "heads", "root"),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=os.path.join(HERE, ".."), help="source tree to import dace_partition from")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "lowering_time.json"))
    args = ap.parse_args()
    tree = os.path.abspath(args.tree)
    sys.path[:0] = [tree, os.path.join(tree, "tests")]
    import dace_partition as dp
    import programs as P
    assert dp.__file__.startswith(tree), dp.__file__
    rows = []
    for name, make, sched, io in cases(P, dp):
        best = float("inf")
        for _ in range(args.repeat):
            sdfg = make()
            infos = dp.maps(sdfg)
            if sched == "softmax":
                schedule = {m.name: (2, 2, 2, 1) for m in infos if len(m.params) == 4}
            elif sched == "heads":
                schedule = P.head_parallel(sdfg, 4)
            else:
                schedule = {(infos[k].name if isinstance(k, int) else k): g for k, g in sched}
            t = time.perf_counter()
            dp.lower(sdfg, schedule, io=io)
            best = min(best, time.perf_counter() - t)
        rows.append({"program": name, "io": io, "lower_s": round(best, 4)})
        print(f"{name:22s} {io:12s} {best:8.3f} s", flush=True)
    total = sum(r["lower_s"] for r in rows)
    print(f"{'total':35s} {total:8.3f} s")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"tree": tree, "machine": platform.machine(), "python": platform.python_version(),
                   "repeat": args.repeat, "rows": rows, "total_s": round(total, 3)}, f, indent=1)


if __name__ == "__main__":
    main()
