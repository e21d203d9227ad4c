"""Conformance table: every program of tests/conformance/programs.py on 2 and 4 ranks.

    python benchmarks/conformance.py [--ranks 2 4] [--only NAME ...] [--md docs/conformance.md]

Prints one row per (program, P): correct / refused (with the reason) / wrong / crash, the lowering time
and the build + run time; writes benchmarks/results/conformance.json and, with --md, the Markdown table.
"""
import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from conformance.harness import evaluate  # noqa: E402
from conformance.programs import CASES  # noqa: E402


def _num(x):
    return "" if x is None else f"{x:.1f}"


def markdown(rows):
    lines = ["| program | kind | P | outcome | lowering (s) | build + run (s) | reason / note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        why = r["reason"] or CASES[r["program"]].note
        if "with subset [" in why and "]: " in why:  # the reason in words, without the long symbolic subset
            why = why.split(":", 1)[0] + ": '" + why.split("'")[1] + "': " + why.split("]: ", 1)[1]
        why = why.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(f"| {r['program']} | {r['kind']} | {r['P']} | {r['status']} | "
                     f"{r['lower_s']:.1f} | {_num(r['build_run_s'])} | {why} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "conformance.json"))
    ap.add_argument("--md")
    args = ap.parse_args()
    rows = []
    for name in args.only or list(CASES):
        for P in args.ranks:
            for o in evaluate(CASES[name], P):
                d = o.as_dict()
                rows.append(d)
                br = "" if o.build_run_s is None else f"{o.build_run_s:6.1f}"
                print(f"{o.program:18s} {o.kind:10s} P={P} {o.status:8s} lower {o.lower_s:6.1f} s  build+run {br:>6s} s"
                      f"  {o.reason[:160]}", flush=True)
    n = len(rows)
    summary = {s: sum(r["status"] == s for r in rows) for s in ("correct", "refused", "wrong", "crash")}
    print(f"\n{n} runs: " + ", ".join(f"{v} {k}" for k, v in summary.items()) +
          f"; {100.0 * summary['correct'] / max(n, 1):.0f}% correct; slowest lowering "
          f"{max(r['lower_s'] for r in rows):.1f} s")
    with open(args.out, "w") as f:
        json.dump(dict(machine=platform.platform(), when=time.strftime("%Y-%m-%d %H:%M"), summary=summary,
                       rows=rows), f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(rows) + "\n")


if __name__ == "__main__":
    main()
