"""PyTorch's everyday modules as a new user meets them: ``dp.from_torch(module, example)`` and
``dp.from_torch_train_step``, the batch split over 2 ranks, run under a real mpiexec and compared element
by element with eager PyTorch. A CNN block (Conv2d with stride 1 and 2, padding and bias, BatchNorm2d with
running statistics, ReLU, MaxPool2d, Flatten, Linear), an embedding lookup (run-time indices, LayerNorm,
Linear), a ResNet-style residual block and an upsampling block (padding, GroupNorm, LeakyReLU, Upsample
nearest and bilinear, AvgPool2d, Hardswish, PixelShuffle, ELU, ConvTranspose2d); unsupported variants are refused in words."""
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dace_partition as dp  # noqa: E402
from dace_partition.errors import FrontendError  # noqa: E402
from dace_partition.frontend import train_step as ts  # noqa: E402

B = 6  # the batch; no other axis of these models has this extent (channels 3-5, images 8x8, vocabulary 20)
TOL = dict(rtol=1e-4, atol=1e-5)


def _stats(bn, seed):
    """Running statistics and affine parameters that are not the identity (so eval mode is really tested)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(bn.num_features, generator=g) - 0.5)
        bn.running_var.copy_(0.5 + torch.rand(bn.num_features, generator=g))
        bn.weight.copy_(0.5 + torch.rand(bn.num_features, generator=g))
        bn.bias.copy_(torch.rand(bn.num_features, generator=g) - 0.5)


def cnn():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(4, 5, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(5 * 2 * 2, 3))
    _stats(m[1], 1)
    return m.eval()


def embedding():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(20, 8), nn.LayerNorm(8), nn.Linear(8, 3)).eval()


def embedding_classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(20, 8), nn.LayerNorm(8), nn.Flatten(), nn.Linear(5 * 8, 3))


class Residual(nn.Module):
    """conv-bn-relu-conv-bn plus the identity, then relu (ResNet's basic block, without downsampling)."""

    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def residual():
    torch.manual_seed(0)
    m = Residual()
    _stats(m.bn1, 2)
    _stats(m.bn2, 3)
    return m.eval()


def upsampling_block():
    """Everyday layers past the CNN's: padding (zeros, reflection), GroupNorm, LeakyReLU, nearest upsampling,
    average pooling, Hardswish, PixelShuffle, ELU, a transposed convolution, bilinear upsampling."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.ZeroPad2d(1), nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.LeakyReLU(0.1),
                      nn.Upsample(scale_factor=2), nn.AvgPool2d(2), nn.Hardswish(), nn.PixelShuffle(2),
                      nn.ReflectionPad2d(1), nn.ELU(), nn.ConvTranspose2d(1, 2, 3, stride=2, padding=1, output_padding=1),
                      nn.Upsample(scale_factor=2, mode="bilinear"))
    with torch.no_grad():
        m[2].weight.uniform_(0.5, 1.5)
        m[2].bias.uniform_(-0.5, 0.5)
    return m.eval()


def residual_classifier():
    """The residual block, then Flatten and Linear: a loss over classes for a training step."""
    torch.manual_seed(0)
    m = nn.Sequential(Residual(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
    _stats(m[0].bn1, 2)
    _stats(m[0].bn2, 3)
    return m.eval()


def images(channels, seed):
    return torch.randn(B, channels, 8, 8, generator=torch.Generator().manual_seed(seed))


def tokens(seed, length=5):
    return torch.randint(0, 20, (B, length), generator=torch.Generator().manual_seed(seed))


def eager(module, x):
    with torch.no_grad():
        return module(x).numpy()


# -- forward: from_torch, every map split along the batch ---------------------------------------------------


@functools.lru_cache(maxsize=None)
def forward(kind):
    module, x = {"cnn": (cnn(), images(3, 0)), "embedding": (embedding(), tokens(0)),
                 "residual": (residual(), images(4, 0)), "upsampling": (upsampling_block(), images(3, 0))}[kind]
    sdfg = dp.from_torch(module, (x, ), name=f"torch_everyday_{kind}")
    infos = dp.maps(sdfg)
    schedule = {m.name: (2, ) + (1, ) * (len(m.params) - 1) for m in infos if m.shape[0] == B}
    assert len(schedule) == len(infos), [(m.name, m.shape) for m in infos if m.name not in schedule]
    dp.lower(sdfg, schedule)
    return module, sdfg


# the embedding's forward also runs inside its SGD step below (the loss is compared): alone under -m slow (time)
@pytest.mark.parametrize("kind", ["cnn", pytest.param("embedding", marks=pytest.mark.slow), "residual", "upsampling"])
def test_forward_data_parallel_2_ranks(kind):
    module, sdfg = forward(kind)
    x = {"cnn": images(3, 1), "embedding": tokens(1), "residual": images(4, 1), "upsampling": images(3, 1)}[kind]
    if kind == "embedding":
        x[0, 0] = 19  # the table's last row too
    (name, ) = set(sdfg.arglist()) - set(dp.runtime.launch.bound_values(sdfg)) - {"__return"}
    out = dp.run(sdfg, 2, timeout=240, **{name: x.numpy()})
    ref = eager(module, x)
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, **TOL)


class Recurrent(nn.Module):
    """A two-layer bidirectional LSTM, then a GRU over its outputs: ONNX LSTM and GRU nodes with both
    directions, initial states and all three of their outputs in use."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(7, 4, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(8, 3, batch_first=True)

    def forward(self, x):
        y, (_, c) = self.lstm(x)
        z, h = self.gru(y)
        return z + h[-1].unsqueeze(1), c


def test_lstm_and_gru_split_along_the_batch_on_2_ranks():
    """Every map with a batch axis split along it (the time steps are unrolled, the weights read whole);
    both results compared with eager PyTorch, a sequence of 3 steps."""
    torch.manual_seed(0)
    module = Recurrent().eval()
    x = torch.randn(B, 3, 7, generator=torch.Generator().manual_seed(10))
    sdfg = dp.from_torch(module, (x, ), name="torch_everyday_recurrent")
    schedule = {m.name: tuple(2 if k == list(m.shape).index(B) else 1 for k in range(len(m.params)))
                for m in dp.maps(sdfg) if B in list(m.shape)}
    assert len(schedule) >= 30, len(schedule)  # 15 steps (layers, directions): two maps each at least
    dp.lower(sdfg, schedule)
    (name, ) = {a for a in set(sdfg.arglist()) - set(dp.runtime.launch.bound_values(sdfg)) if not a.startswith("__return")}
    z, c = dp.run(sdfg, 2, timeout=240, **{name: x.numpy()})
    with torch.no_grad():
        z_ref, c_ref = module(x)
    np.testing.assert_allclose(z, z_ref.numpy(), **TOL)
    np.testing.assert_allclose(c, c_ref.numpy(), **TOL)


def test_an_identity_forward_keeps_its_argument_name():
    """The exporter renames the input of a forward that returns it unchanged (nn.Identity, dropout in eval
    mode: ``input`` becomes ``input_orig``); the program still takes forward's name, and returns a copy."""
    x = images(3, 2)
    sdfg = dp.from_torch(nn.Identity(), (x, ), name="torch_everyday_identity")
    assert set(sdfg.arglist()) == {"input", "__return"}
    dp.lower(sdfg, ranks=2)
    np.testing.assert_array_equal(dp.run(sdfg, 2, input=x.numpy()), x.numpy())


def test_embedding_table_whole_on_every_rank_indices_split():
    """The gather reads the whole table on every rank; the indices (and every activation) arrive by rows."""
    _, sdfg = forward("embedding")
    entries = [(e.array, tuple(e.calls)) for k in dp.report(sdfg).kernels for e in k.comm if e.direction == "scatter"]
    table = [c for a, cs in entries if a == "t_0_weight" for c in cs]
    assert table and all(c.startswith("MPI_Bcast") or c == "copy on rank 0" for c in table), entries
    assert [cs for a, cs in entries if a == "input"] == [("MPI_Scatterv(grid dims (0,))", )], entries


# -- training steps: from_torch_train_step, forward, cross entropy, backward, SGD ----------------------------


def train_and_compare(model, x, y, name, tol=1e-5):
    step, state = ts.module_step(model, "sgd", lr=0.1)
    sdfg = dp.from_torch_train_step(step, {"x": x, "labels": y}, state, name=name)
    dp.lower(sdfg, ts.data_parallel(sdfg, 2, B))
    out = dp.run(sdfg, 2, timeout=300, x=x.numpy(), labels=y.numpy())
    loss, new = ts.outputs(sdfg, out)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = F.cross_entropy(model(x), y)
    opt.zero_grad()
    ref.backward()
    opt.step()
    assert loss == pytest.approx(float(ref.detach()), rel=tol, abs=tol)
    assert set(new) == set(state)
    after = model.state_dict()  # parameters after the update, buffers after the forward
    for k in state:
        np.testing.assert_allclose(np.asarray(new[k]).reshape(after[k].shape), after[k].numpy(), rtol=tol, atol=tol,
                                   err_msg=k)
    return sdfg


@pytest.mark.slow  # about 35 s: two convolutions' forward and backward, pooling and batch norm
def test_cnn_sgd_step_data_parallel_2_ranks():
    """Conv2d (stride 1 and 2, padding, bias), BatchNorm2d (eval: running statistics), ReLU, MaxPool2d,
    Flatten, Linear: one SGD step with the batch split, weight gradients combined by allreduce."""
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(5))
    train_and_compare(cnn(), images(3, 4), labels, "t_everyday_cnn_sgd")


