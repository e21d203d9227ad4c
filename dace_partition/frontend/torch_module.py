"""``from_torch``: an ``nn.Module``'s forward as an SDFG, through the ONNX (dynamo) exporter.

The exporter gives a static-shape ONNX graph in which the module's parameters are initializers;
:func:`.onnx_import.from_onnx` turns those into bound SDFG arguments, so the program is called with
``forward``'s own arguments only, while a schedule can still partition every weight.
"""
import contextlib
import io
import logging
import os
import re
import warnings
from typing import Optional

import numpy as np

import dace

from ..errors import FrontendError
from .onnx_import import from_onnx


def _as_tensor(value):
    import torch
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


def export(module, example_inputs):
    """``torch.onnx.export(..., dynamo=True)`` as a ``ModelProto``, quietly and without network access
    (the exporter is local; its chatter about optional packages is silenced)."""
    import torch
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs, )
    args = tuple(_as_tensor(a) for a in args)
    os.environ.setdefault("TORCH_ONNX_DISABLE_TELEMETRY", "1")
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [l.level for l in loggers]
    try:
        for l in loggers:
            l.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, args, dynamo=True, verbose=False, report=False)
    except Exception as e:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the exporter colours its report for a terminal
        raise FrontendError(f"torch.onnx.export of {type(module).__name__} failed: {text}") from e
    finally:
        for l, lev in zip(loggers, levels):
            l.setLevel(lev)
    return program.model_proto


def from_torch(module, example_inputs, name: Optional[str] = None) -> dace.SDFG:
    """Traces ``module(*example_inputs)`` to ONNX and imports it (see :func:`.onnx_import.from_onnx`).

    The SDFG's inputs keep ``forward``'s argument names; the parameters (and constants the exporter
    folded from them, such as transposed weights) are SDFG arguments bound to their current values with
    :func:`dace_partition.runtime.launch.bind`. Shapes are those of ``example_inputs``. Put the module in
    ``eval()`` mode first if it has dropout or batch-norm layers.
    """
    import torch
    for sub_name, sub in module.named_modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm) and sub.training:
            raise FrontendError(f"{type(sub).__name__} '{sub_name or type(module).__name__}' is in training mode: "
                                "the exported graph would normalise with the running statistics, unlike eager "
                                "PyTorch (batch statistics); call module.eval() first")
    model = export(module, example_inputs)
    _forward_names(model, module, len(example_inputs) if isinstance(example_inputs, (tuple, list)) else 1)
    return from_onnx(model, name=name or type(module).__name__)


def _forward_names(model, module, count: int):
    """Gives the graph's inputs ``forward``'s parameter names back. The exporter renames an input whose
    name an output takes: an identity forward (``nn.Identity``, dropout in ``eval()``) returns ``input``
    and takes ``input_orig``, and the program could not be called as ``run(sdfg, P, input=x)``. The output
    that held the name gets a fresh one."""
    import inspect
    try:
        params = list(inspect.signature(module.forward).parameters)[:count]
    except (TypeError, ValueError):
        return
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in inits]
    renames = {old: new for old, new in zip(inputs, params) if old != new}
    if not renames:
        return
    taken = inits | {vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)}
    taken |= {n for node in g.node for n in list(node.input) + list(node.output)}
    for new in renames.values():
        if new in taken:
            fresh = next(f"{new}_{k}" for k in range(1, len(taken) + 2) if f"{new}_{k}" not in taken)
            taken.add(fresh)
            _rename(g, new, fresh)
    for old, new in renames.items():
        _rename(g, old, new)


def _rename(graph, old: str, new: str):
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name == old:
            vi.name = new
