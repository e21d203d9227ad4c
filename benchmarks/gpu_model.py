"""The GPU cost model against the per-call times measured on a GPU (no GPU needed: it reads the JSON that
``benchmarks/gpu.py`` wrote there).

For each workload of ``_gpu_workloads.py`` and 1, 2, 4 ranks sharing one GPU, the program is fused as
``lower`` fuses it (``local_optimize``), rows split as the benchmark split them, and ``dp.search.predict``
prices it on ``dp.gpu_machine(gpus=1)`` with ``io="distributed"``; beside it, the best per-call time with
device arrays from the result files (a later file's row replaces an earlier one; a run whose result was
wrong shows none).

    python benchmarks/gpu_model.py benchmarks/results/gpu_calls_h200.json benchmarks/results/gpu_calls_h200_fixed.json
    python benchmarks/gpu_model.py benchmarks/results/gpu_calls_h100_rows.json   # the row kernels (H100)
"""
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(paths):
    warnings.filterwarnings("ignore")
    import dace_partition as dp
    from dace_partition.passes.local_optimize import LocalOptimize, steps_of
    from _gpu_workloads import WORKLOADS, kernels_apart, programs
    measured = {}
    for path in paths:
        for r in json.loads(Path(path).read_text())["rows"]:
            if "device_best_s" in r or "device_correct" in r:  # a later file's row replaces, a wrong one too
                measured[(r["workload"], r["ranks"])] = r.get("device_best_s") if r.get("device_correct") else None
    machine = dp.gpu_machine(gpus=1)
    print(machine)
    print("| workload | ranks | predicted | measured | measured / predicted |\n|---|---|---|---|---|")
    for name, w in WORKLOADS.items():
        for ranks in (1, 2, 4):
            sdfg = programs()[w.program].to_sdfg()
            sdfg.specialize({k: v for k, v in w.sizes.items() if k != "T"})
            LocalOptimize(steps_of(True)).apply(sdfg)
            schedule = {} if ranks == 1 else {m.name: (ranks, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}
            with kernels_apart(w):  # priced as lowered
                p = dp.search.predict(sdfg, schedule, ranks, sizes=dict(w.sizes), machine=machine, io="distributed")
            got = measured.get((name, ranks))
            ratio = f"{got / p.time:.2f}" if got else "-"
            print(f"| {name} | {ranks} | {p.time * 1e3:.2f} ms | {got * 1e3:.2f} ms | {ratio} |" if got else
                  f"| {name} | {ranks} | {p.time * 1e3:.2f} ms | - | - |")


if __name__ == "__main__":
    main(sys.argv[1:])