def test_batch_norm_in_training_mode_sgd_step_updates_running_statistics_on_2_ranks():
    """BatchNorm2d and BatchNorm1d in training mode: the forward normalises by the batch's statistics, whose
    sums over the split batch meet in an allreduce, and moves the running mean and unbiased variance by the
    momentum (0.3, and the default 0.1); the step returns them and the step count as PyTorch leaves them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4, momentum=0.3), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 8 * 8, 3), nn.BatchNorm1d(3)).train()
    _stats(model[1], 4)
    step, state = ts.module_step(model, "sgd", lr=0.1)
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked", "5.running_var"} <= set(state)
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(8))
    train_and_compare(model, images(3, 9), labels, "t_everyday_bn_train_sgd")
    assert int(model[1].num_batches_tracked) == 1


def test_embedding_sgd_step_data_parallel_2_ranks():
    """Embedding (run-time indices), LayerNorm, Flatten, Linear: the embedding's gradient is an accumulating
    map over the batch, so each rank holds partial sums of the table's gradient until the update."""
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(6))
    x = tokens(7)
    x[0, :2] = 3  # a repeated index: its gradient rows add up
    train_and_compare(embedding_classifier(), x, labels, "t_everyday_embedding_sgd")


@pytest.mark.slow  # about 45 s; the embedding's step runs in the default suite
@pytest.mark.dace2  # make test-dace2 runs it: a convolution block's training step, on DaCe 2
def test_residual_sgd_step_data_parallel_2_ranks():
    """The residual block (conv-bn-relu-conv-bn plus the identity, relu), Flatten, Linear: the skip
    connection's gradient adds to the block's on the way back; one SGD step with the batch split."""
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(8))
    train_and_compare(residual_classifier(), images(4, 9), labels, "t_everyday_residual_sgd")


