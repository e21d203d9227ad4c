"""``from_torch`` models lowered and run under a real mpiexec, compared element by element with eager
PyTorch: a data-parallel MLP, a Megatron-style (head-parallel) transformer encoder block, and a padded-batch
encoder written as Hugging Face's models write it (positions counted from the padding, masked keys)."""
import functools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from torch import nn  # noqa: E402

import dace_partition as dp  # noqa: E402
from dace_partition.runtime.launch import bound_values  # noqa: E402
from conftest import run_counted  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


def eager(module, *args):
    with torch.no_grad():
        return module(*[torch.as_tensor(a) for a in args]).numpy()


# -- data-parallel MLP ---------------------------------------------------------------------------------


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).eval()


@functools.lru_cache(maxsize=None)
def mlp_data_parallel(ranks):
    """The MLP with every map that has the batch axis as its first parameter split ``ranks`` ways."""
    module = mlp()
    sdfg = dp.from_torch(module, (torch.randn(16, 64), ), name=f"torch_mlp_dp{ranks}")
    schedule = {m.name: (ranks, ) + (1, ) * (len(m.params) - 1) for m in dp.maps(sdfg) if m.shape[0] == 16}
    assert len(schedule) == len(dp.maps(sdfg)) == 7  # two (zero + contract) einsums, two bias adds, the ReLU
    dp.lower(sdfg, schedule)
    return module, sdfg


def test_from_torch_keeps_forward_names_and_binds_parameters():
    module = mlp()
    sdfg = dp.from_torch(module, (torch.randn(16, 64), ), name="torch_mlp_args")
    args = set(sdfg.arglist()) - {"__return"}
    bound = bound_values(sdfg)
    assert args - set(bound) == {"input"}  # nn.Sequential.forward(input)
    params = {k: v.detach().numpy() for k, v in module.named_parameters()}
    assert len(bound) == len(params) == 4
    for name, value in params.items():  # every parameter is an SDFG argument holding its value
        assert any(v.shape == value.shape and np.array_equal(v, value) for v in bound.values()), name


def test_mlp_data_parallel_4_ranks():
    module, sdfg = mlp_data_parallel(4)
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    out = dp.run(sdfg, 4, timeout=240, input=torch.from_numpy(x))
    assert out.dtype == np.float32 and out.shape == (16, 10)
    np.testing.assert_allclose(out, eager(module, x), **TOL)


def test_mlp_data_parallel_has_no_communication_between_layers():
    _, sdfg = mlp_data_parallel(4)
    entries = [(e.direction, e.array, tuple(e.calls)) for k in dp.report(sdfg).kernels for e in k.comm]
    arrays = {a for _, a, _ in entries}
    assert arrays == {"input", "t_0_weight", "t_0_bias", "t_2_weight", "t_2_bias", "__return"}, entries
    assert [c for d, a, c in entries if a == "input"] == [("MPI_Scatterv(grid dims (0,))", )]
    assert [c for d, a, c in entries if a == "__return"] == [("MPI_Gatherv(grid dims (0,))", )]
    for d, a, calls in entries:  # weights and biases: whole, to every rank
        if a.startswith("t_"):
            assert d == "scatter" and any(c.startswith("MPI_Bcast") for c in calls), (a, calls)
            assert all(c.startswith("MPI_Bcast") or c == "copy on rank 0" for c in calls), (a, calls)


# -- Megatron-style transformer encoder block ------------------------------------------------------------

B, S, D, H, F = 2, 8, 24, 4, 48  # head (4) and MLP-hidden (48) sizes occur on no other axis


class EncoderBlock(nn.Module):
    """Post-norm transformer encoder block with per-head weights, so that the exported graph keeps the head
    axis as an axis of every attention tensor (``nn.TransformerEncoderLayer`` packs heads into reshapes)."""

    def __init__(self):
        super().__init__()
        e = D // H

        def param(*shape):
            return nn.Parameter(torch.randn(*shape) / math.sqrt(shape[-2]))

        self.wq, self.wk, self.wv = param(H, D, e), param(H, D, e), param(H, D, e)
        self.bq, self.bk, self.bv = (nn.Parameter(0.1 * torch.randn(H, 1, e)) for _ in range(3))
        self.wo, self.bo = param(H, e, D), nn.Parameter(0.1 * torch.randn(D))
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, F), nn.Linear(F, D)
        self.scale = 1.0 / math.sqrt(e)

    def forward(self, x):
        q = torch.einsum("bsd,hde->bhse", x, self.wq) + self.bq
        k = torch.einsum("bsd,hde->bhse", x, self.wk) + self.bk
        v = torch.einsum("bsd,hde->bhse", x, self.wv) + self.bv
        p = torch.softmax(torch.einsum("bhse,bhte->bhst", q, k) * self.scale, dim=-1)
        ctx = torch.einsum("bhst,bhte->bhse", p, v)
        x = self.ln1(x + torch.einsum("bhse,hed->bsd", ctx, self.wo) + self.bo)
        return self.ln2(x + self.fc2(torch.relu(self.fc1(x))))


