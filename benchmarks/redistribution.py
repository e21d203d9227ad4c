"""Benchmark of the collective-sequence synthesizer (paper sec. 8 protocol).

Samples N redistribution problems: a 3-axis mesh {a:2, b:2, c:2} over 8
devices, float32 arrays of rank 1-6 and 64-800 MB global, each mesh axis
independently replicated or partitioning a random dimension (in source and
target).  For each it reports synthesis time and, per device, bytes sent (the
paper's Fig. 11 cost model) and peak tile bytes for

  * our plan,
  * the naive allgather-then-dynslice plan (eq. 2),
  * XLA's SPMD partitioner, compiled in the same run by JAX on CPU
    (``--xla_force_host_platform_device_count=8``, jit of the identity with
    in/out ``NamedSharding``), with collectives and buffer sizes read from the
    compiled HLO.  Skipped with a printed reason if JAX is not importable.

It then runs a few small problems under ``mpiexec -n 8`` and compares the
wall time of our plan against the naive one.  Prints a table and writes JSON
to ``benchmarks/results/``.

    python benchmarks/redistribution.py                 # 30 problems (default)
    python benchmarks/redistribution.py -n 1000 --seed 0
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from dace_partition.solvers.synthesis import format_type, naive_plan, synthesize  # noqa: E402
from dace_partition.solvers.synthesis.simulate import tiles_of  # noqa: E402

MESH = {"a": 2, "b": 2, "c": 2}
ITEMSIZE = 4


# --------------------------------------------------------------------------- sampling
def sample_problem(rng: random.Random, lo_bytes: float = 64e6, hi_bytes: float = 800e6):
    """One problem per the paper's protocol (dims are multiples of 8 so every layout divides)."""
    while True:
        rank = rng.randint(1, 6)
        target = math.exp(rng.uniform(math.log(lo_bytes), math.log(hi_bytes))) / ITEMSIZE
        weights = [rng.random() + 0.05 for _ in range(rank)]
        tot = sum(weights)
        shape = tuple(max(8, int(round(target ** (w / tot) / 8)) * 8) for w in weights)
        nbytes = math.prod(shape) * ITEMSIZE
        if lo_bytes <= nbytes <= hi_bytes:
            break

    def layout():
        lay = [[] for _ in range(rank)]
        for ax in rng.sample(list(MESH), len(MESH)):
            d = rng.randrange(rank + 1)
            if d < rank:
                lay[d].append(ax)
        return [tuple(x) for x in lay]

    return shape, layout(), layout()


# --------------------------------------------------------------------------- XLA
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s([a-z][\w\-]*)\(")
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def _arrays(shape_text: str):
    out = []
    for dt, dims in _ARRAY.findall(shape_text):
        if dt in _DTYPE_BYTES:
            out.append(_DTYPE_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d))
    return out


def hlo_costs(hlo: str):
    """Bytes sent per device (Fig. 11 model) and largest buffer of the ENTRY computation."""
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[: entry.index("\n}")]
    sent, peak, ops = 0, 0, []
    for line in entry.splitlines()[1:]:
        m = _INSTR.match(line)
        if not m:
            continue
        shape, op = m.group(1), m.group(2)
        arrays = _arrays(shape)
        if not arrays:
            continue
        base = op[:-6] if op.endswith("-start") else op
        if op.endswith("-done"):
            continue
        if base == "all-to-all":
            size = sum(arrays) if shape.startswith("(") else arrays[0]
            sent += size
            ops.append(base)
            peak = max(peak, size)
            continue
        peak = max(peak, max(arrays))
        if base in ("all-gather", "collective-permute"):
            sent += max(arrays)
            ops.append(base)
        elif base in ("all-reduce", "reduce-scatter"):
            sent += 2 * max(arrays)
            ops.append(base)
    return sent, peak, ops


class XLA:
    def __init__(self):
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devs = jax.devices()
        if len(devs) < 8:
            raise RuntimeError(f"JAX sees {len(devs)} devices, need 8 (XLA_FLAGS set too late?)")
        self.jax, self.jnp, self.NS, self.P = jax, jnp, NamedSharding, PartitionSpec
        self.mesh = Mesh(np.array(devs[:8]).reshape(tuple(MESH.values())), tuple(MESH))
        self.version = jax.__version__

    def spec(self, layout):
        return self.P(*[tuple(a) if a else None for a in layout])

    def compile(self, shape, src, dst):
        f = self.jax.jit(lambda x: x, in_shardings=self.NS(self.mesh, self.spec(src)),
                         out_shardings=self.NS(self.mesh, self.spec(dst)))
        txt = f.lower(self.jax.ShapeDtypeStruct(shape, self.jnp.float32)).compile().as_text()
        return hlo_costs(txt)


