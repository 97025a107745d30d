"""``torch.backends.cudnn.*`` and ``torch.backends.cuda.matmul.*`` flags.

Both objects are replaced by proxies that forward every read and write to the real object and record
writes. On an NPU the TF32 switches become the HF32 switches (``torch.backends.cuda.matmul.allow_tf32`` ->
``torch.npu.matmul.allow_hf32``, ``torch.backends.cudnn.allow_tf32`` -> ``torch.npu.conv.allow_hf32``), and
reads of those two answer from the NPU switch. Every other flag has no effect off CUDA and is recorded so.
"""

from __future__ import annotations

from typing import Any

_ADVICE = {
    "deterministic": "cuDNN flags do nothing here; use torch.use_deterministic_algorithms(True)",
    "benchmark": "cuDNN autotuning does not exist here",
}


class FlagProxy:
    """Forwards attribute access to ``real``; ``hf32`` maps attribute names to ``(module, attr)`` switches."""

    def __init__(self, real: Any, prefix: str, rec, target, hf32: dict[str, tuple[Any, str]]) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_rec", rec)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_hf32", hf32)

    def __getattr__(self, name: str) -> Any:
        hf = self._hf32.get(name)
        if hf is not None:
            return getattr(hf[0], hf[1])
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        api = f"{self._prefix}.{name}"
        hf = self._hf32.get(name)
        if hf is not None:
            self._rec.hit(api, f"torch.npu.{'matmul' if 'matmul' in self._prefix else 'conv'}.allow_hf32")
            setattr(hf[0], hf[1], value)
            return
        reason = _ADVICE.get(name, "CUDA-only flag")
        self._rec.noop(api, f"no effect on {self._target.name}: {reason}")
        setattr(self._real, name, value)

    def __repr__(self) -> str:
        return f"<ascendify proxy of {self._prefix}: {self._real!r}>"

    def __dir__(self) -> list[str]:
        return dir(self._real)


def install(s) -> None:
    import torch
    import torch.backends.cuda
    import torch.backends.cudnn

    P = s.patches
    t = s.target
    mm_hf32: dict[str, tuple[Any, str]] = {}
    conv_hf32: dict[str, tuple[Any, str]] = {}
    if t.hf32:
        npu = t.module()
        mm = getattr(npu, "matmul", None)
        cv = getattr(npu, "conv", None)
        if mm is not None and hasattr(mm, "allow_hf32"):
            mm_hf32["allow_tf32"] = (mm, "allow_hf32")
        if cv is not None and hasattr(cv, "allow_hf32"):
            conv_hf32["allow_tf32"] = (cv, "allow_hf32")
    P.set(torch.backends.cuda, "matmul",
          FlagProxy(torch.backends.cuda.matmul, "torch.backends.cuda.matmul", s.rec, t, mm_hf32))
    P.set(torch.backends, "cudnn", FlagProxy(torch.backends.cudnn, "torch.backends.cudnn", s.rec, t, conv_hf32))
