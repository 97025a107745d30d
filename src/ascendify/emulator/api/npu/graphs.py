"""NPU graphs on the emulator: ``torch.npu.NPUGraph``, ``torch.npu.graph``, ``torch.npu.make_graphed_callables``.

On an NPU a graph (aclgraph) records the kernels a block launches and replays them on the same device
memory. The emulator records the ATen ops the block runs (a ``TorchDispatchMode`` during capture: each op, its
arguments and its results) and a replay runs them again, in order, writing each result into the tensor the
capture produced: the *static* outputs and intermediates keep their storage, so the usual pattern works —
copy new data into the static inputs, ``replay()``, read the static outputs. View ops are not replayed (a
view over a static buffer sees the new data); in-place and ``out=`` ops write where they wrote at capture.

Refused during capture, as aclgraph documents (npugraph_ex/aclgraph constraints: inference only, no backward
capture, no random ops, no stream synchronisation, static shapes), with the op named:

- a training capture: an op that records autograd history (a parameter or input requiring grad, grad mode
  on) or a backward pass: capture under ``torch.no_grad()``;
- random ops (``randn``, ``dropout``...), which a replay would not redraw as the NPU does;
- host synchronisation: ``.item()``/``.tolist()``, a copy to the CPU, an op whose output shape depends on the
  data (``nonzero``, ``masked_select``, ``unique``...), ``torch.npu.synchronize()``, ``Stream.synchronize()``.

A refused capture leaves nothing captured; the stream is not capturing afterwards.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ascendify.emulator.ops.table import GRAPH_DATA_DEPENDENT as _DATA_DEPENDENT
from ascendify.emulator.ops.table import GRAPH_DEVICE_COPIES

_capturing = [0]
_aten = torch.ops.aten
#: ops whose output shape depends on the data: the host must read the device to size the result


def capturing() -> bool:
    """True while a graph capture is under way (``torch.npu.is_current_stream_capturing()``)."""
    return _capturing[0] > 0


class GraphCaptureError(RuntimeError):
    """An op that an NPU graph cannot capture; the message names it."""


def refuse_sync(what: str) -> None:
    """Raise when ``what`` (a synchronisation) is called during capture."""
    if capturing():
        raise GraphCaptureError(
            f"{what} cannot be captured in an NPU graph: stream synchronisation is not allowed while a stream "
            "is capturing (aclgraph); synchronise before capture_begin() or after capture_end()")


def _has_npu(args) -> bool:
    from torch.utils._pytree import tree_leaves

    return any(isinstance(a, torch.Tensor) and a.device.type == "npu" for a in tree_leaves(args))


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if torch._C._current_graph_task_id() != -1:
            raise GraphCaptureError(
                f"{name} (backward): an NPU graph cannot capture a backward pass (aclgraph captures "
                "inference only); capture the forward under torch.no_grad()")
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise GraphCaptureError(
                f"{name}: random ops cannot be captured in an NPU graph (aclgraph); draw the random "
                "numbers outside the graph and pass them in as a static input")
        if name in _DATA_DEPENDENT and _has_npu((args, kwargs)):
            what = "tensor.item()" if name == "_local_scalar_dense" else name
            raise GraphCaptureError(
                f"{what} ({func}) cannot be captured in an NPU graph: it synchronises the host with the device "
                "(the result is read back or its shape depends on the data); move it out of the captured region")
        if name in GRAPH_DEVICE_COPIES and _has_npu((args, kwargs)):
            dst = kwargs.get("device") if name != "copy_" else args[0].device
            if dst is not None and torch.device(dst).type == "cpu":
                raise GraphCaptureError(
                    f"{name} to the CPU ({func}) cannot be captured in an NPU graph: a device-to-host copy "
                    "synchronises the host with the device; copy the static output after replay()")
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values())):
            raise GraphCaptureError(
                f"{func}: capturing a training step (this op records autograd history: an input or parameter "
                "requires grad) is not supported; NPU graphs capture inference only: capture under "
                "torch.no_grad()")
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out


def _replay_op(func, args, kwargs, out) -> None:
    if func.is_view:
        return  # a view of a static buffer: nothing to run
    schema = func._schema
    if any(r.alias_info is not None for r in schema.returns):
        func(*args, **kwargs)  # in-place / out=: writes where it wrote at capture
        return
    new = func(*args, **kwargs)
    outs = out if isinstance(out, (list, tuple)) else (out,)
    news = new if isinstance(new, (list, tuple)) else (new,)
    for o, n in zip(outs, news, strict=False):
        if isinstance(o, torch.Tensor) and isinstance(n, torch.Tensor):
            o.copy_(n)


def graph_pool_handle():
    """An opaque memory-pool token (the emulator has one pool: the static buffers each graph keeps)."""
    return (0, id(object()))


class NPUGraph:
    """An emulated NPU graph: ``capture_begin()`` ... ``capture_end()``, then ``replay()``."""

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, keep_graph: bool = False):
        self._ops: list | None = None
        self._mode: _Recorder | None = None
        self._pool = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        if self._mode is not None:
            raise RuntimeError("NPUGraph: capture_begin() while this graph is already capturing")
        if self._ops is not None:
            raise RuntimeError("NPUGraph: this graph was already captured; call reset() before capturing again")
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(f"capture_error_mode must be 'global', 'thread_local' or 'relaxed', got "
                             f"{capture_error_mode!r}")
        self._pool = pool if pool is not None else graph_pool_handle()
        self._mode = _Recorder()
        self._mode.__enter__()
        _capturing[0] += 1

    def _stop(self, exc=None) -> list:
        mode, self._mode = self._mode, None
        _capturing[0] -= 1
        mode.__exit__(type(exc) if exc else None, exc, None)
        return mode.ops

    def capture_end(self) -> None:
        if self._mode is None:
            raise RuntimeError("NPUGraph: capture_end() without capture_begin()")
        self._ops = self._stop()

    def replay(self) -> None:
        if self._ops is None:
            raise RuntimeError("NPUGraph: replay() before a capture (capture_begin()/capture_end())")
        with torch.no_grad():
            for func, args, kwargs, out in self._ops:
                _replay_op(func, args, kwargs, out)

    def reset(self) -> None:
        self._ops = None

    def pool(self):
        return self._pool

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w") as f:
            for func, *_ in self._ops or ():
                f.write(f"{func}\n")


class graph:  # noqa: N801 - torch_npu's name
    """``with torch.npu.graph(g):`` captures the block into ``g``."""

    default_capture_stream = None

    def __init__(self, npu_graph: NPUGraph, pool=None, stream=None, capture_error_mode: str = "global"):
        self.npu_graph = npu_graph
        self.pool = pool
        self.stream = stream
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        torch.npu.synchronize()
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:  # a refused op: stop capturing, keep nothing
            self.npu_graph._stop(exc)
            return False
        self.npu_graph.capture_end()
        return False


def _refuse_training(callables, sample_args) -> None:
    from torch.utils._pytree import tree_leaves

    for c, args in zip(callables, sample_args, strict=True):
        grads = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        if isinstance(c, torch.nn.Module):
            grads += [p for p in c.parameters() if p.requires_grad]
        if grads and torch.is_grad_enabled():
            raise GraphCaptureError(
                "make_graphed_callables: capturing a training step is not supported (a sample input or "
                "parameter requires grad with grad mode on); NPU graphs capture inference only: call it under "
                "torch.no_grad() or with parameters frozen")


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool=None):
    """Graph each callable (inference only): warm up, capture with static copies of ``sample_args``; the
    returned callable copies its arguments into the static inputs, replays, and returns the static outputs."""
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    sample_args = tuple(a if isinstance(a, tuple) else (a,) for a in sample_args)
    _refuse_training(callables, sample_args)
    graphed = []
    for c, args in zip(callables, sample_args, strict=True):
        static_in = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        for _ in range(num_warmup_iters):
            c(*static_in)
        g = NPUGraph()
        with graph(g, pool=pool):
            static_out = c(*static_in)

        def run(*new, _g=g, _in=static_in, _out=static_out):
            if len(new) != len(_in):
                raise TypeError(f"the graphed callable takes {len(_in)} argument(s), got {len(new)}")
            for s, a in zip(_in, new, strict=True):
                if isinstance(s, torch.Tensor):
                    s.copy_(a)
            _g.replay()
            return _out

        if isinstance(c, torch.nn.Module):
            c.forward = run
            graphed.append(c)
        else:
            graphed.append(run)
    return graphed[0] if single else tuple(graphed)
