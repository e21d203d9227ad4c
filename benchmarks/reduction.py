"""Hierarchy-aware reductions (P^2): simulator tables and measured MPI times.

(a) Simulator: for the parallelism matrices of the paper's Table 4, the predicted time of a flat
    AllReduce and of the best synthesized program (cost model with the paper's sec. 5
    bandwidths), next to the paper's measured times and speedups; program counts and synthesis
    times.
(b) Measured here: wall time of flat ``MPI_Allreduce`` vs the program the chooser picks (with the
    default cluster model) and the Figure 10 programs, on simulated 2x2 and 2x4 hierarchies
    (``DACE_PARTITION_HIERARCHY``), 2^20..2^24 float32 per rank, interleaved rounds, best of N.
    This is one node: the "nodes" share memory, so this mostly shows the cost of extra steps.

Usage: python benchmarks/reduction.py [--quick]   -> benchmarks/results/reduction.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
for _name in ("dace_partition", "dace_partition.solvers"):  # NumPy-only import, no DaCe
    if _name not in sys.modules:
        _m = types.ModuleType(_name)
        _m.__path__ = [os.path.join(ROOT, *_name.split("."))]
        sys.modules[_name] = _m

from dace_partition.solvers.reduction import (Collective, CostModel, Form, Instruction, Placement,  # noqa: E402
                                              Program, SystemHierarchy, choose_reduction, count_programs,
                                              synthesis_hierarchy)

OUT = os.path.join(ROOT, "benchmarks", "results", "reduction.json")

# id, NCCL algorithm, hierarchy (nodes, per node), axes, reduce axes, matrix, paper AllReduce s,
# paper optimal s, paper speedup (Table 4; H1's matrix is the appendix's, Table 4 misprints it)
TABLE4 = [
    ("F1", "Ring", (2, 16), (8, 4), (0,), ((1, 8), (2, 2)), 0.17, 0.17, 1.0),
    ("F2", "Ring", (2, 16), (8, 4), (0,), ((2, 4), (1, 4)), 16.84, 9.19, 1.83),
    ("G1", "Tree", (4, 16), (4, 16), (0,), ((1, 4), (4, 4)), 0.20, 0.17, 1.17),
    ("G2", "Tree", (4, 16), (4, 16), (0,), ((4, 1), (1, 16)), 89.70, 56.13, 1.60),
    ("H1", "Ring", (4, 16), (16, 2, 2), (0, 2), ((1, 16), (2, 1), (2, 1)), 4.79, 4.63, 1.03),
    ("H2", "Ring", (4, 16), (16, 2, 2), (0, 2), ((2, 8), (2, 1), (1, 2)), 4.91, 3.10, 1.58),
    ("I1", "Ring", (4, 16), (2, 2, 16), (0, 2), ((2, 1), (2, 1), (1, 16)), 4.82, 2.99, 1.61),
    ("I2", "Ring", (4, 16), (2, 2, 16), (0, 2), ((1, 2), (2, 1), (2, 8)), 5.28, 4.77, 1.11),
    ("J1", "Tree", (4, 16), (64,), (0,), ((4, 16),), 5.75, 4.74, 1.21),
    ("K1", "Ring", (4, 8), (8, 2, 2), (0, 2), ((2, 4), (2, 1), (1, 2)), 4.80, 2.35, 2.04),
    ("K2", "Ring", (4, 8), (8, 2, 2), (0, 2), ((1, 8), (2, 1), (2, 1)), 4.40, 4.40, 1.0),
    ("L1", "Ring", (4, 8), (32,), (0,), ((4, 8),), 4.83, 3.45, 1.40),
]
PAPER_COUNTS = {"F": (47, 50), "G": (53, 53), "H": (235, 188), "I": (235, 188), "J": (47, 47),
                "K": (188, 188), "L": (47, 47)}  # (Table 4, appendix)


def simulate():
    rows = []
    for cid, algo, (nn, pn), axes, red, mat, p_ar, p_opt, p_sp in TABLE4:
        h = SystemHierarchy.of(("node", nn), ("core", pn))
        preset = "a100" if pn == 16 else "v100"
        model = CostModel.default(h, preset)
        pl = Placement(h, axes, mat, red)
        nbytes = 4 * (1 << 29) * nn  # the paper: 2^29 x nodes float32 per GPU
        t0 = time.perf_counter()
        ch = choose_reduction(h, pl, nbytes, model)
        choose_s = time.perf_counter() - t0
        rep = count_programs(h, axes, red)
        names = synthesis_hierarchy(pl).level_names
        rows.append({
            "id": cid, "nccl_algo": algo, "hierarchy": [nn, pn], "axes": list(axes), "reduce_axes": list(red),
            "matrix": [list(r) for r in mat], "preset": preset, "bytes_per_device": nbytes,
            "synthesis_levels": list(pl.synthesis_sizes),
            "programs_ours": rep.total, "programs_paper_table4": PAPER_COUNTS[cid[0]][0],
            "programs_paper_appendix": PAPER_COUNTS[cid[0]][1], "synthesis_s_all_matrices": round(rep.seconds, 4),
            "choose_s": round(choose_s, 4),
            "predicted_flat_s": ch.flat_s, "predicted_best_s": ch.predicted_s,
            "predicted_speedup": ch.speedup,
            "best_program": "flat AllReduce" if ch.program is None else ch.program.describe(names),
            "paper_allreduce_s": p_ar, "paper_optimal_s": p_opt, "paper_speedup": p_sp,
        })
    return rows


FIG10_I = Program((Instruction(1, Form.INSIDE_GROUP, Collective.REDUCE),
                   Instruction(1, Form.MASTER, Collective.ALL_REDUCE, 0),
                   Instruction(1, Form.INSIDE_GROUP, Collective.BROADCAST)))
FIG10_II = Program((Instruction(1, Form.INSIDE_GROUP, Collective.REDUCE_SCATTER),
                    Instruction(1, Form.PARALLEL, Collective.ALL_REDUCE, 0),
                    Instruction(1, Form.INSIDE_GROUP, Collective.ALL_GATHER)))


def worker(out_path, exps, reps):
    """Under mpiexec: time flat / chosen / Figure 10 programs, interleaved, best of ``reps``."""
    import numpy as np
    from mpi4py import MPI
    from dace_partition.solvers.reduction import Communicators, ReductionPlan, detect_hierarchy
    comm = MPI.COMM_WORLD
    comms = Communicators(comm)  # the plans' sub-communicators, split once (the warm-up round) for every rep
    r = comm.Get_rank()
    h, dev_of = detect_hierarchy(comm)
    pl = Placement(h, (h.num_devices,), ((h.sizes[0], h.sizes[1]),), (0,))
    # ping-pong inside a "node" (rank 0 <-> 1) and across (0 <-> first rank of node 1)
    pp = {}
    nb = 1 << 22
    buf = np.ones(nb // 4, dtype=np.float32)
    for tag, peer in (("intra", 1), ("inter", h.sizes[1])):
        best = float("inf")
        for _ in range(5):
            comm.Barrier()
            t0 = time.perf_counter()
            if r == 0:
                comm.Send(buf, dest=peer)
                comm.Recv(buf, source=peer)
            elif r == peer:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)
            best = min(best, time.perf_counter() - t0)
        pp[tag] = comm.bcast(best, root=0)
    calibrated = CostModel.from_pingpong(h, nb, pp["intra"], pp["inter"])
    results = []
    for e in exps:
        n = 1 << e
        nbytes = 4 * n
        ch = choose_reduction(h, pl, nbytes)  # default cluster model (as if the nodes were real)
        ch_cal = choose_reduction(h, pl, nbytes, calibrated)
        variants = [("flat", None), ("chosen", ch.program), ("fig10_i", FIG10_I), ("fig10_ii", FIG10_II)]
        plans = [(name, ReductionPlan.build(pl, prog)) for name, prog in variants]
        data = np.full(n, float(r + 1), dtype=np.float32)
        best = {name: float("inf") for name, _ in plans}
        want = float(sum(range(1, comm.Get_size() + 1)))
        for rep in range(reps + 1):  # first round warms up (binding, page faults)
            for name, plan in plans:
                x = data.copy()
                comm.Barrier()
                t0 = time.perf_counter()
                plan.execute(comms, x, dev_of)
                t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                if rep:
                    best[name] = min(best[name], t)
                if x[0] != want or x[-1] != want:
                    raise SystemExit(f"{name}: wrong result {x[0]} != {want}")
        results.append({
            "floats": n, "bytes": nbytes, "flat_s": best["flat"], "chosen_s": best["chosen"],
            "fig10_i_s": best["fig10_i"], "fig10_ii_s": best["fig10_ii"],
            "chosen_program": "flat AllReduce" if ch.program is None else str(ch.program),
            "chosen_over_flat": best["chosen"] / best["flat"],
            "predicted_flat_s_default_model": ch.flat_s, "predicted_chosen_s_default_model": ch.predicted_s,
            "calibrated_choice": "flat AllReduce" if ch_cal.program is None else str(ch_cal.program),
        })
    comms.free()
    if r == 0:
        with open(out_path, "w") as f:
            json.dump({"hierarchy": str(h), "ranks": comm.Get_size(),
                       "pingpong_4MiB_rtt_s": pp, "calibrated_bandwidths_Bps": list(calibrated.bandwidths),
                       "rows": results}, f, indent=1)


def measure(quick):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exps = [20, 22] if quick else [20, 21, 22, 23, 24]
    reps = 2 if quick else 5
    out = []
    for hier, nprocs in (("2x2", 4), ("2x4", 8)):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            path = tf.name
        env = dict(os.environ, OMP_NUM_THREADS="1", DACE_PARTITION_HIERARCHY=hier,
                   PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
        cmd = [mpiexec, "-n", str(nprocs), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
               "--worker", path, ",".join(map(str, exps)), str(reps)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
        if proc.returncode:
            raise SystemExit(proc.stdout + proc.stderr)
        with open(path) as f:
            res = json.load(f)
        os.unlink(path)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        out.append(res)
        print(f"measured {hier}: {res['wall_s']} s", flush=True)
    return out


def markdown(path=OUT):
    """The docs' tables from a results file."""
    with open(path) as f:
        res = json.load(f)
    lines = ["| id | hierarchy | axes | reduce | matrix | programs ours / paper T4 / paper app. | synth. s "
             "| predicted flat s | predicted best s | predicted speedup | paper AllReduce s | paper optimal s "
             "| paper speedup | best program (predicted) |", "|" + "---|" * 14]
    for r in res["simulator"]:
        lines.append(f"| {r['id']} ({r['nccl_algo']}) | {r['hierarchy'][0]}x{r['hierarchy'][1]} | {r['axes']} | "
                     f"{r['reduce_axes']} | {r['matrix']} | {r['programs_ours']} / {r['programs_paper_table4']} / "
                     f"{r['programs_paper_appendix']} | {r['synthesis_s_all_matrices']:.3f} | "
                     f"{r['predicted_flat_s']:.3f} | {r['predicted_best_s']:.3f} | {r['predicted_speedup']:.2f}x | "
                     f"{r['paper_allreduce_s']} | {r['paper_optimal_s']} | {r['paper_speedup']}x | "
                     f"{r['best_program']} |")
    lines.append("")
    for m in res["measured"]:
        lines.append(f"**{m['hierarchy']}** ({m['ranks']} ranks; ping-pong 4 MiB round trip intra "
                     f"{m['pingpong_4MiB_rtt_s']['intra'] * 1e3:.2f} ms, inter "
                     f"{m['pingpong_4MiB_rtt_s']['inter'] * 1e3:.2f} ms; chooser with the calibrated model: "
                     f"{sorted(set(r['calibrated_choice'] for r in m['rows']))})")
        lines.append("")
        lines.append("| floats/rank | MiB | flat MPI_Allreduce ms | chosen ms | chosen/flat | Fig.10(i) ms "
                     "| Fig.10(ii) ms | predicted flat / chosen ms (default model) |")
        lines.append("|" + "---|" * 8)
        for r in m["rows"]:
            lines.append(f"| 2^{r['floats'].bit_length() - 1} | {r['bytes'] / 2 ** 20:.0f} | {r['flat_s'] * 1e3:.1f} | "
                         f"{r['chosen_s'] * 1e3:.1f} | {r['chosen_over_flat']:.2f} | {r['fig10_i_s'] * 1e3:.1f} | "
                         f"{r['fig10_ii_s'] * 1e3:.1f} | {r['predicted_flat_s_default_model'] * 1e3:.2f} / "
                         f"{r['predicted_chosen_s_default_model'] * 1e3:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main():
    if "--markdown" in sys.argv:
        print(markdown())
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], [int(e) for e in sys.argv[3].split(",")], int(sys.argv[4]))
        return
    quick = "--quick" in sys.argv
    sim = simulate()
    for row in sim:
        print(f"{row['id']}: predicted flat {row['predicted_flat_s']:.3f}s best {row['predicted_best_s']:.3f}s "
              f"x{row['predicted_speedup']:.2f} (paper x{row['paper_speedup']}) {row['best_program']}")
    meas = measure(quick)
    res = {
        "machine": {"cpus": os.cpu_count(), "note": "one node with 2 cores; simulated hierarchies share memory, "
                    "ranks are oversubscribed for 2x4: the measurement shows the cost of extra steps"},
        "simulator": sim, "measured": meas, "quick": quick,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
