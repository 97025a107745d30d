"""The findings ``advise`` looks for: one small documented unit each, in the style of migrate's rules.

A rule has a stable ID (``ADV101``), a kebab-case name, a family (:data:`ascendify.advise.model.FAMILIES`), a title,
*why* it is slow on an Ascend NPU with the sources it rests on (keys of ``data/advise_facts.json``'s ``sources``),
the *fix* as code, an *example* of the slow code, and a ``check(ctx)`` that returns :class:`Finding` s from the
trace (:class:`Context` holds the trace, the chip and the step estimate). Each finding names the user's line,
says what was seen there (counts per step, shapes), and weighs itself: the estimated step time minus the estimated
step time with the finding fixed (:meth:`Context.what_if`), on the chip the estimate is for.

``RULES`` lists them by ID; ``explain(id)`` prints one (``ascendify advise --explain ADV101``).
"""

from __future__ import annotations

import linecache
import os
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ascendify.advise import estimate as est
from ascendify.advise import patterns
from ascendify.advise.model import Finding
from ascendify.advise.trace import BWD, FWD, OPT, Op, Trace, short_path

MAX_PER_RULE = 3  # findings per rule; further sites are listed in the last one's evidence


@dataclass
class Rule:
    id: str
    name: str
    family: str
    title: str
    why: str
    sources: tuple[str, ...]
    fix: str
    example: str
    check: Callable[[Context], list[Finding]]
    applicable: bool = False  # --apply can rewrite it

    def explain(self) -> str:
        from ascendify.core import knowledge

        src = knowledge.load("advise_facts")["sources"]
        lines = [f"{self.id} {self.name}: {self.title}", "", "Why it is slow on an Ascend NPU:",
                 textwrap.fill(self.why, 80), "", "Slow:", textwrap.indent(self.example.strip(), "    "), "",
                 "Fix:", textwrap.indent(self.fix.strip(), "    "), "", "Sources:"]
        lines += [f"  - {src[k]['url']}" for k in self.sources if k in src]
        if self.applicable:
            lines += ["", "`ascendify advise --apply OUT` rewrites it in a copy of the project."]
        return "\n".join(lines)


RULES: dict[str, Rule] = {}


