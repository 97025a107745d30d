"""Tensor statistics and the fingerprint, computed on the tensor's device with no host synchronisation.

One statistics vector per tensor, 14 float32 numbers::

    [min, max, sum, l2norm, nan_count, inf_count, fp_0 .. fp_7]      (STAT_LEN = 14 numbers)

``StatTable`` holds a dump step's vectors (row ``i``: the ``i``-th tensor added) and gives them to the host once per
step (``rows()``); ``to_tensor_stats`` turns one row into a ``model.TensorStats``. ``stat_vector(t)`` and
``view_vector`` are the one-tensor forms. The fingerprint is defined in ``precision.model``.

Cost: on the CPU (and the emulated npu, whose tensors are host memory) **one call** of a C kernel (``stats_kernel``)
per tensor writes its whole row into the table's float32 memory: one pass over the data in memory order (any
strides: slices, transposes, broadcasts) for min, max, sum, norm and the NaN/Inf counts, then the fingerprint's
gather of at most ``FINGERPRINT_SAMPLES`` logical positions. No torch operation runs, and the Python around the call
is about 3 us. Integers and bool go through a float32 copy. Elsewhere (other devices, float64, no C compiler) three
torch reductions on the tensor's device (``aminmax``, ``sum``, ``linalg.vector_norm``; bfloat16/float16 reduced in
float32 without a converted copy; a non-contiguous tensor first permuted into its memory order, which changes none
of these values and lets the reductions read memory in sequence) plus the fingerprint's ``take`` and ``mv``.
``add_view`` reuses the first six numbers for a tensor that holds exactly the elements of an already summarised one
(a transpose, a ``view``, a copy: the dumper decides, by data pointer and memory footprint), so it costs only the
fingerprint. ``add(t, defer=True)`` lets a large output wait for the next call: ``add_parts`` then takes its
statistics from the parts a ``split`` cut it into (a fused q/k/v projection read once); anything else settles it. NaN/Inf counts on the torch path: on the
CPU they are counted only when the norm is not finite (reading one number there costs nothing); on other devices
two more reductions run on the device, so the host is never waited for per tensor.
"""

from __future__ import annotations

import ctypes
import math
import sys

import torch

from ascendify.precision.model import FINGERPRINT_LEN, FINGERPRINT_SAMPLES, TensorStats

STAT_LEN = 6 + FINGERPRINT_LEN
_MASK = (1 << 32) - 1
_HALF = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_fp_cache: dict[tuple[str, int], tuple[torch.Tensor | None, torch.Tensor, float]] = {}


def hash_uniform(n: int, salt: int) -> torch.Tensor:
    """``n`` numbers in [-1, 1) from an integer hash of (position, salt): identical on every machine (no RNG)."""
    i = torch.arange(n, dtype=torch.int64)
    h = (i * 2654435761 + salt * 40503 + 0x9E3779B9) & _MASK
    h = h ^ (h >> 16)
    h = (h * 0x45D9F3B) & _MASK
    h = h ^ (h >> 16)
    return (h.to(torch.float64) / 2**31 - 1.0).to(torch.float32)


def fingerprint_plan(n: int, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor, float]:
    """(positions or None for "all", weights ``k x 8``, 1/sqrt(k)) for tensors of ``n`` elements, built once."""
    key = (str(device), n)
    plan = _fp_cache.get(key)
    if plan is None:
        with torch._C.DisableTorchFunction():
            if n <= FINGERPRINT_SAMPLES:
                pos, k = None, n
            else:
                k = FINGERPRINT_SAMPLES
                u = (hash_uniform(k, 7).to(torch.float64) + 1.0) / 2.0  # [0, 1)
                pos = (u * n).to(torch.int64).clamp_(0, n - 1).to(device)
            w = torch.stack([hash_uniform(k, 101 + j) for j in range(FINGERPRINT_LEN)], dim=1).to(device)
            plan = (pos, w, 1.0 / math.sqrt(k))
        if len(_fp_cache) > 4096:
            _fp_cache.clear()
        _fp_cache[key] = plan
    return plan


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """The 8-number fingerprint of ``t`` (float32, on ``t``'s device): see ``precision.model``."""
    n = t.numel()
    pos, w, scale = fingerprint_plan(n, t.device)
    if pos is None:
        s = t.reshape(-1)
    else:
        s = torch.take(t, pos)
    if s.dtype != torch.float32:
        s = s.to(torch.float32)
    return torch.mv(w.t(), s) * scale