# -- refused in words ---------------------------------------------------------------------------------------


class Activations(nn.Module):
    """One branch per activation, each a Linear then the activation, summed into a Linear head: every
    activation's backward is one layer from the loss, so a wrong derivative moves the parameters visibly."""

    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU(), nn.LeakyReLU(0.1), nn.ELU(0.7),
                                   nn.Hardswish(), nn.Tanh(), nn.Sigmoid()])
        self.inner = nn.ModuleList([nn.Linear(12, 8) for _ in self.acts])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.acts[0](self.inner[0](x))
        for act, lin in zip(self.acts[1:], self.inner[1:]):
            h = h + act(lin(x))
        return self.head(h)


def test_activations_sgd_step_data_parallel_2_ranks():
    """GELU (exact and tanh), SiLU, LeakyReLU, ELU, Hardswish, Tanh and Sigmoid: one SGD step with the batch
    split over 2 ranks. Their backwards are PyTorch's formulas (SiLU's fills a new tensor in place); the loss
    and every updated parameter are compared with eager PyTorch."""
    torch.manual_seed(0)
    x = torch.randn(B, 12, generator=torch.Generator().manual_seed(8)) * 2
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(9))
    train_and_compare(Activations(), x, labels, "torch_everyday_activations_step")


class SkipAndSlices(nn.Module):
    """A skip connection by ``torch.cat``, ``chunk`` and ``stack``, slices with a start and a step,
    ``narrow``, and activations in place (ReLU6, ReLU)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.mix = nn.Conv2d(7, 4, 1)
        self.act = nn.Sequential(nn.ReLU6(inplace=True), nn.ReLU(inplace=True))
        self.head = nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):
        y = self.mix(torch.cat([torch.relu(self.conv(x)), x], dim=1))
        u, v = torch.chunk(self.act(y), 2, dim=1)
        w = torch.stack([u, 2 * v], dim=2).sum(2)  # (B, 2, 8, 8)
        return self.head(w[:, :, 1:7:2, ::3].narrow(3, 0, 3).flatten(1))


def test_concatenation_slices_and_in_place_activations_sgd_step_data_parallel_2_ranks():
    """cat, chunk (split), stack, slices with steps and their gradients (zeros with the gradient at every
    other position), narrow, ReLU6 and ReLU in place: one SGD step with the batch split, compared with
    eager PyTorch."""
    torch.manual_seed(0)
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(11))
    train_and_compare(SkipAndSlices(), images(3, 12), labels, "t_everyday_cat_slices_sgd")


class RecurrentHead(nn.Module):
    """An LSTM (then a GRU over its outputs), then a Linear on the last step."""

    def __init__(self, gru: bool):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, batch_first=True)
        self.gru = nn.GRU(3, 3, batch_first=True) if gru else None
        self.head = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lstm(x)[0]
        return self.head((y if self.gru is None else self.gru(y)[0])[:, -1])


@pytest.mark.parametrize("gru,steps", [(False, 2), pytest.param(True, 3, marks=pytest.mark.slow)])  # 40 s, 110 s
def test_lstm_and_gru_sgd_step_data_parallel_2_ranks(gru, steps):
    """The recurrent layers' traces (traced without oneDNN: their gates as matrix products, sigmoid_ and
    tanh_ in place, unsafe_split, stack, unbind; the GRU's transpose_): one SGD step with the batch split,
    the steps unrolled (each a few hundred maps with its backward)."""
    torch.manual_seed(0)
    x = torch.randn(B, steps, 4, generator=torch.Generator().manual_seed(12))
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(13))
    train_and_compare(RecurrentHead(gru), x, labels, f"t_everyday_recurrent_sgd_{int(gru)}")


def test_padding_group_norm_grouped_conv_pooling_upsampling_sgd_step_data_parallel_2_ranks():
    """Uneven zero padding, GroupNorm (its backward traced into elementwise ops and sums), Softplus with a
    beta, a depthwise and a two-group convolution (their input gradients needed too), AvgPool2d with padding not
    counted and ceil_mode (uneven divisors), nearest Upsample, Mish, AdaptiveAvgPool2d to
    a size that divides the input's (2 x 4 windows): one SGD step with the batch split, loss and every
    parameter compared with eager PyTorch."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.ZeroPad2d((1, 0, 2, 1)), nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Softplus(beta=2.0),
                      nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.Conv2d(4, 4, 1, groups=2),
                      nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
                      nn.Upsample(scale_factor=2),
                      nn.Mish(), nn.AdaptiveAvgPool2d((5, 2)), nn.Flatten(), nn.Linear(4 * 5 * 2, 3))
    with torch.no_grad():
        m[2].weight.uniform_(0.5, 1.5)
        m[2].bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, 3, 8, 7, generator=torch.Generator().manual_seed(4))
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(5))
    train_and_compare(m, x, labels, "t_everyday_pad_norm_pool_sgd")


