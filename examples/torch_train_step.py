"""One PyTorch training step (forward, cross entropy, backward, SGD) of an MLP, data-parallel on 4 ranks.

The step is traced to ATen with ``make_fx`` (the backward comes from ``torch.func.grad``), turned into
an SDFG, split over the batch, run under mpiexec and compared with eager PyTorch.

Run:  python examples/torch_train_step.py   (it starts mpiexec itself; needs the ``torch`` extra)
"""
import numpy as np
import torch
from torch import nn

import dace_partition as dp
from dace_partition.frontend import train_step as ts

RANKS, BATCH = 4, 32


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x, labels = torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH, ))

    step, state = ts.module_step(model, "sgd", lr=0.1)  # step(state, x, labels) -> (loss, new state)
    sdfg = dp.from_torch_train_step(step, {"x": x, "labels": labels}, state, name="mlp_train_step")
    dp.lower(sdfg, ts.data_parallel(sdfg, RANKS, BATCH))
    print(dp.report(sdfg))

    loss, new = ts.outputs(sdfg, dp.run(sdfg, RANKS, x=x.numpy(), labels=labels.numpy()))

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = nn.functional.cross_entropy(model(x), labels)
    ref.backward()
    opt.step()
    err = max(float(np.abs(new[k] - p.detach().numpy()).max()) for k, p in model.named_parameters())
    print(f"\nloss {loss:.6f} (torch {float(ref.detach()):.6f}); largest difference of an updated weight: {err:.2e}")
    if err > 1e-5 or abs(loss - float(ref.detach())) > 1e-5:
        raise SystemExit("DOES NOT MATCH PyTorch")
    print("updated weights match eager PyTorch")


if __name__ == "__main__":
    main()
