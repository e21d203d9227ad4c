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

A second problem set (``--mesh-problems N``) samples the same way on larger
meshes (``--meshes``, default {a:2, b:4, c:2} and {a:4, b:4, c:2}, alternating),
with any dimension sizes that the sampled layouts divide.  Its summary is
stored under ``"meshes"`` in the same JSON.

A permutation is charged only for the devices whose tile changes owner
(elements moved / devices), for our plans and for XLA's ``collective-permute``
alike (pairs ``{d,d}`` in ``source_target_pairs`` move nothing).

It then runs a few small problems under ``mpiexec -n 8`` and compares the
wall time of our plan against the naive one.  Prints a table and writes JSON
to ``benchmarks/results/``.

    python benchmarks/redistribution.py                 # 30 problems (default)
    python benchmarks/redistribution.py -n 1000 --mesh-problems 300 --seed 0
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

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=32")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from dace_partition.solvers.synthesis import format_type, naive_plan, synthesize  # noqa: E402
from dace_partition.solvers.synthesis.simulate import tiles_of  # noqa: E402

MESH = {"a": 2, "b": 2, "c": 2}
MESHES = "a=2,b=4,c=2;a=4,b=4,c=2"
ITEMSIZE = 4


def parse_meshes(text: str):
    """``"a=2,b=4;x=8"`` -> ``[{"a": 2, "b": 4}, {"x": 8}]``."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        mesh = {}
        for item in part.split(","):
            name, _, size = item.partition("=")
            mesh[name.strip()] = int(size)
        out.append(mesh)
    return out


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


def sample_mesh_problem(rng: random.Random, mesh, lo_bytes: float = 64e6, hi_bytes: float = 800e6):
    """The same protocol on any mesh: layouts first, then dimension sizes that both layouts divide."""
    while True:
        rank = rng.randint(1, 6)

        def layout():
            lay = [[] for _ in range(rank)]
            for ax in rng.sample(list(mesh), len(mesh)):
                d = rng.randrange(rank + 1)
                if d < rank:
                    lay[d].append(ax)
            return [tuple(x) for x in lay]

        src, dst = layout(), layout()
        unit = [math.lcm(math.prod(mesh[a] for a in src[d]), math.prod(mesh[a] for a in dst[d]))
                for d in range(rank)]
        target = math.exp(rng.uniform(math.log(lo_bytes), math.log(hi_bytes))) / ITEMSIZE
        weights = [rng.random() + 0.05 for _ in range(rank)]
        tot = sum(weights)
        shape = tuple(u * max(1, int(round(target ** (w / tot) / u))) for u, w in zip(unit, weights))
        if lo_bytes <= math.prod(shape) * ITEMSIZE <= hi_bytes:
            return shape, src, dst


# --------------------------------------------------------------------------- XLA
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s([a-z][\w\-]*)\(")
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")


def _arrays(shape_text: str, itemsize: bool = False):
    out = []
    for dt, dims in _ARRAY.findall(shape_text):
        if dt in _DTYPE_BYTES:
            out.append(_DTYPE_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d))
            if itemsize:
                return _DTYPE_BYTES[dt]
    return out


def hlo_costs(hlo: str, ndev: int):
    """Bytes sent per device (Fig. 11 model) and largest buffer of the ENTRY computation.

    A ``collective-permute`` is charged for the pairs that move data only
    (``{d,d}`` pairs and absent devices send nothing), averaged over ``ndev``,
    as our plans' permutations are.  Also returns the bytes under the plain
    Fig. 11 model (every permutation a full tile).
    """
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[: entry.index("\n}")]
    sent, full, peak, ops = 0, 0, 0, []
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
            full += size
            ops.append(base)
            peak = max(peak, size)
            continue
        peak = max(peak, max(arrays))
        if base == "collective-permute":
            pairs = _PAIRS.search(line)
            if pairs:
                moving = sum(a != b for a, b in re.findall(r"\{(\d+),(\d+)\}", pairs.group(1)))
                e = _arrays(shape, itemsize=True)   # rounded up per element, as Plan.bytes_per_device
                sent += -(-(max(arrays) // e) * moving // ndev) * e
            else:
                sent += max(arrays)
            full += max(arrays)
            ops.append(base)
        elif base == "all-gather":
            sent += max(arrays)
            full += max(arrays)
            ops.append(base)
        elif base in ("all-reduce", "reduce-scatter"):
            sent += 2 * max(arrays)
            full += 2 * max(arrays)
            ops.append(base)
    return sent, full, peak, ops


class XLA:
    def __init__(self, ndev: int = 8):
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devs = jax.devices()
        if len(devs) < ndev:
            raise RuntimeError(f"JAX sees {len(devs)} devices, need {ndev} (XLA_FLAGS set too late?)")
        self.jax, self.jnp, self.NS, self.P, self.Mesh = jax, jnp, NamedSharding, PartitionSpec, Mesh
        self.devs = devs
        self.meshes = {}
        self.version = jax.__version__

    def mesh(self, mesh):
        key = tuple(mesh.items())
        if key not in self.meshes:
            n = math.prod(mesh.values())
            self.meshes[key] = self.Mesh(np.array(self.devs[:n]).reshape(tuple(mesh.values())), tuple(mesh))
        return self.meshes[key]

    def spec(self, layout):
        return self.P(*[tuple(a) if a else None for a in layout])

    def compile(self, shape, src, dst, mesh=MESH):
        m = self.mesh(mesh)
        f = self.jax.jit(lambda x: x, in_shardings=self.NS(m, self.spec(src)),
                         out_shardings=self.NS(m, self.spec(dst)))
        txt = f.lower(self.jax.ShapeDtypeStruct(shape, self.jnp.float32)).compile().as_text()
        return hlo_costs(txt, math.prod(mesh.values()))


class XLAProcess:
    """:class:`XLA` in a child process, restarted if it dies.

    XLA 0.7.1's SPMD partitioner dies with SIGFPE (integer division by zero) on
    some layouts of the larger meshes, e.g. ``(4, 1272, 4, 259, 32)`` on
    {a:2, b:4, c:2} from ``[(), b, c, (), a]`` to ``[c, a, b, (), ()]``; such a
    problem gets no XLA figures (``xla_failed``) instead of ending the run.
    """

    def __init__(self, ndev: int):
        self.ndev = ndev
        self.proc = None
        self.version = self._call({"version": True})["version"]

    def _start(self):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={max(8, self.ndev)}")
        self.proc = subprocess.Popen([sys.executable, __file__, "--xla-worker", str(self.ndev)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def _call(self, msg):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            rc = self.proc.returncode
            self.proc = None
            if "version" in msg:
                raise RuntimeError(f"XLA worker exited with {rc}")
            return {"error": f"XLA worker exited with {rc}"}
        return json.loads(line)

    def compile(self, shape, src, dst, mesh=MESH):
        r = self._call({"shape": list(shape), "src": [list(a) for a in src], "dst": [list(a) for a in dst],
                        "mesh": list(mesh.items())})
        return None if "error" in r else tuple(r["result"])


def xla_worker(ndev: int):
    xla = XLA(ndev)
    for line in sys.stdin:
        msg = json.loads(line)
        if "version" in msg:
            out = {"version": xla.version}
        else:
            out = {"result": xla.compile(tuple(msg["shape"]), [tuple(a) for a in msg["src"]],
                                         [tuple(a) for a in msg["dst"]], dict(msg["mesh"]))}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


# --------------------------------------------------------------------------- MPI timing
def mpi_worker(spec_path: str, out_path: str, reps: int):
    from mpi4py import MPI
    from dace_partition.solvers.communicators import Communicators

    comm = MPI.COMM_WORLD
    comms = Communicators(comm)  # the plans' sub-communicators, split at the first call, not timed after
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
            out = plan.execute(comms, tile)
            ok = comm.allreduce(int(np.array_equal(out, want)), op=MPI.MIN)
            times = []
            for _ in range(reps):
                comm.Barrier()
                t0 = MPI.Wtime()
                plan.execute(comms, tile)
                comm.Barrier()
                times.append(MPI.Wtime() - t0)
            row[name] = {"median_s": statistics.median(times), "min_s": min(times), "correct": bool(ok)}
        results.append(row)
    comms.free()
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


def run_set(problems, xla, print_every=0):
    """Synthesize, baseline and (if ``xla``) compile every ``(mesh, shape, src, dst)``; one row each."""
    rows = []
    for k, (mesh, shape, src, dst) in enumerate(problems):
        t0 = time.perf_counter()
        plan = synthesize(mesh, shape, src, dst, itemsize=ITEMSIZE)
        t_syn = time.perf_counter() - t0
        naive = naive_plan(mesh, shape, src, dst, itemsize=ITEMSIZE)
        row = {
            "mesh": dict(mesh),
            "src": format_type(shape, src, mesh), "dst": format_type(shape, dst, mesh),
            "shape": list(shape), "src_layout": [list(a) for a in src], "dst_layout": [list(a) for a in dst],
            "global_bytes": math.prod(shape) * ITEMSIZE, "bound_bytes": plan.memory_bound_bytes,
            "synthesis_s": t_syn, "ops": plan.ops,
            "ours_bytes": plan.bytes_per_device, "ours_bytes_fig11": plan.cost * ITEMSIZE,
            "ours_peak": plan.peak_bytes,
            "naive_bytes": naive.bytes_per_device, "naive_peak": naive.peak_bytes,
        }
        if xla is not None:
            res = xla.compile(shape, src, dst, mesh)
            if res is None:
                row["xla_failed"] = True
            else:
                xb, xf, xp, xops = res
                row.update(xla_bytes=xb, xla_bytes_fig11=xf, xla_peak=xp, xla_ops=xops)
        rows.append(row)
        if print_every and (k + 1) % print_every == 0:
            print(f"  {k + 1}/{len(problems)} problems", flush=True)
    return rows


def summarize(rows, xla):
    times = [r["synthesis_s"] for r in rows]
    summary = {
        "problems": len(rows),
        "synthesis_median_ms": 1e3 * statistics.median(times), "synthesis_p99_ms": 1e3 * pct(times, 99),
        "synthesis_max_ms": 1e3 * max(times),
        "ours_over_bound_pct": 100 * sum(r["ours_peak"] > r["bound_bytes"] for r in rows) / len(rows),
        "naive_over_bound_pct": 100 * sum(r["naive_peak"] > r["bound_bytes"] for r in rows) / len(rows),
        "geomean_naive_over_ours_bytes": geomean([r["naive_bytes"] / r["ours_bytes"] for r in rows if r["ours_bytes"]]),
        "plans_with_allpermute_pct": 100 * sum("allpermute" in r["ops"] for r in rows) / len(rows),
    }
    if xla is not None:
        failed = [r for r in rows if r.get("xla_failed")]
        rows = [r for r in rows if not r.get("xla_failed")]
        both = [r for r in rows if r["ours_bytes"] and r["xla_bytes"]]
        summary.update({
            "xla_failed": len(failed),
            "xla_version": xla.version,
            "geomean_xla_over_ours_bytes": geomean([r["xla_bytes"] / r["ours_bytes"] for r in both]),
            "max_xla_over_ours_bytes": max((r["xla_bytes"] / r["ours_bytes"] for r in both), default=float("nan")),
            "min_xla_over_ours_bytes": min((r["xla_bytes"] / r["ours_bytes"] for r in both), default=float("nan")),
            "problems_ours_more_bytes_than_xla": sum(r["ours_bytes"] > r["xla_bytes"] for r in rows),
            "problems_ours_equal_bytes_to_xla": sum(r["ours_bytes"] == r["xla_bytes"] for r in rows),
            "problems_ours_fewer_bytes_than_xla": sum(r["ours_bytes"] < r["xla_bytes"] for r in rows),
            "xla_over_bound_pct": 100 * sum(r["xla_peak"] > r["bound_bytes"] for r in rows) / len(rows),
            "xla_max_peak_over_bound": max(r["xla_peak"] / r["bound_bytes"] for r in rows),
            # the same comparison with every permutation charged a full tile (plain Fig. 11), for both
            "fig11_geomean_xla_over_ours_bytes": geomean(
                [r["xla_bytes_fig11"] / r["ours_bytes_fig11"] for r in rows if r["ours_bytes_fig11"] and r["xla_bytes_fig11"]]),
            "fig11_problems_ours_more_bytes_than_xla": sum(r["ours_bytes_fig11"] > r["xla_bytes_fig11"] for r in rows),
        })
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--problems", type=int, default=30, help="number of sampled problems (paper: 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mesh-problems", type=int, default=0,
                    help="problems of the second set, on --meshes (alternating); 0: skip")
    ap.add_argument("--meshes", default=MESHES, help=f"meshes of the second set (default {MESHES!r})")
    ap.add_argument("--mpi-problems", type=int, default=6, help="small problems timed under mpiexec -n 8 (0: skip)")
    ap.add_argument("--mpi-bytes", type=float, default=8e6, help="global size of the MPI problems, bytes (max)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-xla", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "redistribution.json"))
    ap.add_argument("--mpi-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--xla-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mpi_worker:
        return mpi_worker(*args.mpi_worker, args.reps)
    if args.xla_worker:
        return xla_worker(args.xla_worker)

    rng = random.Random(args.seed)
    meshes = parse_meshes(args.meshes) if args.mesh_problems else []
    xla, xla_reason = None, None
    if args.no_xla:
        xla_reason = "disabled with --no-xla"
    else:
        try:
            xla = XLAProcess(max([8] + [math.prod(m.values()) for m in meshes]))
        except Exception as e:  # ImportError or a JAX without enough CPU devices
            xla_reason = f"JAX unavailable: {type(e).__name__}: {e}"
    if xla_reason:
        print(f"[XLA column skipped] {xla_reason}")

    problems = [(MESH,) + sample_problem(rng) for _ in range(args.problems)]
    rows = run_set(problems, xla, print_every=100)
    summary = {"seed": args.seed, "mesh": MESH, **summarize(rows, xla)}
    if xla is None:
        summary["xla_skipped"] = xla_reason

    mesh_rows, mesh_summary = [], None
    if meshes:
        mrng = random.Random(args.seed + 1)
        mprobs = [(meshes[k % len(meshes)],) + sample_mesh_problem(mrng, meshes[k % len(meshes)])
                  for k in range(args.mesh_problems)]
        mesh_rows = run_set(mprobs, xla, print_every=100)
        mesh_summary = {"seed": args.seed + 1, "meshes": meshes, **summarize(mesh_rows, xla)}

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
    result = {"meta": meta, "summary": summary, "problems": rows, "mpi": mpi_rows}
    if mesh_summary is not None:
        print(f"\n# second set: {args.mesh_problems} problems on {meshes}")
        print_table(mesh_rows, [], mesh_summary, meta, xla is not None)
        result["meshes"] = {"summary": mesh_summary, "problems": mesh_rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump(result))
    print(f"\nwrote {out}")


def dump(result) -> str:
    """JSON with one line per problem row (1300 rows stay readable and diffable)."""
    def rows(xs, pad):
        return "[\n" + ",\n".join(pad + json.dumps(x) for x in xs) + "\n" + pad[:-1] + "]"

    parts = [f' "meta": {json.dumps(result["meta"])}', f' "summary": {json.dumps(result["summary"], indent=1)}',
             f' "problems": {rows(result["problems"], "  ")}', f' "mpi": {rows(result["mpi"], "  ")}']
    if "meshes" in result:
        m = result["meshes"]
        parts.append(f' "meshes": {{"summary": {json.dumps(m["summary"])},\n  "problems": {rows(m["problems"], "   ")}}}')
    for key, value in result.items():       # anything else (e.g. a recorded earlier run), one line each
        if key not in ("meta", "summary", "problems", "mpi", "meshes"):
            parts.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


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
        xla_ok = have_xla and not r.get("xla_failed")
        if xla_ok:
            ratio = r["xla_bytes"] / r["ours_bytes"] if r["ours_bytes"] else float("nan")
            line += f" {_mb(r['xla_bytes']):>9} {ratio:>8.2f}"
        elif have_xla:
            line += f" {'failed':>9} {'-':>8}"
        line += f" {r['ours_peak'] / r['bound_bytes']:>15.2f} {r['naive_peak'] / r['bound_bytes']:>6.2f}"
        if xla_ok:
            line += f" {r['xla_peak'] / r['bound_bytes']:>6.2f}"
        elif have_xla:
            line += f" {'-':>6}"
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
