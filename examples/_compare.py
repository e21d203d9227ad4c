"""Shared by the whole-program examples: lower a program twice (fused, and with every intermediate
going through rank 0), run both under mpiexec with the PMPI byte counter, check them against NumPy,
and print the report and the bytes each rank received."""
import numpy as np

import dace_partition as dp
from dace_partition.runtime.mpi_count import count_run


def compare(make_sdfg, schedule_of, ranks, inputs, reference, rtol=1e-10, atol=1e-10, **lower_options):
    rows = []
    for fuse in (True, False):
        sdfg = make_sdfg()
        sdfg.name = f"{sdfg.name}_{ranks}_{'fused' if fuse else 'roundtrip'}"
        dp.lower(sdfg, schedule_of(sdfg), fuse=fuse, **lower_options)
        res = count_run(sdfg, ranks, **inputs)
        outputs = res["outputs"]
        np.testing.assert_allclose(outputs[0] if isinstance(outputs, tuple) else outputs, reference, rtol=rtol,
                                   atol=atol)
        if fuse:
            print(dp.report(sdfg))
        predicted = dp.report(sdfg).bytes_per_rank()
        rows.append(("fused" if fuse else "root round trip", res["bytes"], predicted))
    print(f"\n{'version':<16} {'bytes received per rank (counted by PMPI)':<44} {'total':>9}  report agrees")
    for name, counted, predicted in rows:
        agrees = predicted is not None and counted[:len(predicted)] == predicted
        print(f"{name:<16} {str(counted):<44} {sum(counted):>9}  {agrees}")
    ratio = sum(rows[1][1]) / max(1, sum(rows[0][1]))
    print(f"root round trip / fused: {ratio:.1f}x the bytes; results match NumPy")
    return rows