def _memory_order(x: torch.Tensor) -> torch.Tensor:
    if x.is_contiguous() or x.dim() < 2:
        return x
    order = sorted(range(x.dim()), key=lambda i: (-x.stride(i), -x.shape[i]))
    return x.permute(order)


def _torch_vector(t: torch.Tensor) -> torch.Tensor:
    """The statistics vector by torch reductions on ``t``'s device (``x``: ``t`` detached, float)."""
    x = t.detach()
    if x.dtype not in _HALF:
        x = x.to(torch.float32)  # integers and bool: small tensors in practice
    m = _memory_order(x)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    mn, mx = torch.aminmax(m)
    total = m.sum(dtype=acc)
    norm = torch.linalg.vector_norm(m, dtype=acc)
    head = torch.stack([mn.to(acc), mx.to(acc), total, norm]).to(torch.float32)
    return torch.cat([head, _counts(m, norm), fingerprint(x)])


def _summarisable(t: torch.Tensor) -> bool:
    return t.numel() != 0 and t.layout == torch.strided and not t.is_complex()


_STRIDED = torch.strided
_KERNEL_NAMES = {torch.float32: "vec_f32", torch.bfloat16: "vec_bf16", torch.float16: "vec_f16"}
_kernel_fns: dict | None = None  # dtype -> the C function (``stats_kernel``); {} where there is none
_KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}  # the kernels' numbers in ``stats_kernel.ext().fill``
_fx = None  # stats_kernel.ext(): the kernels without ctypes' cost per call, where Python's headers are installed
_pu1: str | None = None
_ROW = STAT_LEN * ctypes.sizeof(ctypes.c_float)
_DEFER_MIN = 1 << 16  # elements: a smaller tensor is cheap to read twice (it is still in cache)
_MAXDIM = 16  # stats_kernel.MAXDIM


_cfill = None  # fastrec's fill (the kernel's call for a contiguous tensor in one C++ call), once the dumper loaded it


def set_cfill(fn) -> None:
    """Give :meth:`StatTable._fast` the C++ recorder's ``fill`` (``fastrec``); None: the Python path only."""
    global _cfill
    _kernel(torch.float32)  # the plans and kernels it shares are set up first
    _cfill = fn


def _pu1_host() -> bool:
    """Tensors of the privateuse1 device are host memory: the emulated npu is on."""
    rt = sys.modules.get("ascendify.emulator.runtime")
    return rt is not None and bool(getattr(rt, "enabled", False))


def _kernel(dtype: torch.dtype):
    global _kernel_fns, _fx
    if _kernel_fns is None:
        from ascendify.precision import stats_kernel

        lib = stats_kernel.kernel()
        _fx = stats_kernel.ext()
        _kernel_fns = {}
        if lib is not None:
            for dt, name in _KERNEL_NAMES.items():
                fn = getattr(lib, name, None)
                if fn is not None:
                    _kernel_fns[dt] = fn
    return _kernel_fns.get(dtype)


def _host_memory(t: torch.Tensor) -> bool:
    """``t``'s data pointer is host memory: a CPU tensor, or one of the emulated npu (host memory retagged)."""
    if t.is_cpu:
        return True
    if not _pu1_host():
        return False
    global _pu1
    if _pu1 is None:
        _pu1 = torch._C._get_privateuse1_backend_name()
    return t.device.type == _pu1


