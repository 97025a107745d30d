"""The knowledge base: facts about torch_npu shipped as package data (see ``data/PROVENANCE.md``).

Every loader is cached and torch-free, so the static migration path stays fast and importable anywhere.

>>> from ascendify.core import knowledge
>>> knowledge.npu_name_exists("torch.npu.synchronize")
True
>>> knowledge.cuda_to_npu("torch.cuda.nvtx") is None
True
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """Return the parsed package-data file ``data/<name>.json``."""
    with resources.files("ascendify.data").joinpath(f"{name}.json").open("r", encoding="utf-8") as f:
        return json.load(f)


@cache
def npu_names() -> frozenset[str]:
    """Every public dotted name that exists in torch_npu (``torch.npu.X`` is ``torch_npu.npu.X``)."""
    api = load("torch_npu_api")
    names = set(api["dotted_names"]) | set(api.get("runtime_names", {}))
    for n in list(names):
        if n.startswith("torch_npu.npu."):
            names.add("torch.npu." + n[len("torch_npu.npu.") :])
        elif n.startswith("torch.npu."):
            names.add("torch_npu.npu." + n[len("torch.npu.") :])
    for op in api["torch_npu_ops"].get("public", []):
        names.add(f"torch_npu.{op}")
    return frozenset(names)


def npu_name_exists(dotted: str) -> bool:
    """True when ``dotted`` (or a parent module/class of it) is a known torch_npu name."""
    names = npu_names()
    if dotted in names:
        return True
    # a module path such as "torch.npu.amp" exists when anything lives under it
    prefix = dotted + "."
    return any(n.startswith(prefix) for n in names)


@cache
def cuda_to_npu_map() -> dict[str, str | None]:
    """``torch.cuda.X`` -> ``torch.npu.Y`` (or None when torch_npu has no equivalent)."""
    out: dict[str, str | None] = {}
    for cuda_name, info in load("torch_npu_api")["torch_cuda_to_npu"].items():
        out[cuda_name] = info.get("static_equivalent")
    return out


def cuda_to_npu(cuda_name: str) -> str | None:
    """The torch_npu equivalent of a ``torch.cuda`` name, or None."""
    return cuda_to_npu_map().get(cuda_name)


def cuda_entry(cuda_name: str) -> dict[str, Any] | None:
    """The full reference entry (equivalent, documented NPU name, support, constraints) of a ``torch.cuda`` name."""
    return load("torch_npu_api")["torch_cuda_to_npu"].get(cuda_name)


@cache
def api_support() -> dict[str, dict[str, Any]]:
    """Official NPU support list for torch 2.13, keyed by API name (``torch.nn.functional.gelu``...)."""
    return {a["api"]: a for a in load("npu_api_support")["apis"]}


@cache
def unsupported_apis() -> frozenset[str]:
    """APIs the official list marks unsupported on every chip family."""
    return frozenset(k for k, a in api_support().items() if a.get("supported_any") is False)


@cache
def ops_without_npu_kernel() -> dict[str, dict[str, Any]]:
    """ATen op families with no NPU kernel (CPU fallback on hardware), keyed by op name (``lgamma``)."""
    return {o["name"]: o for o in load("npu_aten_op_coverage")["ops_without_any_npu_kernel"]}


@cache
def overloads_without_npu_kernel() -> frozenset[str]:
    """Every ATen overload name (``lgamma``, ``lgamma.out``, ``nonzero_static``) that runs on the CPU on an NPU.

    Exact, from the torch_npu wheel (``data/npu_kernels.json``): neither torch_npu registers a PrivateUse1 kernel
    for it nor does torch cover it on every backend (composite kernels; structured ops whose ``out=`` overload
    has an NPU kernel), plus the registered kernels that always hand the work to the CPU (``logit``).
    """
    k = load("npu_kernels")
    return frozenset(k["without_npu_kernel"]) | frozenset(k["kernels_that_fall_back_to_cpu"])


def has_npu_kernel(overload: str) -> bool:
    """True when ATen ``overload`` (``argmax``, ``_foreach_mul_.Tensor``) runs on an NPU without a CPU fallback."""
    return overload not in overloads_without_npu_kernel()


@cache
def npu_autocast_lists() -> dict[str, Any]:
    """torch_npu's ``AutocastPrivateUse1`` registrations by cast policy, as compiled into the wheel.

    Keys: ``lower_precision_fp``, ``fp32``, ``fp32_set_opt_dtype``, ``promote``, ``banned`` (lists of
    ``name``/``name.overload``), ``fp32_append_dtype`` (overload -> the ``dtype`` overload it redispatches to)
    and ``registration_order``.
    """
    return load("npu_kernels")["autocast"]


def provenance(name: str) -> dict[str, Any]:
    """Where package-data file ``name`` comes from."""
    return load(name)["provenance"]


# --- device peaks (data/device_peaks.json): published peak FLOP/s and bandwidths per chip, for MFU and roofline

_DTYPE_KEYS = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "tf32": "tf32", "hf32": "hf32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
}


def _norm_device_name(name: str) -> str:
    s = name.lower()
    for word in ("nvidia", "tesla", "ascend", "huawei"):
        s = s.replace(word, "")
    return "".join(ch for ch in s if ch not in " -_")


def device_peaks(device_name: str) -> dict[str, Any] | None:
    """The entry of ``data/device_peaks.json`` for a device name as torch or npu-smi prints it, or None.

    ``"NVIDIA A100-SXM4-80GB"``, ``"Ascend910B3"``, ``"910B3"``, ``"NVIDIA H100 80GB HBM3"`` all resolve. The entry
    holds ``tflops`` per dtype (dense; None where unsupported or unpublished), ``memory_gbps``,
    ``host_link_gbps`` (per direction), ``confidence`` and ``sources``.
    """
    import re

    key = _norm_device_name(device_name or "")
    if not key:
        return None
    for dev in load("device_peaks")["devices"]:
        if any(re.search(rx, key) for rx in dev["match"]):
            return dev
    return None


def device_peak(device_name: str, dtype: str) -> float | None:
    """Published dense peak of ``device_name`` for ``dtype`` in FLOP/s (not TFLOP/s), or None when unknown.

    ``dtype`` is ``fp32``/``tf32``/``hf32``/``bf16``/``fp16`` or a torch dtype name (``torch.bfloat16``). ``tf32`` and
    ``hf32`` stand for one another (NVIDIA's and Ascend's reduced-precision fp32 matmul), so a bench that enabled
    either asks for either.

    >>> device_peak("NVIDIA H100 80GB HBM3", "bf16") / 1e12
    989.4
    >>> device_peak("Tesla V100-SXM2-16GB", "bf16") is None
    True
    """
    dev = device_peaks(device_name)
    k = _DTYPE_KEYS.get(str(dtype).lower())
    if dev is None or k is None:
        return None
    tf = dev["tflops"]
    val = tf.get(k)
    if val is None and k in ("tf32", "hf32"):
        val = tf.get("hf32" if k == "tf32" else "tf32")
    return None if val is None else float(val) * 1e12