def megatron_schedule(sdfg, ranks):
    """Heads split over the ranks in every attention map (QKV projections, scores, softmax, context, and
    the output projection, which then sums partial results over heads); the MLP's hidden axis split, so
    that its first layer is column-split and its second row-split. Every other kernel (residuals, layer
    norms) is replicated on all ranks, so the two row-split projections end in an MPI_Allreduce each."""
    schedule, kernels = {}, {}
    for m in dp.maps(sdfg):
        split = [i for i, n in enumerate(m.shape) if n in (H, F)]
        if len(split) == 1:
            schedule[m.name] = tuple(ranks if i == split[0] else 1 for i in range(len(m.params)))
        kernels.setdefault(id(m.kernel), []).append(m)
    for infos in kernels.values():
        if not any(m.name in schedule for m in infos):
            principal = max(infos, key=lambda m: len(m.params))
            schedule[principal.name] = dp.replicate((1, ) * len(principal.params), ranks)
    return schedule


@functools.lru_cache(maxsize=None)
def megatron_block(ranks):
    torch.manual_seed(1)
    module = EncoderBlock().eval()
    sdfg = dp.from_torch(module, (torch.randn(B, S, D), ), name=f"torch_block_megatron{ranks}")
    dp.lower(sdfg, megatron_schedule(sdfg, ranks))
    return module, sdfg


@pytest.mark.parametrize("ranks", [pytest.param(2, marks=pytest.mark.slow), 4])  # 4 ranks covers 2
def test_transformer_block_megatron(ranks):
    module, sdfg = megatron_block(ranks)
    x = np.random.default_rng(ranks).standard_normal((B, S, D)).astype(np.float32)
    out = run_counted(sdfg, ranks, x=x)  # also: every rank received exactly the bytes the report says
    assert out.shape == (B, S, D)
    np.testing.assert_allclose(out, eager(module, x), **TOL)


def test_transformer_block_megatron_communication():
    """Megatron's pattern, read from the report: each rank gets only its heads' attention weights and its
    slice of the MLP weights, the attention and the norms run without communication, and the two
    row-split projections (attention output over heads, second MLP layer) end in one MPI_Allreduce each."""
    _, sdfg = megatron_block(4)
    rep = dp.report(sdfg)
    entries = [(e.direction, e.array, e.calls) for k in rep.kernels for e in k.comm]
    for name in ("wq", "wk", "wv", "bq", "bk", "bv", "wo", "fc1_bias"):
        calls = [c for d, a, cs in entries if a == name for c in cs]
        assert calls and all(c.startswith("MPI_Scatterv") for c in calls), (name, calls)
    between = [t for t in rep.traffic if "rank 0" not in (t.source, t.destination)]
    assert len(between) == 2 and all(t.calls == [t.calls[0]] and t.calls[0].startswith("MPI_Allreduce(MPI_SUM")
                                     for t in between), [str(t) for t in between]
    assert [t.array for t in rep.traffic if t.destination == "rank 0"] == ["__return"]
    assert not any("MPI_Reduce(" in c or "Gatherv" in c for t in rep.traffic for c in t.calls)


@pytest.mark.slow
def test_torch_transformer_encoder_layer_single_process():
    """``nn.TransformerEncoderLayer`` (packed heads: Reshape, Gather, Transpose, Gemm) imports and matches
    eager PyTorch, compiled on one process."""
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 8, 16)
    sdfg = dp.from_torch(layer, (x, ), name="torch_encoder_layer")
    args = {k: np.array(v) for k, v in bound_values(sdfg).items()}
    out = sdfg(src=x.numpy().copy(), **args)
    np.testing.assert_allclose(out, eager(layer, x.numpy()), **TOL)


# -- a padded-batch encoder, as Hugging Face's models write it -------------------------------------------


class PaddedEncoder(nn.Module):
    """Token and position embeddings with the positions counted from the padding (RoBERTa's
    ``cumsum(ids != pad) * (ids != pad)``: ONNX CumSum), then one attention head whose keys are masked by
    the padding through ``scaled_dot_product_attention``'s boolean mask, which the exporter writes as
    ``Where(IsNaN(softmax), 0, softmax)`` (LLaMA, GPT-2 and Mistral export the same)."""

    def __init__(self, vocab=12, width=8, pad=0):
        super().__init__()
        self.pad = pad
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(vocab, width)
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, ids):
        keep = ids != self.pad
        positions = torch.cumsum(keep.int(), dim=1) * keep.int()
        h = self.tokens(ids) + self.positions(positions)
        q, k, v = self.qkv(h).unsqueeze(1).chunk(3, dim=-1)
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return out.squeeze(1) + h


def test_padded_encoder_with_counted_positions_and_masked_keys_on_2_ranks():
    torch.manual_seed(3)
    module = PaddedEncoder().eval()
    ids = torch.randint(1, 12, (4, 7), generator=torch.Generator().manual_seed(4))
    ids[1, 4:] = 0
    ids[2, 0] = ids[2, 3] = 0
    ids[3, 1:] = 0
    sdfg = dp.from_torch(module, (ids, ), name="torch_padded_encoder")
    dp.lower(sdfg, ranks=2)
    out = dp.run(sdfg, 2, timeout=240, ids=ids.numpy())
    ref = eager(module, ids.numpy())
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, **TOL)


class DataDependent(nn.Module):
    """A branch on a value (Mixtral's expert routing is the same kind): torch.export cannot trace it."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


def test_a_module_the_exporter_cannot_trace_is_refused_in_plain_words():
    with pytest.raises(dp.FrontendError, match="torch.onnx.export of DataDependent failed") as e:
        dp.from_torch(DataDependent(), (torch.randn(3, 4), ))
    assert "\x1b" not in str(e.value)  # the exporter's terminal colours are taken out