_plans: dict[int, tuple] = {}  # numel -> (positions pointer or None, k, weights pointer, scale, keep-alive)


def _cpu_plan(n: int) -> tuple:
    plan = _plans.get(n)
    if plan is None:
        pos, w, scale = fingerprint_plan(n, _CPU)
        k = n if pos is None else pos.numel()
        plan = (None if pos is None else pos.data_ptr(), k, w.data_ptr(), scale, (pos, w))
        if len(_plans) > 4096:
            _plans.clear()
        _plans[n] = plan
    return plan


_offs: dict[tuple, tuple[int, ctypes.Array]] = {}  # (shape, strides) -> (pointer, the fingerprint's offsets)


def _offsets(shape, stride, pos: int | None, k: int) -> int:
    """The memory offsets of the fingerprint's positions in a strided layout, computed once per layout (the
    kernel would otherwise divide by each size for each of the 4,096 samples of every strided view)."""
    key = (shape, stride)
    hit = _offs.get(key)
    if hit is None:
        nd = len(shape)
        dims = (ctypes.c_int64 * (2 * _MAXDIM))()
        dims[0:nd] = shape
        dims[_MAXDIM : _MAXDIM + nd] = stride
        buf = (ctypes.c_int64 * k)()
        _offsets_fn()(nd, dims, pos, k, buf)
        if len(_offs) >= 256:
            _offs.clear()
        hit = _offs[key] = (ctypes.addressof(buf), buf)
    return hit[0]


def _offsets_fn():
    from ascendify.precision import stats_kernel

    return stats_kernel.kernel().offsets


