"""What ``ascendify port``'s observer reads off the program as it runs: a batch's size, the model inside the
wrappers that only distribute or compile it, the autocast policy, the name the calling code holds a module under,
where a class is defined, an optimizer's size and learning rate, and the random draws made on a device (with the
first place in the user's code)."""

from __future__ import annotations

import os
import sys
from typing import Any


def patch_random_draws(patches, torch, on_draw) -> None:
    """Wrap torch's random calls (``torch.rand*``, ``normal``, ``multinomial``, ``bernoulli``, the in-place
    ``Tensor.*_`` draws, dropout while it drops) in ``patches``: ``on_draw(api, device_type)`` before each draw
    that can be placed on a device. Used by the observer (draws on the device) and by the lockstep (draws inside
    a model's forward)."""

    def wrap(owner, name: str, api: str, device_of) -> None:
        orig = getattr(owner, name, None)
        if orig is None:
            return

        def draw(*args, **kwargs):
            try:
                dev = device_of(args, kwargs)
            except Exception:  # noqa: BLE001 (a draw we cannot place is not counted)
                dev = None
            if dev is not None:
                on_draw(api, dev)
            return orig(*args, **kwargs)

        patches.set(owner, name, draw)

    def from_kw_or_first(args, kwargs):
        d = kwargs.get("device")
        if d is not None:
            return torch.device(d).type
        t = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if t is not None:
            return t.device.type
        return torch.get_default_device().type

    def from_self(args, kwargs):
        return args[0].device.type if args and isinstance(args[0], torch.Tensor) else None

    def from_dropout(args, kwargs):
        x = args[0] if args else kwargs.get("input")
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        training = args[2] if len(args) > 2 else kwargs.get("training", True)
        if not training or not p:
            return None
        return x.device.type if isinstance(x, torch.Tensor) else None

    for name in ("rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like"):
        wrap(torch, name, f"torch.{name}", from_kw_or_first)
    for name in ("multinomial", "bernoulli", "poisson"):
        wrap(torch, name, f"torch.{name}", from_self)
    for name in ("bernoulli_", "uniform_", "normal_", "random_", "exponential_", "geometric_", "cauchy_",
                 "log_normal_", "multinomial"):
        wrap(torch.Tensor, name, f"Tensor.{name}", from_self)
    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"):
        wrap(torch.nn.functional, name, f"F.{name}", from_dropout)

def batch_size(mod: Any, tensors: list) -> int | None:
    """The first dimension of the first tensor input, or the second where the model runs a sequence-first RNN
    (``nn.LSTM`` without ``batch_first``: the input is sequence x batch)."""
    import torch

    if not tensors or tensors[0].dim() == 0:
        return None
    x = tensors[0]
    rnns = [m for m in mod.modules() if isinstance(m, torch.nn.RNNBase)]
    if rnns and not rnns[0].batch_first and x.dim() >= 2:
        return int(x.shape[1])
    return int(x.shape[0])

WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module", "OptimizedModule": "_orig_mod",
             "FullyShardedDataParallel": "_fsdp_wrapped_module"}

def unwrap(mod: Any) -> Any:
    """The user's model inside the wrappers that only distribute or compile it (DDP's ``.module``, a compiled
    module's ``_orig_mod``): what can be copied, compared and benched in one process."""
    for _ in range(4):
        attr = WRAPPERS.get(type(mod).__name__)
        inner = getattr(mod, attr, None) if attr else None
        if inner is None:
            return mod
        mod = inner
    return mod

def autocast_state(device_type: str) -> dict[str, Any]:
    import torch

    for dt in dict.fromkeys((device_type, "cuda", "cpu")):
        try:
            if torch.is_autocast_enabled(dt):
                return {"enabled": True, "device_type": dt,
                        "dtype": str(torch.get_autocast_dtype(dt)).replace("torch.", "")}
        except (RuntimeError, TypeError, ValueError):
            continue
    return {"enabled": False, "device_type": device_type, "dtype": None}

def bound_name(mod: Any, frame: Any) -> str | None:
    """The name the calling code holds the module under (``netG``, ``self.model``), when it is easy to see."""
    try:
        for _ in range(3):
            if frame is None:
                return None
            for scope in (frame.f_locals, frame.f_globals):
                for k, v in scope.items():
                    if v is mod and k != "self":  # a model calling itself (GPT.generate) says nothing
                        return k
            me = frame.f_locals.get("self")
            if me is not None and hasattr(me, "__dict__"):
                for k, v in vars(me).items():
                    if v is mod:
                        return f"self.{k}"
            frame = frame.f_back
    except Exception:  # noqa: BLE001 (a name is a nicety)
        return None
    return None

def in_compiler() -> bool:
    """True when the caller runs inside torch.compile's machinery (Dynamo, AOTAutograd, inductor), which draws
    random example tensors to trace its patterns on the graph's device."""
    import torch

    parts = tuple(os.path.join(os.path.dirname(torch.__file__), d) for d in ("_inductor", "_dynamo", "_functorch"))
    f = sys._getframe(2)
    for _ in range(60):
        if f is None:
            return False
        if f.f_code.co_filename.startswith(parts):
            return True
        f = f.f_back
    return False

def user_site(root: str) -> str | None:
    """``file:line`` of the innermost frame in the user's code (not torch, not ascendify), the file relative to
    ``root`` (:func:`ascendify.program.frames.user_frame`)."""
    from ascendify.program import frames

    f = frames.user_frame(2)
    if f is None:
        return None
    return f"{_shown(f.f_code.co_filename, root)}:{f.f_lineno}"


def defined_at(cls: type, root: str) -> str | None:
    import inspect

    try:
        path = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None
    if not path:
        return None
    return f"{_shown(path, root)}:{line}"


def _shown(path: str, root: str) -> str:
    """``path`` relative to ``root``, or its file name where it lies outside (another drive included)."""
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return os.path.basename(path)
    return rel if not rel.startswith("..") else os.path.basename(path)

def opt_params(opt: Any) -> int:
    return sum(p.numel() for g in opt.param_groups for p in g["params"])

def lr(opt: Any) -> float | None:
    try:
        lr = opt.param_groups[0].get("lr")
        return float(lr)
    except (TypeError, ValueError, IndexError, AttributeError):
        return None


def rank() -> int:
    """This process's rank under torchrun (0 alone)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
