"""Whole training steps (forward, loss, backward, optimizer update) from PyTorch, as one SDFG.

``step_fn(state, *inputs) -> (loss, new_state)`` is traced with ``make_fx``; ``state`` (parameters and
optimizer buffers) is bound to the SDFG, so a call passes only the data. The gradients come from
``torch.func.grad`` inside the traced function, so the ATen graph already holds the backward pass and no
autodiff of our own is needed. :func:`data_parallel` gives the schedule that splits the batch across ranks
and combines the gradients' partial sums right where the update reads them.
"""
from typing import Callable, Dict, Sequence, Tuple, Union

import numpy as np

import dace

from ..errors import FrontendError
from ..ir.record import notes
from .aten import array_value, convert
from .codegen import ProgramBuilder
from .numpy_ops import nest_contractions

Inputs = Union[Dict[str, object], Sequence[object]]


def _named_inputs(example_inputs: Inputs) -> Dict[str, object]:
    if isinstance(example_inputs, dict):
        return dict(example_inputs)
    return {f"input{i}": t for i, t in enumerate(example_inputs)}


def from_torch_train_step(step_fn: Callable, example_inputs: Inputs, state: Dict[str, object], *,
                          name: str = "train_step") -> dace.SDFG:
    """SDFG of one training step. Arguments: the ``state`` entries (bound to their current values) and
    the inputs (named by the keys of ``example_inputs`` when it is a dict, else ``input0``, ...). Returns
    ``loss`` then the new value of every ``state`` entry, in ``state`` order (see :func:`outputs`)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs = _named_inputs(example_inputs)
    keys = list(state)

    def flat(*tensors):
        loss, new = step_fn(dict(zip(keys, tensors[:len(keys)])), *tensors[len(keys):])
        if set(new) != set(keys):
            raise FrontendError(f"step_fn must return a new value for every state entry; got {sorted(new)}, "
                                f"expected {sorted(keys)}")
        return [loss] + [new[k] for k in keys]

    tensors = [torch.as_tensor(t) for t in list(state.values()) + list(inputs.values())]
    try:
        with torch.no_grad(), _math_attention(), torch.backends.mkldnn.flags(enabled=False):
            gm = make_fx(flat)(*[t.clone() for t in tensors])  # real ops run: in-place updates hit copies
    except FrontendError:
        raise
    except Exception as e:  # e.g. a batch norm updating running statistics captured from the module
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FrontendError(f"tracing the training step '{name}' failed: {first} (in-place updates of captured "
                            "tensors cannot be traced: pass a training-mode batch norm's buffers in the state, as "
                            "module_step does, or put it in eval() mode)") from e

    b = ProgramBuilder(name)
    idents = {}
    values = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, key, t in zip(placeholders, keys + list(inputs), tensors):
        arr = t.detach().cpu().numpy()
        shape = arr.shape or (1, )
        ident = b.argument(key, shape, arr.dtype, arr if key in state else None)
        idents[key] = ident
        values[node] = array_value(ident, arr.shape, arr.dtype)
    outs = convert(gm.graph, b, values)
    written = set(idents.values())
    for key, v in zip(["loss"] + keys, outs):
        name_ = v.array()
        if name_ is None or name_ in written:
            name_ = _write(b, v, f"new_{key}")
        written.add(name_)
        b.result(name_)
    sdfg = b.to_sdfg()
    nested = getattr(b, "contractions", 0)  # convolutions, pooling and embedding gradients
    if nested and nest_contractions(sdfg, "acc") != nested:
        raise FrontendError(f"internal error: not every accumulating map of '{name}' could be nested")
    notes(sdfg).train = {"outputs": ["loss"] + keys, "arguments": idents}
    return sdfg


def _math_attention():
    """PyTorch's attention (nn.MultiheadAttention, F.scaled_dot_product_attention) traced as its matrix
    products and softmax, whose backwards the front end has, instead of a fused CPU kernel."""
    import contextlib
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older PyTorch: the fused kernel stays, and is refused in words if it appears
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


def _write(b: ProgramBuilder, v, hint: str) -> str:
    from .aten import Converter
    return Converter(b).write(v, hint).operands[0].name


def outputs(sdfg: dace.SDFG, result) -> Tuple[float, Dict[str, np.ndarray]]:
    """(loss, {state name: new value}) from the results of running a training-step SDFG."""
    names = notes(sdfg).train["outputs"]
    result = result if isinstance(result, tuple) else (result, )
    return float(np.asarray(result[0]).reshape(-1)[0]), dict(zip(names[1:], result[1:]))


def argument_names(sdfg: dace.SDFG) -> Dict[str, str]:
    """{state or input name: SDFG argument name} (``0.weight`` becomes ``t_0_weight``)."""
    return dict(notes(sdfg).train["arguments"])


# -- convenience: a module, a loss and an optimizer ---------------------------------------------------
def module_step(module, optimizer: str = "sgd", loss: Callable = None, lr: float = 0.01,
                betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> Tuple[Callable, Dict[str, object]]:
    """(step_fn, state) for ``module`` trained with ``loss(module(*inputs[:-1]), inputs[-1])`` (cross
    entropy by default) and plain SGD or Adam (as ``torch.optim.SGD`` / ``torch.optim.Adam`` with default
    options). Adam's state holds ``exp_avg.<p>``, ``exp_avg_sq.<p>`` and the step count ``adam.step``.
    The state also holds the buffers the forward updates (a batch norm's ``running_mean``, ``running_var``
    and ``num_batches_tracked`` in training mode), named as in ``module.state_dict()``: the step returns
    them updated, as eager PyTorch leaves them after the step."""
    import torch
    from torch.func import functional_call, grad_and_value

    loss = loss or torch.nn.functional.cross_entropy
    buffers = {}
    for sub_name, sub in module.named_modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm) and sub.training and sub.track_running_stats:
            if sub.momentum is None:
                raise FrontendError(f"{type(sub).__name__} '{sub_name or type(module).__name__}' has momentum=None "
                                    "(a cumulative average over the steps taken): its factor is read from the step "
                                    "count as a Python number, so a traced step would keep the first one; give a "
                                    "momentum or call module.eval() first")
            prefix = f"{sub_name}." if sub_name else ""
            buffers.update({prefix + k: b.detach().clone() for k, b in sub.named_buffers(recurse=False)})
    params = {k: v.detach().clone() for k, v in module.named_parameters()}

    def loss_of(p, b, *inputs):
        return loss(functional_call(module, {**p, **b}, tuple(inputs[:-1])), inputs[-1])

    def gradient(state, inputs):
        p = {k: state[k] for k in params}
        b = {k: state[k] for k in buffers}  # updated in place by the forward
        g, value = grad_and_value(loss_of)(p, b, *inputs)
        return p, b, g, value

    if optimizer == "sgd":

        def step(state, *inputs):
            p, b, g, value = gradient(state, inputs)
            return value, {**b, **{k: p[k] - lr * g[k] for k in p}}

        return step, {**params, **buffers}
    if optimizer != "adam":
        raise ValueError(f"unknown optimizer '{optimizer}' (expected 'sgd' or 'adam')")
    b1, b2 = betas
    state0 = {**params, **buffers}
    state0.update({f"exp_avg.{k}": torch.zeros_like(v) for k, v in params.items()})
    state0.update({f"exp_avg_sq.{k}": torch.zeros_like(v) for k, v in params.items()})
    state0["adam.step"] = torch.zeros((), dtype=torch.float32)

    def adam(state, *inputs):
        p, b, g, value = gradient(state, inputs)
        t = state["adam.step"] + 1
        new = {"adam.step": t, **b}
        for k in params:
            m = b1 * state[f"exp_avg.{k}"] + (1 - b1) * g[k]
            v = b2 * state[f"exp_avg_sq.{k}"] + (1 - b2) * g[k] * g[k]
            mhat = m / (1 - b1**t)
            vhat = v / (1 - b2**t)
            new[k] = p[k] - lr * mhat / (torch.sqrt(vhat) + eps)
            new[f"exp_avg.{k}"], new[f"exp_avg_sq.{k}"] = m, v
        return value, new

    return adam, state0


# -- schedules ----------------------------------------------------------------------------------------
def data_parallel(sdfg: dace.SDFG, ranks: int, batch: int) -> Dict[str, tuple]:
    """Data-parallel schedule: every kernel with an axis of extent ``batch`` splits it ``ranks`` ways (the
    batch axis of activations, or the contraction of a weight gradient, which then holds partial sums);
    every other kernel (weight transposes, optimizer updates) runs replicated on all ranks when
    ``dace_partition.replicate`` exists, so partial sums arrive by allreduce, else split on its first
    axis (reduce-scatter) where that axis is long enough, else on rank 0. A kernel whose batch split
    the lowering would refuse (a copy that merges the batch with an outer axis, ``(L, B, E)`` to
    ``(L*B, E)``: each rank's rows interleave with the others') is treated as one without a batch axis.
    One map per kernel is scheduled (the other maps of a library node follow it). Pick a batch size no
    other axis has."""
    import dace_partition as dp
    from ..errors import UnsupportedPattern
    from ..plan.lowering import analyse_kernel
    replicate = getattr(dp, "replicate", None)
    by_kernel = {}
    for m in dp.maps(sdfg):
        by_kernel.setdefault(m.kernel.index, []).append(m)
    schedule = {}
    for infos in by_kernel.values():
        with_batch = [m for m in infos if batch in m.shape]
        if with_batch:
            m = max(with_batch, key=lambda m: len(m.params))
            axis = m.shape.index(batch)
            grid = tuple(ranks if i == axis else 1 for i in range(len(m.params)))
            try:
                analyse_kernel(sdfg, m.kernel, {m.name: grid})
                schedule[m.name] = grid
                continue
            except UnsupportedPattern:
                pass
        m = max(infos, key=lambda m: len(m.params))
        if replicate is not None:
            schedule[m.name] = replicate((1, ) * len(m.params), ranks)
        elif isinstance(m.shape[0], int) and m.shape[0] >= ranks:
            schedule[m.name] = (ranks, ) + (1, ) * (len(m.params) - 1)
    return schedule