# --------------------------------------------------------------------------- MPI timing
def mpi_worker(spec_path: str, out_path: str, reps: int):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    problems = json.loads(Path(spec_path).read_text())
    results = []
    for p in problems:
        shape, src, dst = tuple(p["shape"]), p["src"], p["dst"]
        g = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        row = {}
        for name, make in (("ours", synthesize), ("naive", naive_plan)):
            plan = make(MESH, shape, src, dst, itemsize=4)
            tile = plan.src_tiles(g)[r].copy()
            final = plan.steps[-1].after if plan.steps else plan.initial
            want = tiles_of(final, g)[r]          # the target tile, straight from the type semantics
            out = plan.execute(comm, tile)
            ok = comm.allreduce(int(np.array_equal(out, want)), op=MPI.MIN)
            times = []
            for _ in range(reps):
                comm.Barrier()
                t0 = MPI.Wtime()
                plan.execute(comm, tile)
                comm.Barrier()
                times.append(MPI.Wtime() - t0)
            row[name] = {"median_s": statistics.median(times), "min_s": min(times), "correct": bool(ok)}
        results.append(row)
    if r == 0:
        Path(out_path).write_text(json.dumps(results))


def run_mpi(problems, reps: int):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        return None, f"mpiexec not found next to {sys.executable}"
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "problems.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps(problems))
        env = dict(os.environ, OMP_NUM_THREADS="1", PATH=f"{mpiexec.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        cmd = [str(mpiexec), "-n", "8", sys.executable, "-m", "mpi4py", __file__, "--mpi-worker", str(spec), str(out),
               "--reps", str(reps)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not out.exists():
            return None, f"mpiexec failed: {proc.stderr[-500:]}"
        return json.loads(out.read_text()), None


# --------------------------------------------------------------------------- main
def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q / 100 * len(xs))) - 1)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--problems", type=int, default=30, help="number of sampled problems (paper: 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mpi-problems", type=int, default=6, help="small problems timed under mpiexec -n 8 (0: skip)")
    ap.add_argument("--mpi-bytes", type=float, default=8e6, help="global size of the MPI problems, bytes (max)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "redistribution.json"))
    ap.add_argument("--mpi-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mpi_worker:
        return mpi_worker(*args.mpi_worker, args.reps)

    rng = random.Random(args.seed)
    xla, xla_reason = None, None
    if args.no_xla:
        xla_reason = "disabled with --no-xla"
    else:
        try:
            xla = XLA()
        except Exception as e:  # ImportError or a JAX without 8 CPU devices
            xla_reason = f"JAX unavailable: {type(e).__name__}: {e}"
    if xla_reason:
        print(f"[XLA column skipped] {xla_reason}")

    rows = []
    for k in range(args.problems):
        shape, src, dst = sample_problem(rng)
        t0 = time.perf_counter()
        plan = synthesize(MESH, shape, src, dst, itemsize=ITEMSIZE)
        t_syn = time.perf_counter() - t0
        naive = naive_plan(MESH, shape, src, dst, itemsize=ITEMSIZE)
        row = {
            "src": format_type(shape, src, MESH), "dst": format_type(shape, dst, MESH),
            "shape": list(shape), "src_layout": [list(a) for a in src], "dst_layout": [list(a) for a in dst],
            "global_bytes": math.prod(shape) * ITEMSIZE, "bound_bytes": plan.memory_bound_bytes,
            "synthesis_s": t_syn, "ops": plan.ops,
            "ours_bytes": plan.bytes_per_device, "ours_peak": plan.peak_bytes,
            "naive_bytes": naive.bytes_per_device, "naive_peak": naive.peak_bytes,
        }
        if xla is not None:
            xb, xp, xops = xla.compile(shape, src, dst)
            row.update(xla_bytes=xb, xla_peak=xp, xla_ops=xops)
        rows.append(row)

    times = [r["synthesis_s"] for r in rows]
    summary = {
        "problems": len(rows), "seed": args.seed, "mesh": MESH,
        "synthesis_median_ms": 1e3 * statistics.median(times), "synthesis_p99_ms": 1e3 * pct(times, 99),
        "synthesis_max_ms": 1e3 * max(times),
        "ours_over_bound_pct": 100 * sum(r["ours_peak"] > r["bound_bytes"] for r in rows) / len(rows),
        "naive_over_bound_pct": 100 * sum(r["naive_peak"] > r["bound_bytes"] for r in rows) / len(rows),
        "geomean_naive_over_ours_bytes": geomean([r["naive_bytes"] / r["ours_bytes"] for r in rows if r["ours_bytes"]]),
        "plans_with_allpermute_pct": 100 * sum("allpermute" in r["ops"] for r in rows) / len(rows),
    }
    if xla is not None:
        both = [r for r in rows if r["ours_bytes"] and r["xla_bytes"]]
        summary.update({
            "xla_version": xla.version,
            "geomean_xla_over_ours_bytes": geomean([r["xla_bytes"] / r["ours_bytes"] for r in both]),
            "max_xla_over_ours_bytes": max((r["xla_bytes"] / r["ours_bytes"] for r in both), default=float("nan")),
            "problems_ours_more_bytes_than_xla": sum(r["ours_bytes"] > r["xla_bytes"] for r in rows),
            "xla_over_bound_pct": 100 * sum(r["xla_peak"] > r["bound_bytes"] for r in rows) / len(rows),
            "xla_max_peak_over_bound": max(r["xla_peak"] / r["bound_bytes"] for r in rows),
        })
    else:
        summary["xla_skipped"] = xla_reason

    mpi_rows, mpi_reason = [], None
    if args.mpi_problems:
        small = [sample_problem(rng, 1e6, args.mpi_bytes) for _ in range(args.mpi_problems)]
        probs = [{"shape": list(s), "src": [list(a) for a in sl], "dst": [list(a) for a in dl]} for s, sl, dl in small]
        res, mpi_reason = run_mpi(probs, args.reps)
        if res is not None:
            for p, r in zip(probs, res):
                mpi_rows.append({"src": format_type(p["shape"], p["src"], MESH),
                                 "dst": format_type(p["shape"], p["dst"], MESH),
                                 "global_bytes": math.prod(p["shape"]) * ITEMSIZE, **r})
            summary["mpi_geomean_naive_over_ours_time"] = geomean(
                [r["naive"]["median_s"] / r["ours"]["median_s"] for r in mpi_rows])
            summary["mpi_all_correct"] = all(r["ours"]["correct"] and r["naive"]["correct"] for r in mpi_rows)
        else:
            print(f"[MPI timing skipped] {mpi_reason}")
            summary["mpi_skipped"] = mpi_reason

    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__}
    print_table(rows, mpi_rows, summary, meta, xla is not None)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "summary": summary, "problems": rows, "mpi": mpi_rows}, indent=1))
    print(f"\nwrote {out}")


