"""A model zoo built offline: standard architectures from library definitions, no weights, no downloads.

>>> from ascendify.workloads import models
>>> sorted(models.MODELS)                                            # doctest: +NORMALIZE_WHITESPACE
['bert-base', 'bert-large', 'efficientnet_b0', 'gpt2', 'resnet18', 'resnet50']
>>> m = models.build_model("resnet18", num_classes=10)              # doctest: +SKIP
>>> x, y = models.example_batch(m, batch_size=2, image_size=32)     # doctest: +SKIP
>>> models.loss_fn(m)(m(x), y).backward()                          # doctest: +SKIP

Every model is an ``nn.Module`` whose ``forward`` takes one tensor and returns one tensor of logits (Hugging
Face models are wrapped so that ``model(x)`` returns ``.logits``). It carries ``model.ascendify_task``, one of

- ``"image-classification"``: input ``[B, 3, H, W]`` float, logits ``[B, num_classes]``, target ``[B]`` class ids;
- ``"sequence-classification"``: input ``[B, T]`` token ids, logits ``[B, num_classes]``, target ``[B]``;
- ``"causal-lm"``: input ``[B, T]`` token ids, logits ``[B, T, V]``, target ``[B, T]`` (the next tokens),

so that :func:`example_batch` and :func:`loss_fn` work for every model, including a user's.

Sources, in order: torchvision's definitions when torchvision imports (the reference ones), else Hugging Face
``transformers`` configs (the same layer counts and widths: ResNet-50 has 25,557,032 parameters and ResNet-18
11,689,512 with 1000 classes either way, EfficientNet-B0 5,288,548). ``model.ascendify_source`` says which.

A user's model: ``build_model("path/to/file.py:make_model")`` imports the file and calls the factory with the
keywords its signature accepts (``num_classes``, ``image_size``, ``seq_len``...). The factory returns an
``nn.Module`` taking one input tensor; set ``model.ascendify_task`` (and ``model.vocab_size`` for token models)
on it when it is not an image classifier.

``config_overrides`` shrinks a Hugging Face model for tests (``{"num_hidden_layers": 2, "hidden_size": 64}``).
Build on ``device="meta"`` to count the parameters of a large model without allocating it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from ascendify.workloads import factory

TASKS = ("image-classification", "sequence-classification", "causal-lm")


# A model name or ``FILE.py:FACTORY`` that cannot be built; the message says why. One error for both: a user's
# factory fails with the loader's own (:class:`ascendify.workloads.factory.FactoryError`).
ModelError = factory.FactoryError


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the zoo knows about a named model."""

    name: str
    task: str
    description: str
    sample_unit: str  # what throughput counts: "images" or "samples" / "sequences"
    default_image_size: int = 224
    default_seq_len: int = 128
    default_num_classes: int = 1000


MODELS: dict[str, ModelInfo] = {
    "resnet18": ModelInfo("resnet18", "image-classification", "ResNet-18 (11.7M parameters)", "images"),
    "resnet50": ModelInfo("resnet50", "image-classification", "ResNet-50 (25.6M parameters)", "images"),
    "efficientnet_b0": ModelInfo(
        "efficientnet_b0", "image-classification", "EfficientNet-B0 (5.3M parameters)", "images"
    ),
    "bert-base": ModelInfo(
        "bert-base", "sequence-classification", "BERT-Base, sequence classification (110M)", "samples",
        default_num_classes=2,
    ),
    "bert-large": ModelInfo(
        "bert-large", "sequence-classification", "BERT-Large, sequence classification (335M)", "samples",
        default_num_classes=2,
    ),
    "gpt2": ModelInfo("gpt2", "causal-lm", "GPT-2 small, causal language model (124M)", "sequences",
                      default_seq_len=256),
}
ALIASES = {
    "resnet-50": "resnet50",
    "resnet-18": "resnet18",
    "efficientnet-b0": "efficientnet_b0",
    "efficientnetb0": "efficientnet_b0",
    "bert_large": "bert-large",
    "bert_base": "bert-base",
    "gpt-2": "gpt2",
    "gpt2-small": "gpt2",
}


def canonical_name(name: str) -> str:
    """``"ResNet-50"`` -> ``"resnet50"``; a ``FILE:FACTORY`` spec is returned unchanged."""
    if factory.is_spec(name):
        return name
    key = name.strip().lower()
    return ALIASES.get(key, key)