def test_mirror_padding_transposed_conv_bilinear_upsampling_sgd_step_data_parallel_2_ranks():
    """ReflectionPad2d (uneven) between two convolutions, so its backward runs too; ConvTranspose2d with
    stride, padding and output_padding, and one with uneven strides, dilation and a padding wider than its
    kernel; bilinear Upsample and ReplicationPad2d and their backwards (the edge parts add many positions to
    one element); MaxPool2d with ceil_mode (a last window past the input on one axis, dropped on the other):
    one SGD step with the batch split, loss and every parameter against eager PyTorch."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReflectionPad2d((2, 1, 1, 2)),
                      nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
                      nn.Upsample(scale_factor=2, mode="bilinear"), nn.ReplicationPad2d(1), nn.Tanh(),
                      nn.ConvTranspose2d(3, 2, (2, 3), stride=(1, 2), padding=(0, 2), dilation=(2, 1)),
                      nn.MaxPool2d(3, stride=4, ceil_mode=True), nn.Flatten(), nn.Linear(2 * 12 * 21, 3))
    x = torch.randn(B, 3, 8, 7, generator=torch.Generator().manual_seed(4))
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(5))
    train_and_compare(m, x, labels, "t_everyday_mirror_bilinear_sgd")


def test_instance_norm_and_batch_statistics_sgd_step_data_parallel_2_ranks():
    """InstanceNorm2d with and without affine weights (traced as a training-mode batch norm of one image of
    batch x channel channels, its weights repeated per image) and BatchNorm2d without running statistics,
    whose per-channel sums over the split batch meet in an allreduce: one SGD step, loss and every parameter
    against eager PyTorch."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True), nn.ReLU(), nn.Conv2d(4, 4, 3),
                      nn.BatchNorm2d(4, track_running_stats=False), nn.Tanh(), nn.InstanceNorm2d(4), nn.Flatten(),
                      nn.Linear(4 * 4 * 4, 3))
    with torch.no_grad():
        for k in (1, 4):
            m[k].weight.uniform_(0.5, 1.5)
            m[k].bias.uniform_(-0.5, 0.5)
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(5))
    train_and_compare(m, images(3, 4), labels, "t_everyday_instance_batch_stats_sgd")


