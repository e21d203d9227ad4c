"""The measurement helpers of the benchmarks (no compiler, no MPI): when vs_peers.py calls a variant's time
confirmed, and the communication floor of scaling.py's ideal curve."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
sys.path.insert(0, BENCH)

import scaling  # noqa: E402
import vs_peers  # noqa: E402
from dace_partition.search import Machine  # noqa: E402


def runs(*ms):
    return [{"time": t / 1e3} for t in ms]


def test_one_round_is_not_a_confirmed_time():
    assert vs_peers.stability(runs(7.8), 1.3) == (False, None)


def test_second_round_within_tolerance_confirms_the_best():
    stable, spread = vs_peers.stability(runs(19.0, 7.8, 9.0), 1.3)
    assert stable and spread == pytest.approx(9.0 / 7.8, abs=1e-3)


def test_rounds_further_apart_than_the_tolerance_are_flagged():
    # the README's softmax: 7.8 ms in one run, 19.0 ms in another
    stable, spread = vs_peers.stability(runs(19.0, 7.8), 1.3)
    assert not stable and spread == pytest.approx(19.0 / 7.8, abs=1e-3)


def test_failed_rounds_do_not_count():
    assert vs_peers.stability(runs(7.8) + [{"error": ["crash"]}], 1.3) == (False, None)


M = Machine(alpha=1e-6, beta=1e-9)


def test_floor_of_one_rank_is_nothing():
    assert scaling.floor(1, {"x": 800}, {"y": 800}, M) == (0.0, 0, 0)


def test_root_io_floor_is_the_gather_into_rank_0_or_a_rank_s_share_of_the_inputs():
    # rank 0 receives 3/4 of the 4000 B output; any other rank a quarter of the 8000 B of inputs
    secs, busiest, msgs = scaling.floor(4, {"a": 4000, "b": 4000}, {"c": 4000}, M)
    assert busiest == 3000 and msgs == 2 * 3
    assert secs == pytest.approx(1e-6 * 6 + 1e-9 * 3000)
    secs, busiest, _ = scaling.floor(4, {"a": 40000}, {"c": 4000}, M)
    assert busiest == 10000


def test_distributed_io_floor_is_the_halos_from_each_neighbour():
    # two ranks: one neighbour each; more ranks: an inner rank has two
    assert scaling.floor(2, {"A": 1 << 20}, {"A": 1 << 20}, M, 20, 100, io="distributed")[1:] == (2000, 20)
    assert scaling.floor(8, {"A": 1 << 20}, {"A": 1 << 20}, M, 20, 100, io="distributed")[1:] == (4000, 40)


def test_ideal_is_never_above_the_work_on_rank_0():
    rec = {"work_ms": 2.7}
    assert scaling.ideal_ms(rec, {"ideal": {"predicted_ms": 21.4}}) == 2.7
    assert scaling.ideal_ms(rec, {"ideal": {"predicted_ms": 1.5}}) == 1.5


def _npbench_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location("npbench_tool", os.path.join(BENCH, "npbench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_npbench_speedup_counts_kernels_of_10_ms_and_takes_the_first_mode_that_ran():
    ok = lambda ms: {"outcome": "correct", "run_ms": ms}  # noqa: E731
    records = {
        "a": {"numpy_ms": 20.0, "runs": {"2": {"auto": ok(10.0), "auto_dist": {"outcome": "refused"}}}},
        "b": {"numpy_ms": 40.0, "runs": {"2": {"auto": ok(40.0), "auto_dist": ok(10.0)}}},
        "c": {"numpy_ms": 5.0, "runs": {"2": {"auto": ok(1.0), "auto_dist": ok(1.0)}}},  # under 10 ms
    }
    speedup = _npbench_tool().speedup
    assert speedup(records, 2, "auto") == (pytest.approx(2 ** 0.5), 2)
    assert speedup(records, 2, "auto_dist") == (pytest.approx(4.0), 1)
    assert speedup(records, 2, ("auto_dist", "auto")) == (pytest.approx(8 ** 0.5), 2)