def info(name: str) -> ModelInfo:
    """The :class:`ModelInfo` of a zoo model; raises :class:`ModelError` naming the known ones."""
    key = canonical_name(name)
    if key not in MODELS:
        known = ", ".join(sorted(MODELS))
        raise ModelError(f"unknown model {name!r}: known models are {known}, or give FILE.py:FACTORY")
    return MODELS[key]


def build_model(
    name: str,
    *,
    num_classes: int | None = None,
    image_size: int | None = None,
    seq_len: int | None = None,
    config_overrides: dict[str, Any] | None = None,
    device: Any = None,
    prefer: str = "auto",
):
    """Build ``name`` (a zoo name or ``FILE:FACTORY``) with random weights; returns an ``nn.Module``.

    ``prefer``: ``"auto"`` (torchvision when importable, else transformers), ``"torchvision"`` or
    ``"transformers"``. ``device`` (e.g. ``"meta"``) is the device the parameters are created on.
    """
    import torch

    if factory.is_spec(name):
        model = _build_from_factory(name, num_classes=num_classes, image_size=image_size, seq_len=seq_len)
    else:
        mi = info(name)
        n_cls = mi.default_num_classes if num_classes is None else int(num_classes)
        if n_cls < 1:
            raise ModelError(f"num_classes must be >= 1, got {num_classes}")
        ctx = torch.device(device) if device is not None else _nullcontext()
        with ctx:
            model = _BUILDERS[mi.name](n_cls, dict(config_overrides or {}), prefer)
        model.ascendify_name = mi.name
        model.ascendify_task = mi.task
        model.ascendify_num_classes = n_cls
        model.ascendify_image_size = image_size or mi.default_image_size
        model.ascendify_seq_len = seq_len or mi.default_seq_len
    return model


def task_of(model) -> str:
    task = getattr(model, "ascendify_task", "image-classification")
    if task not in TASKS:
        raise ModelError(f"model.ascendify_task={task!r}: expected one of {', '.join(TASKS)}")
    return task


def example_batch(model, batch_size: int, *, image_size: int | None = None, seq_len: int | None = None,
                  device: Any = "cpu", generator=None):
    """A random ``(input, target)`` batch shaped for ``model`` (see the module doc for the shapes)."""
    import torch

    task = task_of(model)
    if task == "image-classification":
        size = image_size or getattr(model, "ascendify_image_size", 224)
        n_cls = getattr(model, "ascendify_num_classes", 2)  # a user's classifier has at least 2 outputs
        x = torch.randn(batch_size, 3, size, size, generator=generator)
        y = torch.randint(0, n_cls, (batch_size,), generator=generator)
    else:
        t = seq_len or getattr(model, "ascendify_seq_len", 128)
        vocab = getattr(model, "vocab_size", None) or getattr(model, "ascendify_vocab_size", 1000)
        x = torch.randint(0, vocab, (batch_size, t), generator=generator)
        if task == "causal-lm":
            y = torch.randint(0, vocab, (batch_size, t), generator=generator)
        else:
            y = torch.randint(0, getattr(model, "ascendify_num_classes", 2), (batch_size,), generator=generator)
    return x.to(device), y.to(device)


def loss_fn(model) -> Callable:
    """``loss(logits, target)`` for ``model``'s task (cross-entropy; per token for a causal LM)."""
    import torch.nn.functional as F

    if task_of(model) == "causal-lm":
        return lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    return lambda logits, y: F.cross_entropy(logits.float(), y)


