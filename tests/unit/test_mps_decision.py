"""When ``run`` gives a job's ranks a private CUDA MPS daemon (runtime/mps.py): pure, no GPU needed."""
import pytest

from dace_partition.runtime.mps import Mps, decide

TOOL = "/usr/bin/nvidia-cuda-mps-control"


def _decide(on_gpu=True, ranks=2, gpus=1, local=True, control=TOOL, env=None, system=False):
    return decide(on_gpu, ranks, gpus, local, control, env or {}, system)


def test_ranks_that_share_a_gpu_get_a_daemon():
    d = _decide(ranks=4, gpus=2)
    assert d.action is Mps.START and "4 ranks share 2 GPU(s)" in str(d)


@pytest.mark.parametrize("kw, why", [
    (dict(on_gpu=False), "does not run on a GPU"),
    (dict(ranks=2, gpus=2), "none shares a GPU"),
    (dict(local=False), "not started on this machine"),
    (dict(gpus=0), "no GPU is visible"),
    (dict(control=None), "not on PATH"),
    (dict(env={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/theirs"}), "serves this environment already"),
    (dict(system=True), "serves this environment already"),
    (dict(env={"DACE_PARTITION_MPS": "0"}), "DACE_PARTITION_MPS=0"),
])
def test_no_daemon_where_none_is_needed_or_possible(kw, why):
    d = _decide(**kw)
    assert d.action is Mps.NONE and why in d.why


def test_asking_for_a_daemon_that_cannot_be_had_is_an_error_in_words():
    on = {"DACE_PARTITION_MPS": "1"}
    assert _decide(ranks=1, gpus=1, env=on).action is Mps.START  # asked for: even without sharing
    with pytest.raises(ValueError, match="DACE_PARTITION_MPS=1.*nvidia-cuda-mps-control is not on PATH"):
        _decide(control=None, env=on)
    with pytest.raises(ValueError, match="DACE_PARTITION_MPS='sometimes'"):
        _decide(env={"DACE_PARTITION_MPS": "sometimes"})
    assert _decide(system=True, env=on).action is Mps.NONE  # one runs already: the ranks use it
    assert _decide(on_gpu=False, env=on).action is Mps.NONE  # a CPU program has nothing to share


def test_the_command_line_runs_a_command_under_the_decision_and_keeps_its_exit_status(tmp_path):
    """``python -m dace_partition mps``: where no GPU is visible it says so and runs the command as it is."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "DACE_PARTITION_NO_GPU": "1"}
    env.pop("DACE_PARTITION_MPS", None)
    mark = tmp_path / "ran"
    res = subprocess.run([sys.executable, "-m", "dace_partition", "mps", "--ranks", "2", "--", sys.executable, "-c",
                          f"open({str(mark)!r}, 'w').write('x'); raise SystemExit(3)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 3 and mark.exists(), res.stderr
    assert "MPS: none (no GPU is visible here)" in res.stderr
    refused = subprocess.run([sys.executable, "-m", "dace_partition", "mps", "--ranks", "2", "--", "true"],
                             capture_output=True, text=True, env={**env, "DACE_PARTITION_MPS": "1"}, timeout=120)
    assert refused.returncode != 0 and "no MPS daemon can be started for this job" in refused.stderr