def rule(id: str, name: str, family: str, title: str, *, why: str, sources: tuple[str, ...], fix: str,
         example: str, applicable: bool = False):
    def deco(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        if id in RULES:
            raise ValueError(f"rule {id} defined twice")
        RULES[id] = Rule(id, name, family, title, textwrap.dedent(why).strip().replace("\n", " "), sources,
                         textwrap.dedent(fix).strip("\n"), textwrap.dedent(example).strip("\n"), fn, applicable)
        return fn

    return deco


def explain(rule_id: str) -> str:
    r = RULES.get(rule_id.upper())
    if r is None:
        raise KeyError(f"no rule {rule_id} (rules: {', '.join(RULES)})")
    return r.explain()


# -- the context every check sees ------------------------------------------------------------------------------


@dataclass
class Context:
    trace: Trace
    chip: est.Chip
    fallback: frozenset[str]
    steps: list[int]  # the steps analysed: the whole steps after the first (all whole steps when only one)
    step: int  # the step estimated
    estimate: est.StepEstimate
    _matches: dict[int, list[patterns.Match]] = field(default_factory=dict)

    # -- views
    def ops_of(self, pred: Callable[[Op], bool], phase: str | None = None) -> list[tuple[int, Op]]:
        want = set(self.steps)
        return [(i, o) for i, o in enumerate(self.trace.ops)
                if o.step in want and (phase is None or o.phase == phase) and pred(o)]

    def matches(self, step: int) -> list[patterns.Match]:
        m = self._matches.get(step)
        if m is None:
            m = self._matches[step] = patterns.find_all(self.trace, step)
        return m

    def per_step(self, indices: list[int]) -> float:
        """How many of ``indices`` a step holds: the median over the analysed steps (a step that also ran an
        evaluation, or a checkpoint, does not count for all)."""
        counts = Counter(self.trace.ops[i].step for i in indices)
        per = sorted(counts.get(s, 0) for s in self.steps)
        if not per:
            return 0.0
        mid = len(per) // 2
        return float(per[mid]) if len(per) % 2 else (per[mid - 1] + per[mid]) / 2

    def costs_by_index(self) -> dict[int, est.OpCost]:
        return {k.index: k for k in self.estimate.costs}

    # -- weights: the estimated step minus the estimated step with the finding fixed
    def what_if(self, *, drop: set[int] = frozenset(), nosync: set[int] = frozenset(),
                change: Callable[[est.OpCost, Op], est.OpCost] | None = None, add: list[est.OpCost] = (),
                data_wait: float | None = None) -> float:
        base = self.estimate
        new = []
        for k in base.costs:
            if k.index in drop:
                continue
            if k.index in nosync:
                k = replace(k, sync=False)
            if change is not None:
                k = change(k, self.trace.ops[k.index])
            new.append(k)
        new.extend(add)
        dw = base.data_wait_s if data_wait is None else data_wait
        fixed = est.summarize(self.chip, base.step, new, dw)
        return max(0.0, base.total_s - fixed.total_s)

    # -- building findings
    def site_info(self, site: int) -> tuple[str | None, int | None, str | None, str]:
        s = self.trace.site(site)
        if s is None:
            return None, None, None, ""
        code = linecache.getline(s.file, s.line).strip() if os.path.exists(s.file) else ""
        return short_path(s.file, self.trace.meta.get("root")), s.line, s.function, code

    def finding(self, r: str, site: int, message: str, evidence: dict[str, Any], weight_s: float | None,
                basis: str, apply: dict[str, Any] | None = None, fix: str | None = None) -> Finding:
        rr = RULES[r]
        file, line, fn, code = self.site_info(site)
        from ascendify.core import knowledge

        src = knowledge.load("advise_facts")["sources"]
        total = self.estimate.total_s
        w = None if weight_s is None else round(weight_s * 1e3, 4)
        return Finding(rule=rr.id, name=rr.name, family=rr.family, title=rr.title, file=file, line=line,
                       function=fn, code=code, message=message, evidence=evidence, why=rr.why,
                       sources=[{"what": src[k]["what"], "url": src[k]["url"]} for k in rr.sources if k in src],
                       fix=fix or rr.fix, weight_ms=w, share=None if weight_s is None else round(est.share(
                           weight_s, total), 4), weight_basis=basis, applicable=rr.applicable and apply is not None,
                       apply=apply, path=self._abs(site))

    def _abs(self, site: int) -> str | None:
        s = self.trace.site(site)
        if s is None:
            return None
        return os.path.abspath(os.path.join(self.trace.meta.get("root") or os.getcwd(), s.file))

    def group_by_site(self, items: list[tuple[int, Op]]) -> dict[int, list[tuple[int, Op]]]:
        g: dict[int, list[tuple[int, Op]]] = defaultdict(list)
        for i, o in items:
            if o.site >= 0:
                g[o.site].append((i, o))
        return g

    def in_estimated(self, indices: list[int]) -> set[int]:
        own = {k.index for k in self.estimate.costs}
        return {i for i in indices if i in own}


def _shapes(ops: list[Op], n: int = 3) -> list[list[list[int]]]:
    seen: list[list[list[int]]] = []
    for o in ops:
        sig = [list(s) for s, _, _ in o.ins[:3]]
        if sig not in seen:
            seen.append(sig)
        if len(seen) >= n:
            break
    return seen


def _on_device(meta: tuple) -> bool:
    return meta[2] not in ("cpu", "meta")


def _via_library(trace: Trace, o: Op, prefixes: tuple[str, ...]) -> bool:
    s = trace.site(o)
    return s is not None and s.via is not None and s.via.startswith(prefixes)


def _cap(findings: list[Finding]) -> list[Finding]:
    """At most MAX_PER_RULE findings per rule, the heaviest first; the others are named in the last one."""
    by_rule: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_rule[f.rule].append(f)
    out = []
    for fs in by_rule.values():
        fs.sort(key=lambda f: -(f.weight_ms or 0.0))
        keep, rest = fs[:MAX_PER_RULE], fs[MAX_PER_RULE:]
        if rest:
            keep[-1].evidence["more_sites"] = [f.where for f in rest]
            keep[-1].message += f" (and {len(rest)} more line{'s' if len(rest) > 1 else ''} like it)"
        out.extend(keep)
    return out


# ============================================================================================================
# family 1: host-device synchronisation in the step
# ============================================================================================================

_LIB_BOOKKEEPING = ("torch/amp/", "torch/optim/", "torch/cuda/amp/", "torch/utils/data/", "torch/nn/utils/clip_grad")


@rule("ADV101", "value-read-in-step", "sync", "a device value read on the host in every step",
      why="""
      `.item()`, `float(t)`, `int(t)`, `bool(t)` and `if t:` copy one value from the NPU to the host: the host
      thread blocks until every operator queued before it has run (aclrtSynchronizeStream), so the host stops
      delivering operators and the NPU then idles while the host catches up. Huawei's advisor counts each
      SynchronizeStream as lost training efficiency.
      """,
      sources=("sync_stream", "acl_sync", "host_bound"),
      fix="""
      # keep the value on the device; read it every N steps, not every step
      running = running + loss.detach()          # no sync
      if step % log_every == 0:
          print((running / log_every).item())    # one sync per N steps
          running.zero_()
      """,
      example="""
      loss.backward(); opt.step()
      total += loss.item()                       # a sync every step
      """)
def check_value_read(ctx: Context) -> list[Finding]:
    items = ctx.ops_of(lambda o: o.base in ("_local_scalar_dense", "is_nonzero", "equal")
                       and bool(o.ins) and _on_device(o.ins[0]))
    out = []
    for site, group in ctx.group_by_site(items).items():
        if _via_library(ctx.trace, group[0][1], _LIB_BOOKKEEPING):
            continue  # torch's own bookkeeping (GradScaler's found_inf, a scheduler): not the user's read
        idx = [i for i, _ in group]
        n = ctx.per_step(idx)
        if n == 0:
            continue  # not in the steady steps (an evaluation, a checkpoint): not a per-step cost
        w = ctx.what_if(nosync=ctx.in_estimated(idx))
        out.append(ctx.finding("ADV101", site, f"{n:g} read{'s' if n != 1 else ''} of a device value per step",
                               {"per_step": n, "calls": len(idx), "dtype": group[0][1].ins[0][1]}, w,
                               "host and device stop overlapping at each read (estimate with and without it)"))
    return out


@rule("ADV102", "copy-to-host-in-step", "sync", "a tensor copied from the NPU to the host each step",
      why="""
      `.cpu()`, `.tolist()`, `.numpy()` and `.to("cpu")` of an NPU tensor wait for every queued operator and then
      move the data over PCIe: a synchronisation (aclrtSynchronizeStream) plus a transfer, each step.
      """,
      sources=("sync_stream", "acl_sync"),
      fix="""
      # keep metrics on the device; move them once per log interval
      preds.append(logits.argmax(-1))            # stays on the NPU
      ...
      if step % log_every == 0:
          acc = torch.cat(preds).eq(labels_all).float().mean().item()
      """,
      example="""
      preds += logits.argmax(-1).cpu().tolist()  # sync + copy each step
      """)
def check_copy_to_host(ctx: Context) -> list[Finding]:
    items = ctx.ops_of(lambda o: o.base in ("_to_copy", "copy_") and est._device_to_host(o))
    out = []
    for site, group in ctx.group_by_site(items).items():
        if _via_library(ctx.trace, group[0][1], _LIB_BOOKKEEPING):
            continue
        idx = [i for i, _ in group]
        if ctx.per_step(idx) == 0:
            continue
        nbytes = sum(est._bytes(o.ins[:1]) for _, o in group) / max(1, len(ctx.steps))
        w = ctx.what_if(nosync=ctx.in_estimated(idx))
        out.append(ctx.finding("ADV102", site, f"{ctx.per_step(idx):g} copies to the host per step, "
                               f"{nbytes / 1024:,.1f} KiB", {"per_step": ctx.per_step(idx), "bytes_per_step": nbytes,
                                                            "shapes": _shapes([o for _, o in group])}, w,
                               "host and device stop overlapping at each copy (estimate with and without it)"))
    return out


@rule("ADV103", "synchronize-in-step", "sync", "an explicit device synchronize() in every step",
      why="""
      `torch.npu.synchronize()` (or `torch.cuda.synchronize()` redirected to it) blocks the host until the NPU has
      run everything queued: the host stops delivering operators and the NPU then waits for the host. Only
      timing code needs it; Huawei's advisor reports every SynchronizeStream.
      """,
      sources=("sync_stream", "acl_sync"),
      fix="""
      # drop it from the training step; to time a step, synchronize only
      # around the timed region, or use torch.npu.Event(enable_timing=True)
      # and read elapsed_time once per N steps
      """,
      example="""
      opt.step()
      torch.cuda.synchronize()                   # every step
      """)
def check_synchronize(ctx: Context) -> list[Finding]:
    want = set(ctx.steps)
    by_site: dict[int, list[dict]] = defaultdict(list)
    for s in ctx.trace.syncs:
        if s["step"] in want and s["site"] >= 0:
            by_site[s["site"]].append(s)
    out = []
    for site, group in by_site.items():
        n = len(group) / max(1, len(ctx.steps))
        # a synchronize drains the queue: as a sync at the end of the step (estimate: the step as traced has it
        # nowhere, so its weight is the overlap it removes, at most the smaller of host and device time)
        e = ctx.estimate
        w = min(e.host_total_s, e.device_s) * min(1.0, n)
        out.append(ctx.finding("ADV103", site, f"{n:g} {group[0]['api']}() per step",
                               {"per_step": n, "api": group[0]["api"]}, w,
                               "at most the overlap of host delivery and device work it removes"))
    return out


_DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "_unique",
                             "masked_scatter", "masked_scatter_", "nonzero_numpy", "argwhere"})