def _mb(b):
    return f"{b / 2**20:8.1f}"


def print_table(rows, mpi_rows, s, meta, have_xla):
    print(f"\n# Redistribution benchmark  {meta['date']}  {meta['machine']}  ({meta['cpus']} cpus)")
    hdr = f"{'#':>3} {'global MiB':>10} {'ours MiB':>9} {'naive MiB':>9}"
    hdr += f" {'xla MiB':>9} {'xla/ours':>8}" if have_xla else ""
    hdr += f" {'peak/bound ours':>15} {'naive':>6}" + (f" {'xla':>6}" if have_xla else "") + f" {'synth ms':>8}  plan"
    print(hdr)
    for k, r in enumerate(rows):
        line = f"{k:>3} {_mb(r['global_bytes']):>10} {_mb(r['ours_bytes']):>9} {_mb(r['naive_bytes']):>9}"
        if have_xla:
            ratio = r["xla_bytes"] / r["ours_bytes"] if r["ours_bytes"] else float("nan")
            line += f" {_mb(r['xla_bytes']):>9} {ratio:>8.2f}"
        line += f" {r['ours_peak'] / r['bound_bytes']:>15.2f} {r['naive_peak'] / r['bound_bytes']:>6.2f}"
        if have_xla:
            line += f" {r['xla_peak'] / r['bound_bytes']:>6.2f}"
        line += f" {1e3 * r['synthesis_s']:>8.2f}  {','.join(o[:4] for o in r['ops']) or '-'}"
        print(line)
    print("\nsummary:")
    for k, v in s.items():
        print(f"  {k:<36} {v:.3f}" if isinstance(v, float) else f"  {k:<36} {v}")
    if mpi_rows:
        print("\nMPI wall time on 8 ranks (median of reps):")
        print(f"{'global MiB':>10} {'ours ms':>9} {'naive ms':>9} {'naive/ours':>10}  src -> dst")
        for r in mpi_rows:
            o, n = r["ours"]["median_s"], r["naive"]["median_s"]
            print(f"{_mb(r['global_bytes']):>10} {1e3 * o:>9.2f} {1e3 * n:>9.2f} {n / o:>10.2f}  {r['src']} -> {r['dst']}")


if __name__ == "__main__":
    main()
