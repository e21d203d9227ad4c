"""Front ends that turn models into SDFGs ready for :func:`dace_partition.lower`.

``from_onnx`` (ONNX graphs with static shapes), ``from_torch`` (``nn.Module`` forward, through ONNX) and
``from_torch_train_step`` (a whole training step, traced to ATen). They need the ``torch`` extra; the
imports happen on first use so that the core package does not depend on torch or onnx.
"""
from ..compat import with_line_info_from_frames


@with_line_info_from_frames
def from_onnx(*args, **kwargs):
    from .onnx_import import from_onnx as impl
    return impl(*args, **kwargs)


@with_line_info_from_frames
def from_torch(*args, **kwargs):
    from .torch_module import from_torch as impl
    return impl(*args, **kwargs)


@with_line_info_from_frames
def from_torch_train_step(*args, **kwargs):
    from .train_step import from_torch_train_step as impl
    return impl(*args, **kwargs)


__all__ = ["from_onnx", "from_torch", "from_torch_train_step"]
