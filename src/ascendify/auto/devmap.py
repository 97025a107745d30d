"""Precise device mapping: only *device values* change, never strings that merely contain "cuda".

A value is mapped when it is exactly a CUDA device: the strings ``"cuda"`` / ``"cuda:N"``, a ``torch.device``
of type ``cuda``, or (only where the API takes a device) an integer index. Everything else passes through
untouched, so ``torch.load("ckpt_cuda.pt")`` loads that file. A string in a device position that starts like a
CUDA device but is not one (``"cuda:x"``, ``"CUDA"``) is recorded as *unmapped* and passed on.
"""

from __future__ import annotations

import re
from typing import Any

from ascendify.auto.record import Recorder
from ascendify.auto.target import Target

_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")
_UNSEEN = object()
_LOOKS_CUDA = re.compile(r"^\s*cuda\b|^\s*CUDA\b", re.IGNORECASE)


class Mapper:
    """Maps CUDA device values to the target; caches per string, so the common case is one dict lookup."""

    def __init__(self, target: Target, rec: Recorder, real_device: type) -> None:
        self.target = target
        self.rec = rec
        self.Device = real_device  # the real torch.device type (not the patched factory)
        self._str: dict[str, str | bool | None] = {}  # "cuda:1" -> "npu:1" (see _classify)
        self.default = target.device_str(None)

    # -- strings --------------------------------------------------------------------------------------
    def _classify(self, s: str) -> str | bool | None:
        """Mapped string, None (not CUDA: pass), or False (CUDA-looking but not a device: unmapped)."""
        m = _CUDA_RE.match(s)
        if m:
            return self.target.device_str(int(m.group(1)) if m.group(1) else None)
        return False if _LOOKS_CUDA.match(s) else None

    def map_str(self, s: str, api: str) -> str:
        """``"cuda:1"`` -> ``"npu:1"``; anything else unchanged (recorded as unmapped when CUDA-like)."""
        r = self._str.get(s, _UNSEEN)
        if r is _UNSEEN:
            r = self._classify(s)
            if len(self._str) < 4096:
                self._str[s] = r
        if r is None:
            return s
        if r is False:
            self.rec.unmapped_value(api, s)
            return s
        self.rec.hit(api, r)
        return r

    # -- any value ------------------------------------------------------------------------------------
    def map(self, v: Any, api: str, int_is_device: bool = False) -> Any:
        """Map one value in a device position (``int_is_device``: the API reads an int as a CUDA index)."""
        t = type(v)
        if t is str:
            return self.map_str(v, api)
        if t is self.Device:
            if v.type != "cuda":
                return v
            out = self.Device(self.target.device_str(v.index))
            self.rec.hit(api, str(out))
            return out
        if int_is_device and t is int:
            out = self.target.device_str(v)
            self.rec.hit(api, out)
            return out
        return v

    def index(self, v: Any, api: str) -> Any:
        """For APIs that take an index or device (``torch.cuda.set_device``): CUDA devices -> target index."""
        t = type(v)
        if t is str or t is self.Device:
            d = self.map(v, api)
            if d is v:
                return v
            if not self.target.indexed:
                return None
            if type(d) is str:
                _, _, idx = d.partition(":")
                return int(idx) if idx else None
            return d.index
        return v

    def map_dict(self, d: dict, api: str) -> dict:
        """``map_location`` dicts: values mapped; each CUDA key kept and its mapped twin added."""
        out = {}
        for k, v in d.items():
            nv = self.map(v, api)
            out[k] = nv
            nk = self.map(k, api)
            if nk is not k:
                out.setdefault(str(nk), nv)
        return out
