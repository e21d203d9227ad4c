"""The GPU cost model against the per-call times measured on a GPU (no GPU needed: it reads the JSON that
``benchmarks/gpu.py`` wrote there).

For each workload of ``_gpu_workloads.py`` and 1, 2, 4 ranks sharing one GPU, the program is fused as
``lower`` fuses it (``local_optimize``), rows split as the benchmark split them, and ``dp.search.predict``
prices it on ``dp.gpu_machine(gpus=1)`` with ``io="distributed"``; beside it, the best per-call time with
device arrays from the result files (a later file's row replaces an earlier one; a run whose result was
wrong shows none).

    python benchmarks/gpu_model.py benchmarks/results/gpu_calls_h200.json benchmarks/results/gpu_calls_h200_fixed.json
    python benchmarks/gpu_model.py benchmarks/results/gpu_calls_h100_rows.json   # the row kernels (H100)
    python benchmarks/gpu_model.py --calibrated benchmarks/results/gpu_calls_h100_staged.json
        # priced on the rates dp.calibrate(device="gpu") measured in that device call (the file's "calibration")
"""
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(paths, calibrated=False):
    warnings.filterwarnings("ignore")
    import dataclasses
    import dace_partition as dp
    from dace_partition.passes.local_optimize import LocalOptimize, steps_of
    from _gpu_workloads import WORKLOADS, programs, variant_settings
    measured, rates = {}, None
    for path in paths:
        data = json.loads(Path(path).read_text())
        rates = data.get("calibration", rates)
        for r in data["rows"]:
            if "device_best_s" in r or "device_correct" in r:  # a later file's row replaces, a wrong one too
                measured[(r["workload"], r["ranks"])] = r.get("device_best_s") if r.get("device_correct") else None
    machine = dp.gpu_machine(gpus=1)
    if calibrated:
        if rates is None:
            sys.exit("--calibrated: no 'calibration' in the result files")
        fields = {f.name for f in dataclasses.fields(machine)}
        machine = dataclasses.replace(machine, **{k: v for k, v in rates.items() if k in fields and k != "gpus"})
    print(machine)
    print("| workload | ranks | predicted | measured | measured / predicted |\n|---|---|---|---|---|")
    for name, w in WORKLOADS.items():
        for ranks in (1, 2, 4):
            sdfg = programs()[w.program].to_sdfg()
            sdfg.specialize({k: v for k, v in w.sizes.items() if k != "T"})
            LocalOptimize(steps_of(True)).apply(sdfg)
            schedule = {} if ranks == 1 else {m.name: (ranks, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg)}
            with variant_settings(w):  # priced as lowered
                p = dp.search.predict(sdfg, schedule, ranks, sizes=dict(w.sizes), machine=machine, io="distributed")
            got = measured.get((name, ranks))
            ratio = f"{got / p.time:.2f}" if got else "-"
            print(f"| {name} | {ranks} | {p.time * 1e3:.2f} ms | {got * 1e3:.2f} ms | {ratio} |" if got else
                  f"| {name} | {ranks} | {p.time * 1e3:.2f} ms | - | - |")


if __name__ == "__main__":
    args = sys.argv[1:]
    main([a for a in args if a != "--calibrated"], "--calibrated" in args)
