"""How long ``dp.auto_schedule`` takes: elementwise chains of 10 to 200 maps (one state, the frontend's
temporaries between them) and every program of the conformance suite, on P ranks. Nothing is built.

Per program: maps, the search method, seconds in total and in its three parts (preparing the copy,
pricing every candidate, searching). Writes ``benchmarks/results/search_time.json``.

    python benchmarks/search_time.py [--ranks 4] [--chains 10,50,200] [--no-conformance]
"""
import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def chain_program(maps: int):
    """A @dace.program of ``maps`` elementwise maps over float64[N, 64] (written to a module: DaCe reads
    a program's source)."""
    lines = ["import dace, numpy as np", "N = dace.symbol('N')", "@dace.program",
             "def chain(x: dace.float64[N, 64], y: dace.float64[N, 64]):", "    t0 = x + y"]
    for i in range(1, maps):
        op = ("t{p} + x", "t{p} * y", "np.exp(t{p})")[i % 3]
        lines.append(f"    t{i} = " + op.format(p=i - 1))
    lines.append(f"    return t{maps - 1}")
    path = os.path.join(tempfile.mkdtemp(prefix="dp_chain_"), f"chain{maps}.py")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(f"chain{maps}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.chain


def timed_search(sdfg, ranks, sizes, machine):
    """(schedule, seconds: total, prepare, price, search) of one auto_schedule, timed by its parts."""
    import dace_partition.search as search
    parts = {}

    def wrap(mod, name, label):
        fn = getattr(mod, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[label] = parts.get(label, 0.0) + time.perf_counter() - t

        setattr(mod, name, timed)
        return fn

    saved = [(search, "prepare", wrap(search, "prepare", "prepare")),
             (search, "ProgramModel", wrap(search, "ProgramModel", "price")),
             (search, "solve", wrap(search, "solve", "search"))]
    try:
        t = time.perf_counter()
        schedule = search.auto_schedule(sdfg, ranks, sizes=sizes, machine=machine)
        parts["total"] = time.perf_counter() - t
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    return schedule, parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--chains", default="10,50,200")
    ap.add_argument("--no-conformance", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "search_time.json"))
    args = ap.parse_args()
    import dace_partition as dp
    rows = []
    for n in [int(x) for x in args.chains.split(",") if x]:
        sdfg = chain_program(n).to_sdfg()
        schedule, parts = timed_search(sdfg, args.ranks, {"N": 4096}, dp.Machine())
        rows.append({"program": f"elementwise chain, {n} maps", "maps": len(dp.maps(sdfg)), "method": schedule.method,
                     **{k: round(v, 2) for k, v in parts.items()}})
        print(rows[-1], flush=True)
    if not args.no_conformance:
        from conformance.harness import SLOW_COMPUTE, symbol_values
        from conformance.programs import CASES
        for name, case in CASES.items():
            sdfg = case.program.to_sdfg()
            schedule, parts = timed_search(sdfg, args.ranks, symbol_values(case), SLOW_COMPUTE)
            rows.append({"program": f"conformance {name}", "maps": len(dp.maps(sdfg)), "method": schedule.method,
                         **{k: round(v, 2) for k, v in parts.items()}})
            print(rows[-1], flush=True)
    print(f"\nauto_schedule time on {args.ranks} ranks (s)")
    print("| program | maps | method | total | prepare | price candidates | search |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['program']} | {r['maps']} | {r['method']} | {r['total']} | {r.get('prepare', '-')} | "
              f"{r.get('price', '-')} | {r.get('search', '-')} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"ranks": args.ranks, "date": time.strftime("%Y-%m-%d"), "rows": rows}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
