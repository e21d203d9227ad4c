"""Bytes moved by the whole-program examples, fused against the root-round-trip version of the same
schedule (every intermediate gathered to rank 0 and scattered again), counted by the PMPI shim.

Run:  python benchmarks/whole_programs.py      (writes benchmarks/results/whole_programs.json)
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import dace_partition as dp  # noqa: E402
from _compare import compare  # noqa: E402


def mlp_cases(ranks=4):
    import mlp as ex
    rng = np.random.default_rng(0)
    inputs = dict(x=rng.standard_normal((64, 32)), w1=rng.standard_normal((32, 48)), b1=rng.standard_normal(48),
                  w2=rng.standard_normal((48, 16)), b2=rng.standard_normal(16))
    for name, schedule in ex.schedules(ranks).items():
        yield f"MLP {name}", ex.mlp.to_sdfg, (lambda s, schedule=schedule: schedule), ranks, inputs, ex.mlp.f(**inputs)


def main():
    import attention
    import matmul_chain
    import softmax
    rows = []
    cases = list(mlp_cases())
    rng = np.random.default_rng(0)
    for ranks in (2, 4):
        inputs = dict(x=rng.standard_normal((2, 8, 16)), wq=rng.standard_normal((4, 16, 3)),
                      wk=rng.standard_normal((4, 16, 3)), wv=rng.standard_normal((4, 16, 3)),
                      wo=rng.standard_normal((4, 3, 16)), bo=rng.standard_normal(16))
        cases.append((f"attention, heads on {ranks} ranks", attention.mha.to_sdfg,
                      lambda s, r=ranks: attention.head_parallel(s, r), ranks, inputs, attention.mha.f(**inputs)))
    x = rng.standard_normal((4, 4, 64, 64)).astype(np.float32)
    e = np.exp(x - x.max(axis=3, keepdims=True))
    cases.append(("softmax float32[4,4,64,64] (2,2,2,1)", softmax.softmax_sdfg(4, 4, 64),
                  lambda s: {m.name: (2, 2, 2, 1) for m in dp.maps(s) if len(m.params) == 4}, 8, {"x": x},
                  e / e.sum(axis=3, keepdims=True)))
    a, b, d = rng.standard_normal((48, 32)), rng.standard_normal((32, 40)), rng.standard_normal((40, 24))
    cases.append(("(A@B)@D, (2,2,1) then (4,1,1)", matmul_chain.chain.to_sdfg,
                  lambda s: {"_MatMult_.gemm_map": (2, 2, 1), "_MatMult_.gemm_map_1": (4, 1, 1)}, 4,
                  dict(a=a, b=b, d=d), (a @ b) @ d))
    for name, make, schedule, ranks, inputs, ref in cases:
        print(f"\n=== {name} ===")
        tol = 1e-5 if ref.dtype == np.float32 else 1e-10
        got = compare(make, schedule, ranks, inputs, ref, rtol=tol, atol=tol)
        rows.append({"program": name, "ranks": ranks, "fused_bytes_per_rank": got[0][1],
                     "roundtrip_bytes_per_rank": got[1][1], "fused_total": sum(got[0][1]),
                     "roundtrip_total": sum(got[1][1]), "report_agrees": got[0][1][:len(got[0][2])] == got[0][2]})
    print(f"\n{'program':<40} {'ranks':>5} {'fused B':>10} {'round trip B':>13} {'ratio':>6}")
    for r in rows:
        print(f"{r['program']:<40} {r['ranks']:>5} {r['fused_total']:>10} {r['roundtrip_total']:>13} "
              f"{r['roundtrip_total'] / max(1, r['fused_total']):>6.1f}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "whole_programs.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