def _bool_index(o: Op) -> bool:
    return o.base in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
        dt == "bool" or dt == "uint8" for _, dt, _ in o.ins[1:])


@rule("ADV104", "data-dependent-shape", "sync", "an operator whose output shape depends on the data",
      why="""
      `nonzero`, `masked_select`, `unique`, boolean-mask indexing (`x[mask]`, `x[mask] = v`) and
      `repeat_interleave` with tensor repeats produce a shape only known after the data is computed: the host
      waits for the NPU to learn it (a synchronisation), and every new result size is a new shape for the
      operators after it. msprof-analyze lists index/index_put/nonzero among the operators to replace.
      """,
      sources=("aicpu", "sync_stream", "dynamic_shape"),
      fix="""
      # keep shapes fixed: mask instead of selecting
      x = torch.where(mask, x, torch.zeros_like(x))   # not x[mask]
      loss = (per_token * mask).sum() / mask.sum()     # not x[mask].mean()
      x = x.masked_fill(~mask, 0)                      # not x[~mask] = 0
      """,
      example="""
      loss = per_token[mask].mean()   # nonzero + index: a sync, a new shape
      """)
def check_data_dependent(ctx: Context) -> list[Finding]:
    items = ctx.ops_of(lambda o: bool(o.ins) and _on_device(o.ins[0]) and (
        o.base in _DATA_DEPENDENT or _bool_index(o) or (o.base == "repeat_interleave" and len(o.ins) >= 2)))
    out = []
    for site, group in ctx.group_by_site(items).items():
        idx = [i for i, _ in group]
        if ctx.per_step(idx) == 0:
            continue
        names = Counter(o.name for _, o in group)
        w = ctx.what_if(nosync=ctx.in_estimated(idx))
        out.append(ctx.finding("ADV104", site, f"{', '.join(names)}: {ctx.per_step(idx):g} per step, output "
                               "shape known only after the data", {"per_step": ctx.per_step(idx), "ops": dict(names),
                                                                   "shapes": _shapes([o for _, o in group])}, w,
                               "host and device stop overlapping at each (estimate with and without it)"))
    return out


# ============================================================================================================
# family 2: shapes that change from step to step
# ============================================================================================================


def _signature(o: Op) -> tuple:
    return tuple(s for s, _, _ in o.ins) + tuple(s for s, _, _ in o.outs)


@rule("ADV201", "shapes-vary", "shapes", "operators see new input shapes from step to step",
      why="""
      An NPU operator is compiled (or its precompiled binary re-tiled) for the shapes it is called with: a step
      whose shapes change (sequences of varying length, a last partial batch, a growing cache) makes every
      operator after the change meet a new shape, and with jit_compile on each new shape compiles again,
      costing compile time and memory. Huawei's migration guide calls this the dynamic-shape case;
      msprof-analyze's advisor reports it.
      """,
      sources=("dynamic_shape", "dynamic_shape_advisor"),
      fix="""
      # give the model a few fixed shapes
      batch = pad_to(batch, multiple_of=64)   # or buckets: 128, 256, 512
      loader = DataLoader(ds, batch_size=B, drop_last=True)
      # and, at the top of the script, the precompiled kernels:
      torch_npu.npu.set_compile_mode(jit_compile=False)
      """,
      example="""
      for text in texts:      # each batch padded to its own longest text
          ids = tok(text, padding="longest", return_tensors="pt").input_ids
      """)