def count_parameters(model) -> int:
    """Distinct parameters (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


# ---------------------------------------------------------------------------------------------- builders


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _logits_module():
    import torch.nn as nn

    class LogitsOf(nn.Module):
        """A Hugging Face model whose ``forward(x)`` returns the ``logits`` tensor."""

        def __init__(self, inner, input_name: str):
            super().__init__()
            self.inner = inner
            self._input_name = input_name

        def forward(self, x):
            return self.inner(**{self._input_name: x}).logits

    return LogitsOf


def _torchvision():
    try:
        import torchvision.models as tvm  # noqa: F401

        return tvm
    except Exception:  # not installed, or a build that does not match torch
        return None


def _resnet(depth: int):
    def build(num_classes: int, overrides: dict, prefer: str):
        tvm = _torchvision() if prefer in ("auto", "torchvision") else None
        if tvm is not None and not overrides:
            m = getattr(tvm, f"resnet{depth}")(weights=None, num_classes=num_classes)
            m.ascendify_source = "torchvision"
            return m
        if prefer == "torchvision":
            raise ModelError("torchvision is not importable here; use prefer='transformers'")
        from transformers import ResNetConfig, ResNetForImageClassification

        if depth == 18:
            base = {"layer_type": "basic", "depths": [2, 2, 2, 2], "hidden_sizes": [64, 128, 256, 512]}
        else:
            base = {"layer_type": "bottleneck", "depths": [3, 4, 6, 3], "hidden_sizes": [256, 512, 1024, 2048]}
        base.update(overrides)
        m = _logits_module()(ResNetForImageClassification(ResNetConfig(num_labels=num_classes, **base)),
                             "pixel_values")
        m.ascendify_source = "transformers"
        return m

    return build


def _efficientnet_b0(num_classes: int, overrides: dict, prefer: str):
    tvm = _torchvision() if prefer in ("auto", "torchvision") else None
    if tvm is not None and not overrides:
        m = tvm.efficientnet_b0(weights=None, num_classes=num_classes)
        m.ascendify_source = "torchvision"
        return m
    if prefer == "torchvision":
        raise ModelError("torchvision is not importable here; use prefer='transformers'")
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    # google/efficientnet-b0's configuration (the library's defaults describe B7)
    base = {"width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224, "dropout_rate": 0.2,
            "hidden_dim": 1280}
    base.update(overrides)
    cfg = EfficientNetConfig(num_labels=num_classes, **base)
    if "hidden_dim" not in overrides:
        # the head's conv has round_filters(1280) channels but its norm and classifier take hidden_dim: keep
        # them equal when a test narrows the width
        from transformers.models.efficientnet.modeling_efficientnet import round_filters

        cfg.hidden_dim = round_filters(cfg, 1280)
    m = _logits_module()(EfficientNetForImageClassification(cfg), "pixel_values")
    m.ascendify_source = "transformers"
    return m


def _bert(large: bool):
    def build(num_classes: int, overrides: dict, prefer: str):
        from transformers import BertConfig, BertForSequenceClassification

        base = (
            {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}
            if large
            else {}
        )
        base.update(overrides)
        cfg = BertConfig(num_labels=num_classes, **base)
        m = _logits_module()(BertForSequenceClassification(cfg), "input_ids")
        m.vocab_size = cfg.vocab_size
        m.ascendify_source = "transformers"
        return m

    return build


def _gpt2(num_classes: int, overrides: dict, prefer: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**overrides)  # the defaults are GPT-2 small (124M)
    m = _logits_module()(GPT2LMHeadModel(cfg), "input_ids")
    m.vocab_size = cfg.vocab_size
    m.ascendify_source = "transformers"
    return m


_BUILDERS: dict[str, Callable] = {
    "resnet18": _resnet(18),
    "resnet50": _resnet(50),
    "efficientnet_b0": _efficientnet_b0,
    "bert-base": _bert(large=False),
    "bert-large": _bert(large=True),
    "gpt2": _gpt2,
}


def _build_from_factory(spec: str, **kwargs):
    """A user's model, loaded by :mod:`ascendify.workloads.factory` (a name called with the keywords it accepts),
    with the attributes the zoo's models carry; ``kwargs`` is updated with the sizes the factory chose."""
    import torch.nn as nn

    s = factory.parse_spec(spec)
    named = None if s.is_call else factory.load(s, call=False)
    if callable(named) and not isinstance(named, nn.Module):
        accepted = factory.accepted_keywords(named, kwargs)
        try:
            params = inspect.signature(named).parameters
        except (TypeError, ValueError):
            params = {}
        for k in ("image_size", "seq_len"):  # not given: the factory's own default is the model's size
            default = params[k].default if k in params else None
            if kwargs.get(k) is None and isinstance(default, int) and not isinstance(default, bool):
                kwargs[k] = default
    else:
        accepted = {}
    model = factory.load_model(s, kwargs=accepted)
    if "num_classes" not in accepted:
        kwargs["num_classes"] = None  # the factory chose its own class count: example_batch stays below 2
    path = s.path()
    model.ascendify_name = getattr(model, "ascendify_name", f"{path.name}:{s.expr}")
    model.ascendify_source = getattr(model, "ascendify_source", "user")
    model.ascendify_task = getattr(model, "ascendify_task", "image-classification")
    if kwargs.get("num_classes") is not None:
        model.ascendify_num_classes = getattr(model, "ascendify_num_classes", kwargs["num_classes"])
    if kwargs.get("image_size") is not None:
        model.ascendify_image_size = getattr(model, "ascendify_image_size", kwargs["image_size"])
    if kwargs.get("seq_len") is not None:
        model.ascendify_seq_len = getattr(model, "ascendify_seq_len", kwargs["seq_len"])
    task_of(model)  # validates a user-set task
    return model