class StatTable:
    """The statistics vectors of many tensors (a dump's step): row ``i`` is the ``i``-th tensor added.

    Where the C kernel applies (host memory, float32/bfloat16/float16, any strides) one call writes the whole row
    into a float32 table on the CPU, with no torch operation at all; elsewhere the row is a small tensor that torch
    reductions computed on the tensor's own device (no host synchronisation until :meth:`rows`).
    """

    __slots__ = ("n", "_host", "_base", "_cap", "_dev", "_none", "_dims", "pending", "_views")

    def __init__(self, capacity: int = 256):
        self.n = 0
        # the host rows are made with the first row (a dump makes a table for every step, and a last empty one)
        self._cap = max(1, capacity)
        self._host: torch.Tensor | None = None
        self._base = 0
        self._dev: dict[int, torch.Tensor] = {}  # rows torch computed
        self._none: set[int] = set()  # no statistics (empty, complex, another layout, a failure)
        self._dims: ctypes.Array | None = None  # the ctypes kernels' sizes and strides (without stats_kernel.ext)
        # the deferred tensor (``add(defer=True)``): (tensor, row, version), and the views of it added meanwhile
        self.pending: tuple[torch.Tensor, int, int] | None = None
        self._views: list[tuple[torch.Tensor, int]] = []

    def __len__(self) -> int:
        return self.n

    def _next(self) -> int:
        i = self.n
        if self._host is None:
            self._host = torch.empty(self._cap, STAT_LEN)
            self._base = self._host.data_ptr()
        elif i == self._cap:
            grown = torch.empty(2 * self._cap, STAT_LEN)
            grown[:i].copy_(self._host)
            self._host, self._base, self._cap = grown, grown.data_ptr(), 2 * self._cap
        self.n = i + 1
        return i

    def has(self, i: int) -> bool:
        """Row ``i`` holds statistics."""
        return i not in self._none

    def _fast(self, t: torch.Tensor, i: int, head: int | None) -> bool:
        if _cfill is not None and _cfill(t, self._base + i * _ROW, None if head is None else self._base + head * _ROW,
                                         _plans, _pu1_host(), 0):
            return True  # a contiguous float tensor in host memory whose plan is built: one C++ call
        fn = _kernel_fns.get(t.dtype) if _kernel_fns is not None else _kernel(t.dtype)
        if fn is None:
            if t.dtype in _HALF or not _host_memory(t):
                return False  # float64: torch reduces it in float64
            t = t.to(torch.float32)  # integers and bool: a float32 copy (small tensors in practice)
            fn = _kernel(torch.float32)
            if fn is None:
                return False
        elif not (t.is_cpu or _host_memory(t)):
            return False
        nd = t.dim()
        ptr = t.data_ptr()
        if nd > _MAXDIM or not ptr:  # a wrapper subclass (no storage of its own) reports 0: torch reduces it
            return False
        n = t.numel()
        pos, k, w, scale, _keep = _plans.get(n) or _cpu_plan(n)
        shape, stride = t.shape, t.stride()
        offs = None if not nd or t.is_contiguous() else _offsets(shape, stride, pos, k)
        hp = None if head is None else self._base + head * _ROW
        if _fx is not None:
            _fx.fill(_KINDS[t.dtype], ptr, shape, stride, pos, k, w, scale, hp, self._base + i * _ROW, offs)
            return True
        dims = self._dims
        if dims is None:
            dims = self._dims = (ctypes.c_int64 * (2 * _MAXDIM))()
        if nd:
            dims[0:nd] = shape
            dims[_MAXDIM : _MAXDIM + nd] = stride
        fn(ptr, nd, dims, pos, k, w, scale, hp, self._base + i * _ROW, offs)
        return True

    def add(self, t: torch.Tensor, defer: bool = False) -> int:
        """Summarise ``t`` (grad, torch-function handling and autocast off: the dumper's ``_quiet``).

        ``defer``: a large dense tensor the C kernel reads may wait, its row reserved, until the next call on this
        table or :meth:`settle` (the dumper settles before any torch call that could write to it). Meanwhile views
        of it (:meth:`add_view`) wait with it, and :meth:`add_parts` can take its statistics from the parts a
        ``split`` cut it into: a fused q/k/v projection is then read once, not twice."""
        if self.pending is not None:
            self.settle()
        i = self._next()
        tried = _cfill is not None
        if tried:  # the C++ recorder: read now, deferred, or left to the checks below
            got = _cfill(t, self._base + i * _ROW, None, _plans, _pu1_host(), _DEFER_MIN if defer else 0)
            if got == 1:
                return i
            if got == 2:
                self.pending = (t, i, t._version)
                return i
        if defer:
            try:
                if (t.numel() >= _DEFER_MIN and _kernel(t.dtype) is not None and t.layout == torch.strided
                        and t.is_contiguous() and _host_memory(t) and t.data_ptr()):
                    self.pending = (t, i, t._version)
                    return i
            except Exception:  # an exotic subclass: summarised now, as any other tensor
                pass
        self._fill(t, i, tried)
        return i

    def _fill(self, t: torch.Tensor, i: int, tried: bool = False) -> None:
        """Row ``i`` from ``t`` (``tried``: the C++ recorder's call already left it to the Python path)."""
        if not tried and _cfill is not None and _cfill(t, self._base + i * _ROW, None, _plans, _pu1_host(), 0) == 1:
            return
        try:
            if not t.numel() or t.layout is not _STRIDED or t.is_complex():  # not _summarisable(t)
                self._none.add(i)
            elif not self._fast(t, i, None):
                self._dev[i] = _torch_vector(t)
        except Exception:  # an exotic tensor subclass, a device that cannot reduce: no statistics, never a crash
            self._none.add(i)

    def add_view(self, base: int, t: torch.Tensor) -> int:
        """Summarise ``t``, which holds exactly the elements of row ``base``'s tensor (a transpose, a ``view``, a
        copy): the statistics are the same, only the fingerprint (which depends on positions) is computed."""
        if self.pending is not None:
            if self._waiting(base):
                i = self._next()
                self._views.append((t, i))  # filled with the deferred row
                return i
            self.settle()
        i = self._next()
        self._fill_view(base, t, i)
        return i

    def _fill_view(self, base: int, t: torch.Tensor, i: int) -> None:
        try:
            if base in self._none or not _summarisable(t):
                self._none.add(i)
            elif base in self._dev or not self._fast(t, i, base):
                self._dev[i] = torch.cat([self.vector(base)[:6].to(t.device), fingerprint(t.detach())])
        except Exception:
            self._none.add(i)

    def _waiting(self, i: int) -> bool:
        """Row ``i`` is the deferred tensor's or one of its views' (all hold the same elements)."""
        p = self.pending
        return p is not None and (i == p[1] or any(i == j for _, j in self._views))

    def settle(self) -> None:
        """Compute the deferred row, and the rows of its views."""
        p = self.pending
        if p is None:
            return
        self.pending = None
        t, i, ver = p
        if t._version != ver:
            # written to in place before its statistics were taken (not through a call the dumper saw): the values
            # it had are gone; no statistics rather than another tensor's
            self._none.add(i)
        else:
            self._fill(t, i)
        self._settle_views(i)

    def _settle_views(self, i: int) -> None:
        views, self._views = self._views, []
        for v, j in views:
            self._fill_view(i, v, j)

    def add_parts(self, i: int, parts: list[torch.Tensor]) -> list[int] | None:
        """Rows for ``parts``, which together hold exactly the elements of row ``i``'s tensor, when that tensor is
        the deferred one (``i`` its row or a view's): each part is read once, and the deferred row's statistics
        are combined from theirs, so only its fingerprint reads it again. None otherwise: the caller adds the parts
        as usual (and the deferred tensor is settled on the next call)."""
        if not self._waiting(i):
            return None
        t, row, ver = self.pending
        if t._version != ver or sum(x.numel() for x in parts) != t.numel() or any(x.dtype != t.dtype for x in parts):
            return None
        self.pending = None
        rows = [self.add(x) for x in parts]
        live = [r for r, x in zip(rows, parts, strict=True) if x.numel()]
        if any(r in self._none or r in self._dev for r in live):
            self._fill(t, row)  # a part the kernel did not read: read the whole tensor
        else:
            # the rows through ctypes: torch's indexing and item assignment cost ~100 us here
            vals = [(ctypes.c_float * 6).from_address(self._base + r * _ROW)[:] for r in live]
            nans = sum(v[4] for v in vals)
            (ctypes.c_float * 6).from_address(self._base + row * _ROW)[:] = [
                math.nan if nans else min(v[0] for v in vals),
                math.nan if nans else max(v[1] for v in vals),
                sum(v[2] for v in vals),
                math.sqrt(sum(v[3] * v[3] for v in vals)),
                nans,
                sum(v[5] for v in vals),
            ]
            if not self._fast(t, row, row):  # the fingerprint
                self._fill(t, row)
        self._settle_views(row)
        return rows

    def add_vector(self, vec: torch.Tensor) -> int:
        """A row given as a vector of ``STAT_LEN`` numbers."""
        if self.pending is not None:
            self.settle()
        i = self._next()
        self._dev[i] = vec
        return i

    def vector(self, i: int) -> torch.Tensor | None:
        """Row ``i`` as a tensor (a copy of the host row; the device vector torch made), or None."""
        if self.pending is not None:
            self.settle()
        if i in self._none:
            return None
        v = self._dev.get(i)
        return v if v is not None else self._host[i].clone()

    def rows(self) -> list[list[float] | None]:
        """Every row on the host as Python floats (one transfer per device for the rows torch made)."""
        return self.rows_from(self.host_rows())

    @staticmethod
    def rows_from(host: tuple[int, int, int, dict[int, list[float] | None]]) -> list[list[float] | None]:
        """:meth:`rows` from what :meth:`host_rows` gave (the rows torch made are not moved to the host again)."""
        base, n, _row, others = host
        if not n:
            return []
        # the host rows read through a memoryview: torch's tolist, with grad and torch-function handling switched
        # off around it, cost several times as much right after a forward (a dump's fixed cost per step)
        flat = memoryview((ctypes.c_float * (n * STAT_LEN)).from_address(base)).cast("B").cast("f").tolist()
        out: list[list[float] | None] = [flat[i : i + STAT_LEN] for i in range(0, n * STAT_LEN, STAT_LEN)]
        for i, row in others.items():
            out[i] = row
        return out

    def host_rows(self) -> tuple[int, int, int, dict[int, list[float] | None]]:
        """The rows as :meth:`rows` gives them, for a reader in C (``fastrec.entries``): ``(address of row 0, number
        of rows, bytes a row, {row: None or its floats})``, the dictionary naming the rows that are not in that
        memory (no statistics; computed by torch). Valid until the next change to the table."""
        self.settle()
        return (self._base, self.n, _ROW, self._others())

    def _others(self) -> dict[int, list[float] | None]:
        """The rows not in the host table: None for those without statistics, the floats of those torch made."""
        out: dict[int, list[float] | None] = {}
        if self._dev:
            with torch.no_grad(), torch._C.DisableTorchFunction():
                groups: dict[str, list[int]] = {}
                for i, v in self._dev.items():
                    groups.setdefault(str(v.device), []).append(i)
                for idxs in groups.values():
                    try:
                        host = torch.stack([self._dev[i] for i in idxs]).to("cpu", torch.float64).tolist()
                    except Exception:  # rows without data (a meta tensor's): none of these, the step's others kept
                        host = [None] * len(idxs)
                        self._none.update(idxs)
                    for i, row in zip(idxs, host, strict=True):
                        out[i] = row
        for i in self._none:
            out[i] = None
        return out


