"""A PyTorch MLP, imported with ``dp.from_torch``, run data-parallel on 4 MPI ranks.

Every map that has the batch axis first is split four ways along it, so each rank computes a quarter of
the batch with whole copies of the weights: the report shows the input scattered, the weights
broadcast and the output gathered, and no communication between the layers.

Run:  python examples/torch_mlp.py      (starts mpiexec itself through dp.run)
"""
import numpy as np
import torch
from torch import nn

import dace_partition as dp

RANKS, BATCH = 4, 32


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
    x = torch.randn(BATCH, 64)

    sdfg = dp.from_torch(model, (x, ), name="torch_mlp_example")
    schedule = {m.name: (RANKS, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if m.shape[0] == BATCH}
    for name, grid in schedule.items():
        print(f"  {name}: grid {grid}")
    dp.lower(sdfg, schedule)

    out = dp.run(sdfg, RANKS, timeout=300, input=x)  # nn.Sequential.forward(input); weights are bound
    with torch.no_grad():
        ref = model(x).numpy()
    print(dp.report(sdfg))
    good = np.allclose(out, ref, rtol=1e-4, atol=1e-5)
    print(f"data-parallel on {RANKS} ranks: {'matches PyTorch' if good else 'DOES NOT MATCH PyTorch'} "
          f"(max abs difference {np.abs(out - ref).max():.2e})")
    if not good:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
