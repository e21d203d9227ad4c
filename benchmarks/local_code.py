"""The rank-local code against NumPy, one local-optimization step at a time (README "Performance").

For each workload of ``_peers_workloads.py`` the same DaCe program is built four times, in one process and
one thread with the BLAS the lowered programs use: as DaCe's frontend wrote it, with map fusion
(``LocalStep.MAP_FUSION``), with contractions on BLAS (``LocalStep.CONTRACTIONS``), and with both (what
``dp.lower`` applies by default, built as the ranks build it: whole-array buffers allocated once and the
loops over them on ``__restrict__`` pointers, ``runtime.restrict``). Each build is checked against NumPy, then timed in rounds that
interleave NumPy and the four builds; a variant's time is its best call's CPU time (``process_time``:
on a loaded machine wall time mostly measures the wait for a core). Writes
``benchmarks/results/local_code.json``.

    python benchmarks/local_code.py [--only softmax,jacobi] [--scale 1] [--rounds 3]
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import _peers_workloads as W  # noqa: E402

DEFAULT = ["softmax", "jacobi", "heat3d", "matmul", "mlp", "attention"]


def variants():
    from dace_partition.passes.local_optimize import LocalStep
    return {"as written": None, "map fusion": [LocalStep.MAP_FUSION], "contractions": [LocalStep.CONTRACTIONS],
            "both": True}


def build(wl, label, steps, tag):
    import dace
    from dace_partition.passes.local_optimize import optimize_local
    from dace_partition.passes.partition import single_threaded
    from dace_partition.runtime import toolchain
    sdfg = wl.program().to_sdfg()
    sdfg.name = f"lc_{wl.name}_{label.replace(' ', '_')}{tag}"
    if steps is not None:
        optimize_local(sdfg, steps)
    single_threaded(sdfg)
    if steps is True:  # what a lowered program's ranks build: buffers allocated once, restrict loops
        from dace_partition.runtime.restrict import build_like_lowered
        build_like_lowered(sdfg)
    with dace.config.temporary_config(), toolchain.blas_build():
        dace.Config.set("store_history", value=False)
        return sdfg.compile()


def call(wl, fn, inputs):
    args = {k: v.copy() for k, v in inputs.items()}
    t = time.process_time()
    r = fn(args)
    return time.process_time() - t, (wl.outputs(r, args) if wl.outputs else r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(DEFAULT))
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "local_code.json"))
    opts = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    by_name = {f.__name__: f for f in W.ALL}
    rows = {}
    for name in opts.only.split(","):
        wl = by_name[name](opts.scale)
        inputs = wl.inputs(np.random.default_rng(0))
        progs = {"numpy": lambda a, wl=wl: wl.numpy(**a)}
        for label, steps in variants().items():
            progs[label] = build(wl, label, steps, f"_{opts.scale}")
        _, ref = call(wl, progs["numpy"], inputs)
        best, ok = {}, {}
        for r in range(opts.rounds):
            order = list(progs)[r % len(progs):] + list(progs)[:r % len(progs)]
            for label in order:
                fn = progs[label] if label == "numpy" else (lambda a, p=progs[label]: p(**a))
                t, out = call(wl, fn, inputs)
                best[label] = min(best.get(label, t), t)
                if label != "numpy":
                    ok[label] = ok.get(label, True) and bool(np.allclose(out, ref, rtol=max(wl.rtol, 1e-9), atol=1e-6))
        rows[name] = dict(label=wl.label, ms={k: v * 1e3 for k, v in best.items()},
                          vs_numpy={k: best[k] / best["numpy"] for k in best}, correct=ok)
        print(f"{wl.label}: " + "  ".join(f"{k} {v * 1e3:.1f} ms ({best[k] / best['numpy']:.2f}x)"
                                          + ("" if k == "numpy" or ok[k] else " WRONG") for k, v in best.items()),
              flush=True)
    os.makedirs(os.path.dirname(opts.out), exist_ok=True)
    with open(opts.out, "w") as f:
        json.dump(dict(machine=platform.platform(), cpus=os.cpu_count(), when=time.strftime("%Y-%m-%d %H:%M"),
                       load=os.getloadavg(), scale=opts.scale, rounds=opts.rounds, timer="process_time",
                       workloads=rows), f, indent=1)
    print("\n| workload | NumPy | " + " | ".join(variants()) + " |")
    print("|---|---|" + "---|" * len(variants()))
    for name, r in rows.items():
        cells = [f"{r['ms'][k]:.1f} ms ({r['vs_numpy'][k]:.2f}x)" + ("" if r["correct"][k] else " WRONG")
                 for k in variants()]
        print(f"| {r['label']} | {r['ms']['numpy']:.1f} ms | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
