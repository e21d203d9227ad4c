"""Whole training steps traced from PyTorch (forward, loss, backward, update), compared with eager PyTorch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import dace_partition as dp  # noqa: E402
from dace_partition.frontend import train_step as ts  # noqa: E402

BATCH = 32  # no other axis of the models has this extent (the data-parallel schedule looks for it)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def data(features=64, classes=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, features, generator=g), torch.randint(0, classes, (BATCH, ), generator=g)


def eager_step(model, opt_cls, x, y, **opt):
    opt = opt_cls(model.parameters(), **opt)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach()), {k: v.detach().numpy() for k, v in model.named_parameters()}


def check_step(sdfg, result, ref_loss, ref_params, tol=1e-5):
    loss, new = ts.outputs(sdfg, result)
    assert loss == pytest.approx(ref_loss, rel=tol, abs=tol)
    for k, ref in ref_params.items():
        np.testing.assert_allclose(new[k], ref, rtol=tol, atol=tol, err_msg=k)


@pytest.mark.slow  # the Adam step on 2 ranks covers the same path by default
def test_mlp_sgd_data_parallel_4_ranks():
    """Forward, cross entropy, backward and SGD on 4 ranks, batch split; gradients by allreduce."""
    model = mlp()
    step, state = ts.module_step(model, "sgd", lr=0.1)
    x, y = data()
    sdfg = dp.from_torch_train_step(step, {"x": x, "labels": y}, state, name="t_torch_mlp_sgd_dp4")
    dp.lower(sdfg, ts.data_parallel(sdfg, 4, BATCH))
    rep = dp.report(sdfg)
    grads = {e.array for k in rep.kernels for e in k.comm if e.op == "sum"}
    assert grads, "the weight gradients should arrive as partial sums"
    for k in rep.kernels:
        for e in k.comm:
            if e.array in grads:
                # combined among the ranks (allreduce / reduce-scatter), never reduced or gathered to rank 0
                assert e.direction == "redistribute", str(e)
                assert not any(c.startswith(("MPI_Reduce(", "MPI_Gather")) for c in e.calls), str(e)
    if hasattr(dp, "replicate"):
        assert sum("MPI_Allreduce" in c for e in (e for k in rep.kernels for e in k.comm) for c in e.calls) >= 4
    out = dp.run(sdfg, 4, x=x.numpy(), labels=y.numpy())
    check_step(sdfg, out, *eager_step(model, torch.optim.SGD, x, y, lr=0.1))


def test_mlp_adam_data_parallel_2_ranks():
    """One Adam step (moments and step count are bound state too) equals torch.optim.Adam."""
    model = mlp()
    step, state = ts.module_step(model, "adam", lr=1e-3)
    x, y = data(seed=2)
    sdfg = dp.from_torch_train_step(step, {"x": x, "labels": y}, state, name="t_torch_mlp_adam_dp2")
    dp.lower(sdfg, ts.data_parallel(sdfg, 2, BATCH))
    out = dp.run(sdfg, 2, x=x.numpy(), labels=y.numpy())
    check_step(sdfg, out, *eager_step(model, torch.optim.Adam, x, y, lr=1e-3))
    _, new = ts.outputs(sdfg, out)
    assert float(new["adam.step"].reshape(-1)[0]) == 1.0
    exp_avg = {k: 0.1 * p.grad.numpy() for k, p in model.named_parameters()}
    for k, m in exp_avg.items():
        np.testing.assert_allclose(new[f"exp_avg.{k}"], m, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # about 32 s; the hierarchical solver runs by default in test_hierarchical_solver and test_cluster
def test_mlp_sgd_data_parallel_hierarchy_2x2(monkeypatch):
    """The SGD step on 4 ranks lowered with DACE_PARTITION_HIERARCHY=2x2 (2 simulated nodes of 2 ranks):
    every weight gradient is summed by the hierarchical program (AllReduce inside each node, then across),
    under the PMPI byte counter (each rank receives exactly the report's bytes), equal to PyTorch.

    12 classes instead of 10: a gradient combined by the program must split into one equal chunk per
    group member (4 here); the 10-element bias gradient would keep the flat MPI_Allreduce."""
    from conftest import run_counted

    from dace_partition.solvers.hierarchical import HierarchicalSolver
    from dace_partition.solvers.reduction import ENV_VAR
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(ENV_VAR, "2x2")  # lowering and run time: the run-time check passes
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 12))
    step, state = ts.module_step(model, "sgd", lr=0.1)
    x, y = data(classes=12, seed=5)
    sdfg = dp.from_torch_train_step(step, {"x": x, "labels": y}, state, name="t_torch_mlp_sgd_dp4_h2x2")
    dp.lower(sdfg, ts.data_parallel(sdfg, 4, BATCH))
    sums = [e for k in dp.report(sdfg).kernels for e in k.comm if e.op == "sum"]
    hier = [e for e in sums if e.solver == "hierarchical"]
    # the four parameter gradients (64x64, 64, 64x12 and 12 elements) in 2 groups of 2, twice
    assert sorted(int(np.prod(e.move.src.blocks()[0][1])) for e in hier) == [12, 64, 768, 4096], [str(e) for e in sums]
    for e in hier:
        assert e.direction == "redistribute", str(e)
        assert e.calls[0].startswith("hierarchical 2x2: (node, InsideGroup, AllReduce) ; (node, Parallel(root), "
                                     "AllReduce)"), e.calls[0]
        assert list(e.calls[1:]) == ["MPI_Allreduce(MPI_SUM, 2 groups of 2)"] * 2, e.calls
    # the loss (one float per rank) cannot be cut into 4 chunks: flat, for the reason the solver gives
    (loss_sum, ) = [e for e in sums if e.solver != "hierarchical"]
    assert loss_sum.solver == "allreduce"
    assert HierarchicalSolver().refuse(loss_sum.move) == "1 elements per rank do not split into 4 equal chunks"
    out = run_counted(sdfg, 4, x=x.numpy(), labels=y.numpy())
    check_step(sdfg, out, *eager_step(model, torch.optim.SGD, x, y, lr=0.1))


class Block(nn.Module):
    """Layer norm, batched matmuls and softmax: the ops of attention, forward and backward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.ln = nn.LayerNorm(16)
        self.wq = nn.Parameter(torch.randn(16, 16) * 0.3)

    def forward(self, x):
        h = self.ln(x)
        q = torch.matmul(h, self.wq)
        a = torch.softmax(torch.bmm(q, h.transpose(1, 2)) / 4.0, dim=-1)
        o = torch.bmm(a, h)
        return o


def block_loss(o, target):
    return (o * o).mean() + torch.exp(-o).sum() * 0.01 + (o.sum(dim=1) * target).sum()


def test_aten_ops_single_process():
    """One graph for layer norm, bmm, transpose, softmax, views, mean, exp, neg and their backward ops."""
    model = Block()
    step, state = ts.module_step(model, "sgd", loss=block_loss, lr=0.5)
    g = torch.Generator().manual_seed(4)
    x, target = torch.randn(2, 8, 16, generator=g), torch.randn(2, 16, generator=g)
    sdfg = dp.from_torch_train_step(step, (x, target), state, name="t_torch_block_ops")
    dp.lower(sdfg, {})
    out = dp.run(sdfg, 1, input0=x.numpy(), input1=target.numpy())
    ref_loss, ref_new = step(state, x, target)
    check_step(sdfg, out, float(ref_loss), {k: v.numpy() for k, v in ref_new.items()}, tol=2e-5)


def test_unsupported_op_names_op_and_node():
    def step(state, x):
        w = state["w"]
        return torch.cumsum(x @ w, 0).sum(), {"w": w}

    with pytest.raises(dp.FrontendError, match=r"aten\.cumsum.*node 'cumsum'"):
        dp.from_torch_train_step(step, (torch.randn(4, 3), ), {"w": torch.randn(3, 2)})