def stat_vector(t: torch.Tensor) -> torch.Tensor | None:
    """The statistics vector of ``t`` (see the module docstring), or None for empty/complex/unsupported tensors.

    Call with grad disabled, torch-function handling disabled and autocast off (the dumper does this).
    """
    table = StatTable(1)
    return table.vector(table.add(t))


def view_vector(base_vec: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The statistics vector of ``t``, a view holding exactly the elements of a tensor whose vector is
    ``base_vec``: the statistics are the same, only the fingerprint (which depends on positions) is new."""
    table = StatTable(2)
    if base_vec.device.type == "cpu" and base_vec.dtype == torch.float32:
        table._next()
        table._host[0].copy_(base_vec)
    else:
        table.add_vector(base_vec)
    return table.vector(table.add_view(0, t))


_CPU = torch.device("cpu")


def _counts(m: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    if m.device.type == "cpu" and math.isfinite(norm.item()):
        return torch.zeros(2)
    return torch.stack([torch.isnan(m).sum(), torch.isinf(m).sum()]).to(torch.float32)


def to_tensor_stats(t_meta: tuple[str, tuple[int, ...], bool, str], row: list[float] | None, **extra) -> TensorStats:
    """A ``TensorStats`` from the tensor's metadata ``(dtype, shape, requires_grad, device)`` and its host row."""
    dtype, shape, requires_grad, device = t_meta
    if row is None:
        return TensorStats(dtype=dtype, shape=shape, requires_grad=requires_grad, device=device, **extra)
    mn, mx, total, norm, nans, infs = row[:6]
    numel = math.prod(shape) if shape else 1
    return TensorStats(
        dtype=dtype,
        shape=shape,
        max=mx,
        min=mn,
        mean=total / numel,
        norm=norm,
        nan_count=int(nans),
        inf_count=int(infs),
        fingerprint=tuple(row[6:]),
        requires_grad=requires_grad,
        device=device,
        **extra,
    )