@pytest.mark.parametrize("norm_first", [False, pytest.param(True, marks=pytest.mark.slow)])  # about 80 s each
def test_transformer_encoder_layer_sgd_step_data_parallel_2_ranks(norm_first):
    """A TransformerEncoderLayer (post-norm with ReLU; pre-norm with GELU under -m slow; batch first, so
    the attention works on (sequence, batch, features) and merges the batch into rows), then Flatten and
    Linear: one SGD step with the batch split. Attention is traced as its products and softmax; its bias is
    added in place to a view of the projection, which nothing else reads. Loss and every parameter against
    eager PyTorch."""
    torch.manual_seed(0)
    body = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first,
                                      activation="gelu" if norm_first else "relu")
    m = nn.Sequential(body, nn.Flatten(), nn.Linear(5 * 8, 3)).eval()
    x = torch.randn(B, 5, 8, generator=torch.Generator().manual_seed(11))
    labels = torch.randint(0, 3, (B, ), generator=torch.Generator().manual_seed(12))
    train_and_compare(m, x, labels, f"t_everyday_transformer_sgd_{int(norm_first)}")


def test_an_in_place_update_seen_through_another_view_is_refused():
    """``v = y.view(-1); v.add_(1)`` changes ``y`` too: where ``y`` is read after the update, reading the
    update as an out-of-place add would be wrong. Refused in words, naming both tensors."""
    def step(state, x, labels):
        y = x @ state["w"]
        y.view(-1).add_(1.0)
        return (y * y).sum(), {"w": state["w"]}

    x = torch.randn(B, 3, generator=torch.Generator().manual_seed(13))
    with pytest.raises(FrontendError, match=r"'mm' \(which 'view' shares\) is read again \(mul\) after this in-place"):
        dp.from_torch_train_step(step, {"x": x, "labels": torch.zeros(B, dtype=torch.int64)},
                                 {"w": torch.randn(3, 4)}, name="t_everyday_view_update")


def test_refuses_training_mode_batch_norm():
    torch.manual_seed(0)
    train_bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    with pytest.raises(FrontendError, match=r"BatchNorm2d '1' is in training mode.*eval\(\)"):
        dp.from_torch(train_bn, (images(3, 0), ), name="t_everyday_bn_train")


def test_train_step_refuses_grouped_transposed_conv_and_a_cumulative_batch_norm():
    y = torch.zeros(B, dtype=torch.int64)
    torch.manual_seed(0)
    grouped = nn.Sequential(nn.ConvTranspose2d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(4 * 10 * 10, 3))
    step, state = ts.module_step(grouped, "sgd")
    with pytest.raises(FrontendError, match=r"aten.convolution.default' at node 'convolution.*grouped transposed"):
        dp.from_torch_train_step(step, {"x": images(4, 0), "labels": y}, state, name="t_everyday_group_step")
    cumulative = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.Flatten(),
                               nn.Linear(4 * 6 * 6, 3)).train()
    with pytest.raises(FrontendError, match=r"BatchNorm2d '1' has momentum=None .* the first one"):
        ts.module_step(cumulative, "sgd")
    train_bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).train()

    def step(state, x, labels):  # the module's own buffers captured, not passed: tracing fails, in words
        return torch.func.grad_and_value(
            lambda p: F.cross_entropy(torch.func.functional_call(train_bn, p, (x, )), labels))(state)[::-1]

    state = {k: v.detach().clone() for k, v in train_bn.named_parameters()}
    with pytest.raises(FrontendError, match=r"tracing the training step .* buffers in the state, as module_step"):
        dp.from_torch_train_step(step, {"x": images(3, 0), "labels": y}, state, name="t_everyday_bn_step")