def check_shapes_vary(ctx: Context) -> list[Finding]:
    if len(ctx.steps) < 2:
        return []
    first: dict[tuple, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    order: dict[tuple, int] = {}
    for i, o in ctx.ops_of(lambda o: o.site >= 0 and not est.is_view(o) and o.base not in est.MARKERS):
        key = (o.site, o.name, o.phase)
        first[key][o.step].add(_signature(o))
        order.setdefault(key, i)
    varying = []
    for key, per in first.items():
        # the shapes vary when the steps that call this op here call it with different sets of shapes
        if len(per) > 1 and len({frozenset(v) for v in per.values()}) > 1:
            sigs = set().union(*per.values()) - set.intersection(*per.values())
            varying.append((order[key], key, sigs, per))
    if not varying:
        return []
    varying.sort()
    _, key, sigs, per = varying[0]  # the earliest op whose shapes vary: where the varying data comes in
    sites = []
    for _, k, _, _ in varying:
        if k[0] not in sites:
            sites.append(k[0])
    dims = _varying_dims(sigs)
    n_ops = len(varying)
    # weight: the first call of each op with a shape it has not met costs new_shape_ms; with shapes that keep
    # changing (a new length every few steps) that is paid again and again: per new shape, all the ops
    from ascendify.core import knowledge

    new_ms = knowledge.load("advise_facts")["assumptions"]["new_shape_ms"]["value"]
    per_shape_ms = n_ops * new_ms
    distinct = len(sigs)
    labels = [ctx.trace.label(s) for s in sites[:8]]
    msg = (f"{distinct} distinct shapes in {len(ctx.steps)} steps, varying {dims}; {n_ops} op sites on "
           f"{len(sites)} lines meet each new shape: ~{per_shape_ms:,.0f} ms the first time each appears")
    return [ctx.finding("ADV201", key[0], msg, {"distinct_shapes": distinct, "steps": len(ctx.steps),
                                                "op_sites": n_ops, "lines": labels, "dims": dims,
                                                "shapes": [[list(x) for x in sig[:3]] for sig in list(sigs)[:4]],
                                                "ms_per_new_shape": per_shape_ms},
                        None, f"{new_ms:g} ms per op the first time it meets a shape (assumption): "
                        f"{per_shape_ms:,.0f} ms per new shape, not per step")]


def _varying_dims(sigs: set) -> str:
    """Which dimension of the first tensor differs between the signatures: 'dim 1 (17, 18, 19)'."""
    firsts = [sig[0] for sig in sigs if sig and sig[0] is not None]
    if not firsts:
        return "?"
    rank = Counter(len(s) for s in firsts).most_common(1)[0][0]
    same = [s for s in firsts if len(s) == rank]
    parts = []
    for d in range(rank):
        vals = sorted({s[d] for s in same})
        if len(vals) > 1:
            shown = ", ".join(str(v) for v in vals[:5]) + (" ..." if len(vals) > 5 else "")
            parts.append(f"dim {d} ({shown})")
    return "; ".join(parts) or "rank"


@rule("ADV202", "last-partial-batch", "shapes", "a smaller last batch each epoch: a new shape",
      why="""
      A DataLoader without `drop_last=True` over a dataset whose length is not a multiple of the batch size ends
      each epoch with a smaller batch: every operator of that step meets a new shape (a compile, or a re-tiling
      of the precompiled kernel, on the NPU), once per epoch, and again in evaluation.
      """,
      sources=("dynamic_shape",),
      fix="""
      loader = DataLoader(ds, batch_size=B, shuffle=True, drop_last=True)
      """,
      example="""
      loader = DataLoader(ds, batch_size=64)   # len(ds) % 64 > 0
      """)
def check_last_partial_batch(ctx: Context) -> list[Finding]:
    out = []
    seen: set[int] = set()
    for d in ctx.trace.dataloaders:
        bs, n = d.get("batch_size"), d.get("samples") or d.get("dataset_len")
        if d["site"] in seen:
            continue
        seen.add(d["site"])
        if d.get("drop_last") or not bs or not n or n % bs == 0 or d["site"] < 0 or n < bs:
            continue
        rest = n % bs
        out.append(ctx.finding("ADV202", d["site"], f"{n:,} samples in batches of {bs}: the last batch of each "
                               f"epoch has {rest}", {"dataset_len": n, "batch_size": bs, "last_batch": rest,
                                                     "dataset": d.get("dataset")}, None,
                               "once per epoch; not part of a steady step"))
    return out


# ============================================================================================================
# family 3: operators and dtypes the NPU runs poorly
# ============================================================================================================


@rule("ADV301", "cpu-fallback-op", "placement", "an operator with no NPU kernel: it runs on the host CPU",
      why="""
      torch_npu 2.13 registers no NPU kernel for this operator (or its kernel always hands the work to the CPU):
      the framework copies its inputs to the host, runs it on the CPU and copies the results back ("CAUTION: The
      operator ... will fall back to run on the CPU. This may have performance implications"), a
      synchronisation and two transfers per call, with the AI cores idle meanwhile.
      """,
      sources=("cpu_fallback", "aicpu"),
      fix="""
      # replace the operator with an equivalent that has an NPU kernel
      # (see its entry in `ascendify migrate`'s report), or compute it
      # once outside the step
      """,
      example="""
      y = torch.special.logit(p)   # aten::logit: on the CPU (2.13)
      """)
def check_fallback(ctx: Context) -> list[Finding]:
    fb = ctx.fallback
    items = ctx.ops_of(lambda o: (o.name in fb or o.base in fb) and any(_on_device(m) for m in o.ins + o.outs))
    out = []
    for site, group in ctx.group_by_site(items).items():
        idx = ctx.in_estimated([i for i, _ in group])
        names = Counter(o.name for _, o in group)

        def as_device(k, o, idx=idx):
            if k.index not in idx:
                return k
            return est.op_cost(o, ctx.chip, ctx.trace.settings, k.index, fallback=False)

        w = ctx.what_if(change=as_device)
        from ascendify.core import knowledge

        cov = knowledge.ops_without_npu_kernel()
        apis = sorted({a for n in names for a in (cov.get(n.split(".")[0].rstrip("_")) or {}).get("python_api", [])})
        out.append(ctx.finding("ADV301", site, f"{', '.join(names)}: {ctx.per_step([i for i, _ in group]):g} calls "
                               "per step on the host CPU", {"ops": dict(names), "per_step": ctx.per_step(
                                   [i for i, _ in group]), "shapes": _shapes([o for _, o in group]),
                                   **({"python_apis": apis[:6]} if apis else {})}, w,
                               "two host-link transfers and a sync per call vs an NPU kernel (estimate)"))
    return out


@rule("ADV302", "float64-on-npu", "placement", "float64 computed on the NPU",
      why="""
      The NPU's AI cores compute in fp32, fp16 and bf16; many kernels reject float64 and the rest run it slowly
      or on the AI CPU. Huawei's advisor rule for AI CPU operators says: try to convert double type operators
      to float. A float64 usually comes from a NumPy array or a Python float turned into a tensor.
      """,
      sources=("aicpu_rules", "aicpu"),
      fix="""
      x = torch.from_numpy(arr).float()   # not the float64 array as it is
      x = torch.tensor(values, dtype=torch.float32)
      torch.set_default_dtype(torch.float32)   # if set to float64
      """,
      example="""
      w = torch.from_numpy(np.linspace(0, 1, n)).to(device)   # float64
      """)
def check_float64(ctx: Context) -> list[Finding]:
    """Name the lines where float64 starts (made from other dtypes, or read from a tensor made before the step,
    a buffer); the lines it merely spreads to are listed with the first of them."""
    items = ctx.ops_of(lambda o: o.phase != BWD and not est.is_view(o) and any(
        dt in ("float64", "complex128") and d not in ("cpu", "meta") for _, dt, d in o.ins + o.outs))
    if not items:
        return []
    origins: dict[int, list[tuple[int, Op]]] = defaultdict(list)
    spread: list[int] = []
    analysed = set(ctx.steps)
    producer: dict[tuple, int] = {}  # (id, index of the op that made it) for every tensor of the trace, in order
    made: dict[int, int] = {}
    for j, o in enumerate(ctx.trace.ops):
        for t in o.out_ids:
            made[t] = j
        if o.out_ids:
            producer[j] = j
    # who made each input of the f64 ops: one pass, remembering the latest maker of each id
    latest: dict[int, int] = {}
    wanted = {i for i, _ in items}
    inputs_made_by: dict[int, list[int | None]] = {}
    for j, o in enumerate(ctx.trace.ops):
        if j in wanted:
            inputs_made_by[j] = [latest.get(t) for t in o.in_ids]
        for t in o.out_ids:
            latest[t] = j
    for i, o in items:
        if o.site < 0 or _via_library(ctx.trace, o, ("torch/amp/", "torch/optim/")):
            continue
        f64_in = [a for a, (_, dt, _) in enumerate(o.ins) if dt in ("float64", "complex128")]
        makers = inputs_made_by.get(i, [])
        outside = any(a >= len(makers) or makers[a] is None or ctx.trace.ops[makers[a]].step not in analysed
                      for a in f64_in)
        if not f64_in or outside:
            origins[o.site].append((i, o))
        elif o.site not in spread and any(ctx.trace.ops[makers[a]].site != o.site for a in f64_in):
            spread.append(o.site)
    # a line that in some step takes float64 made at an earlier analysed step merely passes it on
    origins = defaultdict(list, {s: g for s, g in origins.items() if s not in spread})
    out = []
    for site, group in origins.items():
        idx = ctx.in_estimated([i for i, _ in group])

        def halve(k, o, idx=idx):
            return replace(k, device_s=k.device_s / 2) if k.index in idx else k

        w = ctx.what_if(change=halve)
        names = Counter(o.name for _, o in group)
        ev = {"ops": dict(names), "shapes": _shapes([o for _, o in group])}
        later = [ctx.trace.label(s) for s in spread if s not in origins]
        if later:
            ev["spreads_to"] = later[:10]
        more = f"; it spreads to {len(later)} more line{'s' if len(later) != 1 else ''}" if later else ""
        out.append(ctx.finding("ADV302", site, f"float64 starts here: {sum(names.values()) / max(1, len(ctx.steps)):g}"
                               f" ops per step ({', '.join(list(names)[:4])}){more}", ev, w,
                               "half the bytes in float32 (estimate; on the AI CPU the loss is larger)"))
        more = ""
    return out


@rule("ADV303", "integer-matmul", "placement", "a matrix multiplication in an integer dtype",
      why="""
      The Cube unit multiplies fp16/bf16 (and int8 for quantised kernels); an int32/int64 matmul does not run
      on it and goes to the vector unit or the AI CPU, far below the chip's matmul peak.
      """,
      sources=("aicpu", "data_format"),
      fix="""
      y = a.float() @ b.float()   # or count another way (bincount, one_hot)
      """,
      example="""
      counts = one_hot.long() @ weights.long()
      """)
def check_int_matmul(ctx: Context) -> list[Finding]:
    items = ctx.ops_of(lambda o: o.base in est.MATMUL_OPS and bool(o.ins) and _on_device(o.ins[0])
                       and o.ins[-1][1].startswith(("int", "uint")))
    out = []
    for site, group in ctx.group_by_site(items).items():
        idx = ctx.in_estimated([i for i, _ in group])
        t = sum(k.device_s for k in ctx.estimate.costs if k.index in idx)
        out.append(ctx.finding("ADV303", site, f"{ctx.per_step([i for i, _ in group]):g} {group[0][1].ins[0][1]} "
                               "matmuls per step", {"shapes": _shapes([o for _, o in group])}, t,
                               "its whole estimated time (no Cube peak applies to it)"))
    return out


# ============================================================================================================
# family 4: hand-written patterns one fused operator does
# ============================================================================================================


def _fused_weight(ctx: Context, matches: list[patterns.Match]) -> float:
    """Drop the matched forward ops and the backward ops credited to the same lines; add one fused kernel
    forward (and one backward when the step has a backward) moving the pattern's input and output once."""
    drop: set[int] = set()
    adds: list[est.OpCost] = []
    own = {k.index for k in ctx.estimate.costs}
    has_bwd = any(o.phase == BWD for o in ctx.trace.ops_in(ctx.step))
    for m in matches:
        ops_here = [i for i in m.ops if i in own]
        if not ops_here:
            continue
        drop.update(ops_here)
        sites = set(m.sites)
        n = 1
        for s in m.shape:
            n *= int(s)
        nbytes = 3 * n * est.DTYPE_BYTES.get(m.dtype, 4)
        t = max(nbytes / (ctx.chip.bandwidth * ctx.chip.eff_memory), ctx.chip.floor_s)
        adds.append(est.OpCost(-1, t, ctx.chip.dispatch_s, float(n), nbytes, "memory", None, False))
        if has_bwd:
            bw_ops = [k.index for k in ctx.estimate.costs if ctx.trace.ops[k.index].phase == BWD
                      and ctx.trace.ops[k.index].site in sites and k.index not in drop]
            # the backward of the matched ops: as many as their forward, at the same lines
            drop.update(bw_ops[: 2 * len(ops_here)])
            adds.append(est.OpCost(-1, 2 * t, ctx.chip.dispatch_s, float(n), 2 * nbytes, "memory", None, False))
    if matches and matches[0].kind == "attention":  # the fused kernel still does the matmuls' work
        keep = [k for k in ctx.estimate.costs if k.index in drop and k.flops > 0 and k.bound == "compute"]
        adds += [replace(k, index=-1, host_s=0.0) for k in keep]
    return ctx.what_if(drop=drop, add=adds)


def _fusion_findings(ctx: Context, kind: str, rule_id: str, describe: Callable[[patterns.Match], str]) -> list[Finding]:
    per_site: dict[int, list[patterns.Match]] = defaultdict(list)
    for s in ctx.steps:
        for m in ctx.matches(s):
            if m.kind == kind and m.anchor >= 0:
                per_site[m.anchor].append(m)
    out = []
    for site, ms in per_site.items():
        in_step = [m for m in ms if any(i in {k.index for k in ctx.estimate.costs} for i in m.ops)]
        w = _fused_weight(ctx, in_step) if in_step else None
        m0 = ms[0]
        n = ctx.per_step([m.ops[0] for m in ms])
        ops_per = len(m0.ops)
        apply = {"kind": kind, "sites": [ctx.trace.label(s) for s in m0.sites], "anchor": ctx.trace.label(site),
                 "shape": list(m0.shape), "dtype": m0.dtype, "detail": m0.detail,
                 "files_lines": [[ctx.site_info(s)[0], ctx.site_info(s)[1]] for s in m0.sites]}
        out.append(ctx.finding(rule_id, site, f"{describe(m0)}: {n:g} per step, {ops_per} ops each "
                               f"({m0.dtype} {list(m0.shape)})", {"per_step": n, "ops_each": ops_per,
                                                                  "shape": list(m0.shape), "dtype": m0.dtype,
                                                                  "lines": apply["sites"], **m0.detail}, w,
                               "the matched ops (and their backward) replaced by one fused kernel each way "
                               "moving the input and output once (estimate)", apply=apply))
    return out


@rule("ADV401", "rmsnorm-unfused", "fusion", "RMSNorm computed as separate operators",
      why="""
      x² → mean → + eps → rsqrt → x·r → ·weight is six operator deliveries forward and about twice as many
      backward, each reading and writing the activation: host-bound delivery and memory traffic. torch_npu's
      npu_rms_norm does it in one kernel (used by MindSpeed, vllm-ascend, LLaMA-Factory). nn.RMSNorm and
      F.rms_norm have no NPU kernel in torch_npu 2.13 (aten::rms_norm is composite): they run the same small
      operators.
      """,
      sources=("fused_ops", "npu_fused_ops", "host_bound"),
      fix="""
      import torch_npu
      class RMSNorm(nn.Module):
          def forward(self, x):
              y, _ = torch_npu.npu_rms_norm(x, self.weight, self.eps)
              return y
      """,
      example="""
      def forward(self, x):
          x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
          return x * self.weight
      """, applicable=True)
def check_rms_norm(ctx: Context) -> list[Finding]:
    return _fusion_findings(ctx, "rms_norm", "ADV401", lambda m: "RMSNorm as separate ops")


@rule("ADV402", "rotary-unfused", "fusion", "rotary embedding computed as separate operators",
      why="""
      x·cos + rotate_half(x)·sin is two slices, a negation, a concatenation, two multiplications and an addition
      per tensor (q and k), forward and backward. torch_npu's npu_rotary_mul computes it in one kernel; Huawei's
      training migration guide gives this exact replacement.
      """,
      sources=("rotary_guide", "npu_fused_ops", "fused_ops"),
      fix="""
      import torch_npu
      q = torch_npu.npu_rotary_mul(q, cos, sin)   # the rotate_half form
      k = torch_npu.npu_rotary_mul(k, cos, sin)
      # pairs (x[..., ::2], x[..., 1::2]) or complex freqs:
      # rotary_mode="interleave"
      """,
      example="""
      q = q * cos + rotate_half(q) * sin
      """, applicable=True)
def check_rotary(ctx: Context) -> list[Finding]:
    return _fusion_findings(ctx, "rotary", "ADV402",
                            lambda m: f"rotary embedding ({m.detail.get('mode', 'half')}) as separate ops")


@rule("ADV403", "swiglu-unfused", "fusion", "SwiGLU computed as separate operators",
      why="""
      silu(gate) · up is two operator deliveries each way reading and writing the full hidden activation.
      torch_npu's npu_swiglu computes silu(a)·b from one tensor holding [a, b]: with the gate and up projections
      fused into one Linear, the unit is one matmul and one fused kernel (MindSpeed-LLM, LLaMA-Factory).
      """,
      sources=("npu_fused_ops", "fused_ops"),
      fix="""
      import torch_npu
      # one Linear producing [gate, up] (out_features = 2 * hidden), then:
      h = torch_npu.npu_swiglu(self.w13(x), dim=-1)      # = silu(gate) * up
      """,
      example="""
      h = F.silu(self.w1(x)) * self.w3(x)
      """)
def check_swiglu(ctx: Context) -> list[Finding]:
    return _fusion_findings(ctx, "swiglu", "ADV403", lambda m: "SwiGLU as separate ops")


@rule("ADV404", "attention-unfused", "fusion", "attention written as softmax(QKᵀ)V",
      why="""
      Q·Kᵀ → scale → mask → softmax → dropout → ·V materialises the (sequence × sequence) score matrix in HBM,
      several times forward and backward, and delivers each operator separately. F.scaled_dot_product_attention
      runs torch_npu's FlashAttentionScore kernel (npu_fusion_attention), which never stores the scores.
      """,
      sources=("flash_attention_guide", "npu_fused_ops", "fused_ops"),
      fix="""
      p = self.dropout if self.training else 0.0
      y = F.scaled_dot_product_attention(q, k, v, dropout_p=p,
                                         is_causal=True)
      # or attn_mask=<bool, True = keep> for another mask
      """,
      example="""
      att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
      att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
      att = F.softmax(att, dim=-1)
      y = att @ v
      """, applicable=True)
def check_attention(ctx: Context) -> list[Finding]:
    return _fusion_findings(ctx, "attention", "ADV404", lambda m: "attention as separate ops")


@rule("ADV405", "optimizer-for-loop", "fusion", "a per-parameter optimizer update (no foreach/fused)",
      why="""
      An optimizer built with foreach=False (or one with no multi-tensor path) runs about ten operators per
      parameter tensor each step: with hundreds of tensors, thousands of small deliveries. Huawei's guide
      advises replacing native optimizers with the fused ones first ("generally provides significant
      performance benefits"); torch_npu registers AdamW's fused kernel (aten::_fused_adamw_) and the
      torch_npu.optim.NpuFused* optimizers.
      """,
      sources=("fused_ops", "host_bound"),
      fix="""
      opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
      # or torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=lr)
      # (Adam: torch_npu's _fused_adam_ falls back to the CPU: use
      # foreach=True or torch_npu.optim.NpuFusedAdam)
      """,
      example="""
      opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
      """, applicable=True)
def check_optimizer_loop(ctx: Context) -> list[Finding]:
    out = []
    opt_ops = ctx.ops_of(lambda o: True, phase=OPT)
    multi = [o for _, o in opt_ops if o.base.startswith(("_foreach_", "_fused_")) or "npu_apply_adam" in o.base]
    if multi or not opt_ops:
        return out
    for o in ctx.trace.optimizers:
        if not o.get("steps") or o["site"] < 0 or o.get("fused") or o.get("foreach"):
            continue
        tensors = o.get("tensors") or 1
        idx = [i for i, _ in opt_ops]
        per = len(idx) / max(1, len(ctx.steps))
        if per < 2 * tensors:
            continue
        mine = ctx.in_estimated(idx)
        dev = sum(k.device_s for k in ctx.estimate.costs if k.index in mine)
        nbytes = sum(k.bytes for k in ctx.estimate.costs if k.index in mine)
        fused = est.OpCost(-1, max(nbytes / 3 / (ctx.chip.bandwidth * ctx.chip.eff_memory), ctx.chip.floor_s),
                           2 * ctx.chip.dispatch_s, 0.0, nbytes // 3, "memory", None, False)
        w = ctx.what_if(drop=mine, add=[fused])
        cls = o["class"]
        fix = None
        if cls == "Adam":
            fix = RULES["ADV405"].fix.replace("torch.optim.AdamW(model.parameters(), lr=lr, fused=True)",
                                              "torch.optim.Adam(model.parameters(), lr=lr, foreach=True)")
        out.append(ctx.finding("ADV405", o["site"], f"{cls}: {per:,.0f} ops per step for {tensors} parameter "
                               f"tensors (for-loop update, {dev * 1e3:.2f} ms estimated on the device)",
                               {"optimizer": cls, "ops_per_step": per, "tensors": tensors,
                                "foreach": o.get("foreach"), "fused": o.get("fused")}, w,
                               "the per-tensor ops replaced by one fused kernel per step moving the state once "
                               "(estimate)", apply={"kind": "optimizer", "class": cls,
                                                    "site": ctx.trace.label(o["site"]),
                                                    "files_lines": [list(ctx.site_info(o["site"])[:2])]},
                               fix=fix))
    return out


# ============================================================================================================
# family 5: throughput settings
# ============================================================================================================


def _main_call_site(ctx: Context) -> int:
    """The line calling the model in the estimated step (else the most frequent call line of the steps)."""
    want = set(ctx.steps)
    calls = [c for c in ctx.trace.model_calls if c["step"] in want and c["site"] >= 0 and c.get("params", True)]
    here = [c for c in calls if c["step"] == ctx.step]
    if here:
        return here[0]["site"]
    common = Counter(c["site"] for c in calls).most_common(1)
    return common[0][0] if common else -1


@rule("ADV501", "fp32-matmuls", "throughput", "the step's matmuls run in fp32",
      why="""
      The Cube unit's peak is for 16-bit inputs; fp32 matmuls run at a fraction of it unless HF32 is on, and
      torch.npu.matmul.allow_hf32 is False by default (convolutions default to HF32). bf16 autocast
      (torch.autocast("npu", dtype=torch.bfloat16)) runs the matmuls and convolutions at the 16-bit rate; a CUDA
      program's torch.backends.cuda.matmul.allow_tf32 has no effect on an NPU.
      """,
      sources=("amp", "hf32"),
      fix="""
      with torch.autocast("npu", dtype=torch.bfloat16):  # or "cuda"
          loss = model(x, y)
      # or, keeping fp32 numerics close: torch.npu.matmul.allow_hf32 = True
      """,
      example="""
      logits = model(x)   # fp32 weights and inputs, no autocast
      """)
def check_fp32_matmuls(ctx: Context) -> list[Finding]:
    mm = [k for k in ctx.estimate.costs if k.flops > 0 and k.peak_key is not None]
    if not mm:
        return []
    fp32 = [k for k in mm if k.peak_key == "fp32"]
    t_all = sum(k.device_s for k in mm)
    t32 = sum(k.device_s for k in fp32)
    if not fp32 or t32 < 0.5 * t_all:
        return []
    fast = "bf16" if "bf16" in ctx.chip.peaks else "fp16"
    idx = {k.index for k in fp32}

    def to16(k, o):
        if k.index not in idx:
            return k
        t_c = k.flops / (ctx.chip.peak(fast) * ctx.chip.eff_compute)
        t_m = k.bytes / 2 / (ctx.chip.bandwidth * ctx.chip.eff_memory)
        return replace(k, device_s=max(t_c, t_m, ctx.chip.floor_s))

    w = ctx.what_if(change=to16)
    site = _main_call_site(ctx)
    if site < 0:
        site = ctx.trace.ops[max(fp32, key=lambda k: k.device_s).index].site
    gf = sum(k.flops for k in fp32) / 1e9
    return [ctx.finding("ADV501", site, f"{len(fp32)} fp32 matmuls/convolutions per step ({gf:,.2f} GFLOP), "
                        f"{est.share(t32, t_all):.0%} of the matmul time; no autocast, no HF32",
                        {"fp32_matmuls": len(fp32), "gflop": round(gf, 4), "share_of_matmul_time": round(
                            est.share(t32, t_all), 4), "settings": dict(ctx.trace.settings)}, w,
                        f"the same matmuls at the chip's {fast} peak (estimate)")]


@rule("ADV502", "matmul-dims-unaligned", "throughput", "matmul dimensions that are not multiples of 16",
      why="""
      The Cube unit multiplies 16×16 fractal tiles (FRACTAL_NZ: 16 rows × 32 bytes); a K or N dimension that is not
      a multiple of 16 is padded to the next tile and its inner axis is not 256-byte aligned, which CANN's matmul
      samples show moves data less efficiently. A vocabulary of 50,257 or a hidden size of 1,000 wastes part of
      every tile of the largest matmuls.
      """,
      sources=("data_format", "nd_nz_alignment"),
      fix="""
      vocab_size = 50304   # 50257 rounded up to a multiple of 64
      hidden = 1024        # not 1000; head_dim a multiple of 16
      """,
      example="""
      self.lm_head = nn.Linear(768, 50257)
      """)
def check_unaligned(ctx: Context) -> list[Finding]:
    mm = [k for k in ctx.estimate.costs if k.peak_key is not None and k.flops > 0
          and ctx.trace.ops[k.index].phase == FWD]  # forward: K, N are the model's feature sizes
    t_all = sum(k.device_s for k in mm)
    bad = []
    for k in mm:
        o = ctx.trace.ops[k.index]
        dims = _kn(o)
        if dims and any(d % 16 for d in dims if d >= 16):
            bad.append((k, o, dims))
    if not bad:
        return []
    t_bad = sum(k.device_s for k, _, _ in bad)
    if t_bad < 0.1 * t_all:
        return []
    by_site: dict[int, list] = defaultdict(list)
    for k, o, dims in bad:
        by_site[o.site].append((k, o, dims))
    out = []
    for site, group in by_site.items():
        t = sum(k.device_s for k, _, _ in group)
        if t < 0.05 * t_all or site < 0:
            continue
        waste = 0.0
        for k, _, dims in group:
            real = 1.0
            padded = 1.0
            for d in dims:
                real *= d
                padded *= -(-d // 16) * 16
            waste += k.device_s * (1 - real / padded) if k.bound == "compute" else 0.0
        dims = sorted({d for _, _, ds in group for d in ds if d % 16})
        out.append(ctx.finding("ADV502", site, f"matmuls with K/N = {', '.join(str(d) for d in dims[:4])} "
                               f"({est.share(t, t_all):.0%} of the step's matmul time)",
                               {"dims": dims, "shapes": _shapes([o for _, o, _ in group]),
                                "share_of_matmul_time": round(est.share(t, t_all), 4)}, waste,
                               "the share of each 16-wide tile left empty (estimate; the unaligned moves cost more)"))
    return out


def _kn(o: Op) -> tuple[int, ...] | None:
    ins = o.ins
    try:
        if o.base in ("mm", "bmm") and len(ins) >= 2:
            return int(ins[0][0][-1]), int(ins[1][0][-1])
        if o.base in ("addmm", "baddbmm") and len(ins) >= 3:
            return int(ins[1][0][-1]), int(ins[2][0][-1])
    except (IndexError, TypeError, ValueError):
        return None
    return None


@rule("ADV503", "dataloader-in-main-process", "throughput", "batches are loaded in the training process",
      why="""
      A DataLoader with num_workers=0 reads and collates each batch in the training process, between steps: the
      host is not delivering operators meanwhile and the NPU idles. Huawei's advisor flags a dataloader that takes
      over 10 ms a step and advises tuning num_workers and pin_memory.
      """,
      sources=("dataloader",),
      fix="""
      loader = DataLoader(ds, batch_size=B, shuffle=True, num_workers=4,
                          pin_memory=True, persistent_workers=True)
      """,
      example="""
      loader = DataLoader(ds, batch_size=B, shuffle=True)
      """)
def check_dataloader_workers(ctx: Context) -> list[Finding]:
    out = []
    waits = [s.get("data_wait_s") or 0.0 for s in ctx.trace.steps if s["step"] in set(ctx.steps)]
    wait = sorted(waits)[len(waits) // 2] if waits else 0.0
    left_out = {o["step"] for o in ctx.trace.meta.get("steps_left_out") or []}
    step_s = est.summarize(ctx.chip, ctx.step, ctx.estimate.costs, 0.0).total_s  # the step without the wait
    seen: set[int] = set()
    for d in ctx.trace.dataloaders:
        if d.get("num_workers", 0) > 0 or d["site"] < 0 or d["site"] in seen or d.get("step") in left_out:
            continue  # (a loader made in an evaluation step feeds the evaluation, not the training step)
        seen.add(d["site"])
        if wait <= 0 or wait < 0.1 * step_s:
            continue
        out.append(ctx.finding("ADV503", d["site"], f"num_workers=0: {wait * 1e3:.2f} ms per step waiting for the "
                               f"next batch (measured here) vs a step of {step_s * 1e3:.2f} ms estimated on "
                               f"{ctx.chip.name} without it", {"data_wait_ms": round(wait * 1e3, 4), "num_workers": 0,
                                                               "dataset": d.get("dataset")}, wait,
                               "the measured wait for the next batch, not hidden behind the step"))
    return out


@rule("ADV504", "h2d-copy-blocking", "throughput", "host-to-device copies that block the host",
      why="""
      Copying a batch from pageable host memory stages it through a pinned buffer and blocks the host until the
      copy is done; from pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) with non_blocking=True
      the copy is queued and overlaps with the NPU's work. Huawei's advisor advises pin_memory=True.
      """,
      sources=("pin_memory", "dataloader"),
      fix="""
      loader = DataLoader(ds, batch_size=B, pin_memory=True, num_workers=4)
      x = x.to(device, non_blocking=True)
      y = y.to(device, non_blocking=True)
      """,
      example="""
      x, y = x.to(device), y.to(device)
      """)
def check_h2d(ctx: Context) -> list[Finding]:
    items = ctx.ops_of(lambda o: o.base in ("_to_copy", "copy_") and est._crosses_host(o)
                       and not est._device_to_host(o))
    out = []
    for site, group in ctx.group_by_site(items).items():
        blocking = [(i, o) for i, o in group if not (o.extra or {}).get("non_blocking")]
        nbytes = sum(est._bytes(o.ins[:1]) for _, o in blocking) / max(1, len(ctx.steps))
        if not blocking or nbytes < 4096 or ctx.per_step([i for i, _ in blocking]) == 0:
            continue  # scalars and tiny tensors, or not in the steady steps: not worth a finding
        idx = ctx.in_estimated([i for i, _ in blocking])
        t = sum(k.device_s for k in ctx.estimate.costs if k.index in idx)
        pinned = any(d.get("pin_memory") for d in ctx.trace.dataloaders)
        out.append(ctx.finding("ADV504", site, f"{ctx.per_step([i for i, _ in blocking]):g} blocking copies "
                               f"to the device per step, {nbytes / 1024:,.1f} KiB"
                               + ("" if pinned else "; no DataLoader with pin_memory=True"),
                               {"per_step": ctx.per_step([i for i, _ in blocking]), "bytes_per_step": nbytes,
                                "non_blocking": False, "pin_memory": pinned}, t,
                               "the copies' transfer time at the host link's bandwidth, then hidden"))
    return out


# ============================================================================================================
# family 6: where the time goes
# ============================================================================================================


@rule("ADV601", "host-bound-step", "host", "a host-bound step: the NPU waits for deliveries",
      why="""
      The host delivers operators one by one; when delivering a step's operators takes longer than the NPU
      takes to run them, the NPU idles (host bound, the first cause Huawei's host-bound guide lists). Fewer,
      larger operators (the fused operators above, larger batches) and faster delivery (TASK_QUEUE_ENABLE=2,
      CPU binding, graph mode) help.
      """,
      sources=("host_bound", "task_queue"),
      fix="""
      # fewer deliveries: the fused operators above, a larger batch;
      # faster delivery: export TASK_QUEUE_ENABLE=2 (CPU_AFFINITY_CONF=1)
      # or graph mode: model = torch.compile(model, backend="npugraph_ex")
      """,
      example="""
      # a small model delivering thousands of tiny operators per step
      """)
def check_host_bound(ctx: Context) -> list[Finding]:
    e = ctx.estimate
    deliver = e.host_total_s - e.data_wait_s  # operator delivery only: data loading has its own rule
    exposed = deliver - e.device_s
    if e.total_s <= 0 or exposed < 0.5 * e.total_s * (deliver / max(e.host_total_s, 1e-12)):
        return []
    site = _main_call_site(ctx)
    if site < 0:
        return []
    return [ctx.finding("ADV601", site, f"{e.ops:,} ops per step: {deliver * 1e3:.2f} ms to deliver them vs "
                        f"{e.device_s * 1e3:.2f} ms of device work on {ctx.chip.name} (estimate)",
                        {"ops_per_step": e.ops, "delivery_ms": round(deliver * 1e3, 4),
                         "device_ms": round(e.device_s * 1e3, 4)}, exposed,
                        "the delivery time not hidden behind the device (estimate)")]


MINOR_SHARE = 0.01  # a finding weighing less than this share of the step (and MINOR_MS) is minor
MINOR_MS = 0.01


def is_minor(f: Finding) -> bool:
    return f.weight_ms is not None and (f.share or 0.0) < MINOR_SHARE and f.weight_ms < MINOR_MS


def run_all(ctx: Context) -> list[Finding]:
    """Every rule's findings, capped per rule, the heaviest first (those without a per-step weight last)."""
    found: list[Finding] = []
    for r in RULES.values():
        found.extend(r.check(ctx))
    found = _cap(found)
    found.sort(key=lambda f: (f.weight_ms is None, -(f.weight_ms or 0.0), f.rule))
    return found


def context(trace: Trace, chip: est.Chip) -> Context:
    """The context the checks run in: the steady steps, torch_npu's CPU-fallback ops (on an NPU), the estimate."""
    steps, odd = est.analysed_steps(trace)
    if odd:
        trace.meta["steps_left_out"] = odd
    fb: frozenset[str] = frozenset()
    if chip.kind == "npu":
        from ascendify.core import knowledge

        fb = knowledge.overloads_without_npu_kernel()
    step = est.steady_step(trace) if trace.steps else steps[0]
    e = est.estimate_step(trace, chip, step, fallback_names=fb)
    return Context(trace, chip, fb, steps, step, e)


__all__ = ["RULES", "Context", "Rule", "context", "explain", "run_all", "FWD"]
