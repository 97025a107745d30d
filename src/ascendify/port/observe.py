"""Discovery at run time: what a training (or inference) program is made of, found by watching it run.

``ascendify port`` runs the user's own command twice (the original under ``run --to cpu``, the migrated copy on
the target) with this observer switched on by environment variables. It names nothing by reading the code; it
watches three things the program cannot avoid doing:

* **module calls**: a call of an ``nn.Module`` made outside any other module call is a *root* call. A root module
  with parameters is a *model* (a GAN has two, an EMA copy or a frozen teacher one more); one without (a loss
  module, an augmentation) is noted by its class only. At a model's first call the observer keeps its inputs (the
  first batch, as the model received them, on the CPU), a CPU copy of the model with the weights it had then,
  the autocast policy in force, and the batch size (the first dimension of the first tensor input);
* **backward**: the tensor ``backward()`` is called on is the loss (its value is recorded, divided by a
  ``GradScaler``'s scale where one scaled it);
* **optimizer steps** (``torch.optim`` global hooks): which optimizers, over which models' parameters, how often.

A *step* is an optimizer step of the first optimizer that stepped (a GAN's iteration steps two optimizers: the
step ends when each has stepped), or a ``backward()`` where the program updates its parameters by hand. After
``ASCENDIFY_OBSERVE_STEPS`` steps (or ``ASCENDIFY_OBSERVE_SECONDS`` of run time) the program is stopped wherever it
is (its loop, ``max_iters``, epochs) by a :class:`StopRun` (a ``SystemExit`` with status 0), and the findings (a
:class:`~ascendify.port.observation.Observation`) are written to ``DIR/observe.json`` (``observe.rankN.json`` on
rank N > 0), the models to ``DIR/model-K.pkl`` (:mod:`ascendify.port.snapshot`), the batches to ``DIR/batch-K.pt``.

Cost: the module hook is one Python call per module call, removed after the second step (the later steps run at
the program's own speed). The observer's own reads (a loss, an output) are ascendify's (``tool_calls``).

``ASCENDIFY_OBSERVE_OVERFLOW=1`` (``port --overflow``, the migrated run only) also runs the whole program under
:class:`ascendify.precision.overflow.OverflowWatch` in record mode (every aten call, forward and backward, the
optimizer and ``GradScaler`` included) and writes ``DIR/overflow.json`` (``overflow.rankN.json``): the watch's
summary, each finding's observed step (``iteration``) and paths inside the run's tree made relative to it. That
run is then slower (the watch's cost) and ``torch.compile`` does not compile under it (Dynamo skips frames while a
``TorchDispatchMode`` is active).
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

from ascendify.auto.record import tool_calls
from ascendify.port import seen, snapshot
from ascendify.port.alarm import Alarm

if TYPE_CHECKING:
    from ascendify.port.observation import Observation

ENV_DIR = "ASCENDIFY_OBSERVE"
ENV_STEPS = "ASCENDIFY_OBSERVE_STEPS"
ENV_SECONDS = "ASCENDIFY_OBSERVE_SECONDS"
ENV_SEED = "ASCENDIFY_OBSERVE_SEED"
ENV_ROOT = "ASCENDIFY_OBSERVE_ROOT"
ENV_OVERFLOW = "ASCENDIFY_OBSERVE_OVERFLOW"
DISCOVERY_STEPS = 2  # the module hook stays on for this many steps (every model of an iteration is seen)
MAX_SNAPSHOT_PARAMS = 300_000_000  # larger models are described, not copied
MAX_OUTPUT_CALLS = 1000  # root-call output statistics kept per model (the curve of an inference-only program)


class StopRun(SystemExit):
    """Raised inside the program when its step budget is spent: ends it like ``sys.exit(0)``."""

    def __init__(self, reason: str):
        super().__init__(0)
        self.reason = reason


_ACTIVE: Observer | None = None


def active() -> Observer | None:
    return _ACTIVE


def install_from_env(environ: dict[str, str] | None = None) -> Observer | None:
    """Switch the observer on when ``ASCENDIFY_OBSERVE`` names a folder (once per process; the main process of a
    program only: a DataLoader worker or any other child started later has no business writing)."""
    global _ACTIVE
    env = os.environ if environ is None else environ
    out = env.get(ENV_DIR)
    if not out or _ACTIVE is not None:
        return _ACTIVE
    owner = env.get("ASCENDIFY_OBSERVE_PID")
    if owner and owner != str(os.getpid()):
        return None
    os.environ["ASCENDIFY_OBSERVE_PID"] = str(os.getpid())  # children inherit it and stay quiet

    def _int(name: str, default: int) -> int:
        try:
            return int(env.get(name) or default)
        except ValueError:
            return default

    def _float(name: str) -> float | None:
        try:
            return float(env[name]) if env.get(name) else None
        except ValueError:
            return None

    _ACTIVE = Observer(out, steps=_int(ENV_STEPS, 0) or None, seconds=_float(ENV_SECONDS), seed=_int(ENV_SEED, 0),
                       root=env.get(ENV_ROOT) or os.getcwd(), overflow=env.get(ENV_OVERFLOW) == "1")
    _ACTIVE.install()
    return _ACTIVE


def finish_active(exit_code: int | None = None, error: BaseException | None = None) -> None:
    """Write the findings of the running observer (if any) and switch it off."""
    global _ACTIVE
    obs, _ACTIVE = _ACTIVE, None
    if obs is not None:
        obs.finish(exit_code, error)


class _Model:
    """What is known of one root module."""

    def __init__(self, index: int, module: Any, name: str | None):
        self.index = index
        self.module = module
        self.name = name
        self.calls = 0
        self.first_call: dict[str, Any] = {}
        self.snapshot: Any = None
        self.snapshot_note: str | None = None
        self.batch: Any = None
        self.outputs: list[dict[str, float]] = []
        self.wrapper: str | None = None  # DistributedDataParallel, DataParallel, torch.compile's OptimizedModule
        self.trained = False  # called in training mode with gradients on, at least once while watched
        self.defined_at: str | None = None  # asked at the first call: a class of the script's __main__ is gone later


class Observer:
    def __init__(self, out_dir: str, *, steps: int | None, seconds: float | None, seed: int, root: str,
                 overflow: bool = False):
        self.out = out_dir
        self.overflow = overflow
        self._watch: Any = None  # the OverflowWatch with overflow on
        self._step_calls: list[int] = []  # with overflow on: the watch's call count at each step's end
        self.steps = steps
        self.seconds = seconds
        self.seed = seed
        self.root = os.path.abspath(root)
        self.rank = seen.rank()
        self.t0 = time.perf_counter()
        self.models: dict[int, _Model] = {}  # id(module) -> model
        self.functions: dict[str, int] = {}  # param-less root modules: class -> calls
        self.optimizers: dict[int, dict[str, Any]] = {}  # id(optimizer) -> facts
        self._opt_order: list[int] = []
        self.iterations: list[dict[str, Any]] = []
        self._losses: list[float] = []
        self.backwards = 0
        self.loss_fn: str | None = None
        self.scaler = False
        self._scaled: dict[int, float] = {}  # id(scaled loss) -> unscaled value
        self._depth = 0
        self._iter_t = None
        self._hooked = False
        self._handles: list[Any] = []
        self.stop_reason: str | None = None
        self.notes: list[str] = []
        self.random_draws: dict[str, dict[str, Any]] = {}  # api -> {device, calls, first_at}
        self._patches = None
        self._first_call_t: float | None = None
        self.optimizers_built: list[str] = []  # every torch.optim optimizer constructed, stepped or not
        self._alarm = Alarm(lambda: self._stop(self._budget_reason()))
        self._progress_t = 0.0  # when progress.json was last written

    # -- switching on and off ----------------------------------------------------------------------------------

    def install(self) -> None:
        import torch

        from ascendify.core.patching import Patches

        random.seed(self.seed)
        try:
            import numpy as np

            np.random.seed(self.seed)
        except ImportError:
            pass
        with tool_calls():  # seeds torch.cuda's generators too: under redirection that is no call of the user's
            torch.manual_seed(self.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        self._patches = Patches()
        self._grad_enabled = torch.is_grad_enabled  # asked at every watched root call: no import there
        nn = torch.nn.Module
        orig_call = nn.__call__
        obs = self

        def __call__(mod, *args, **kwargs):  # noqa: N807 (the method it stands for)
            if obs._depth or not obs._hooked:
                return orig_call(mod, *args, **kwargs)
            obs._depth = 1
            try:
                model = obs._root_call(mod, args, kwargs)
                out = orig_call(mod, *args, **kwargs)
                if model is not None:
                    obs._root_output(model, out)
                return out
            finally:
                obs._depth = 0

        self._patches.set(nn, "__call__", __call__)
        self._hooked = True
        orig_backward = torch.autograd.backward

        def backward(tensors, *args, **kwargs):
            obs._on_backward(tensors)
            return orig_backward(tensors, *args, **kwargs)

        self._patches.set(torch.autograd, "backward", backward)  # Tensor.backward calls it too
        orig_init = torch.optim.Optimizer.__init__

        def optimizer_init(opt, *args, **kwargs):
            orig_init(opt, *args, **kwargs)
            if type(opt).__module__.split(".")[0] != "ascendify":
                obs.optimizers_built.append(type(opt).__name__)

        self._patches.set(torch.optim.Optimizer, "__init__", optimizer_init)
        try:
            from torch.amp import GradScaler

            orig_scale = GradScaler.scale

            def scale(scaler, outputs):
                out = orig_scale(scaler, outputs)
                if scaler.is_enabled():  # GradScaler(enabled=False) is a no-op (nanoGPT's under bf16)
                    obs.scaler = True
                if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
                    with tool_calls():  # our read of the loss
                        obs._scaled[id(out)] = float(outputs.detach().float())
                return out

            self._patches.set(GradScaler, "scale", scale)
        except ImportError:
            pass
        self._patch_random(torch)
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(self._pre_step))
        self._handles.append(register_optimizer_step_post_hook(self._post_step))
        self._arm_timer()  # again when the program starts (program_started), if the tool tells
        if self.overflow:  # last: the observer's own set-up is not watched
            from ascendify.precision.overflow import OverflowWatch

            self._watch = OverflowWatch("record").start()

    def _arm_timer(self) -> None:
        """``--time-budget``: the alarm (:mod:`ascendify.port.alarm`) for what is left of the budget."""
        if self.seconds is not None:
            self._alarm.arm(self.seconds - self._elapsed())

    def program_started(self) -> None:
        """The program's own code starts now (``ascendify run``/``emulate`` say so after their set-up): the
        budget counts from here."""
        self.t0 = time.perf_counter()
        self._arm_timer()

    def _budget_reason(self) -> str:
        done = len(self.iterations)
        return (f"time budget of {self.seconds:g} s spent" if done else
                f"time budget of {self.seconds:g} s spent before the first step")

    def _patch_random(self, torch) -> None:
        """Random draws made on an accelerator use its generator, the reference run's the CPU's: the seeds cannot
        make them agree. Count them, with the first place in the user's code (a meta tensor draws nothing)."""

        def on_draw(api: str, dev: str) -> None:
            if dev not in ("cpu", "meta"):
                self._random_draw(api, dev)

        seen.patch_random_draws(self._patches, torch, on_draw)

    def _random_draw(self, api: str, device: str) -> None:
        if seen.in_compiler():  # torch.compile's own draws (inductor's pattern tracing), not the program's
            return
        entry = self.random_draws.get(api)
        if entry is None:
            self.random_draws[api] = entry = {"api": api, "device": device, "calls": 0,
                                              "first_at": seen.user_site(self.root)}
        entry["calls"] += 1

    def _unhook_modules(self) -> None:
        self._hooked = False  # the wrapper stays in place (undone at finish) but does nothing but call through

    def uninstall(self) -> None:
        self._alarm.disarm()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._patches is not None:
            self._patches.restore()
            self._patches = None

    # -- events ------------------------------------------------------------------------------------------------

    def _elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _root_call(self, mod: Any, args: tuple, kwargs: dict) -> _Model | None:
        key = id(mod)
        model = self.models.get(key)
        if model is None:
            params = list(mod.parameters())
            if not params:
                name = type(mod).__name__
                self.functions[name] = self.functions.get(name, 0) + 1
                return None
            model = _Model(len(self.models), seen.unwrap(mod), seen.bound_name(mod, sys._getframe(2)))
            if model.module is not mod:
                model.wrapper = type(mod).__name__
            self.models[key] = model
            with tool_calls(), self._alarm.held():  # the batch and the model copied: our work, not the program's
                self._first_call(model, args, kwargs, params)
        model.calls += 1
        if mod.training and self._grad_enabled():
            model.trained = True
        return model

    def _first_call(self, model: _Model, args: tuple, kwargs: dict, params: list) -> None:
        import torch
        from torch.utils._pytree import tree_flatten, tree_map

        if self._first_call_t is None:
            self._first_call_t = self._elapsed()
        mod = model.module
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        dev = tensors[0].device.type if tensors else (params[0].device.type if params else "cpu")
        info: dict[str, Any] = {
            "t": round(self._elapsed(), 4),
            "device": dev,
            "training": bool(mod.training),
            "grad_enabled": torch.is_grad_enabled(),
            "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in tensors[:8]],
            "batch_size": seen.batch_size(mod, tensors),
            "autocast": seen.autocast_state(dev),
            "param_dtype": str(params[0].dtype).replace("torch.", ""),
        }
        model.first_call = info
        model.defined_at = seen.defined_at(type(mod), self.root)
        try:
            model.batch = tree_map(lambda x: x.detach().to("cpu").clone() if isinstance(x, torch.Tensor) else x,
                                   (args, kwargs))
        except Exception as e:  # noqa: BLE001 (an input that cannot be copied: the batch is not kept)
            self.notes.append(f"first batch of {type(mod).__name__} not kept: {type(e).__name__}: {e}")
        n = sum(p.numel() for p in params)
        if n > MAX_SNAPSHOT_PARAMS:
            model.snapshot_note = f"{n:,} parameters: too large to copy for lockstep"
            return
        try:
            # a cloudpickle round trip, not deepcopy: a model holding a lambda over its own submodules (minGPT's
            # Block.mlpf) keeps calling the copy's submodules, not the live model's
            snap = snapshot.copy_by_value(mod, self.root)
            snap.to("cpu")
            model.snapshot = snap
        except Exception as e:  # noqa: BLE001
            model.snapshot_note = f"could not copy the model: {type(e).__name__}: {e}"

    def _root_output(self, model: _Model, out: Any) -> None:
        if len(model.outputs) >= MAX_OUTPUT_CALLS:
            return
        import torch
        from torch.utils._pytree import tree_flatten

        flat, _ = tree_flatten(out)
        t = next((x for x in flat if isinstance(x, torch.Tensor) and x.is_floating_point()), None)
        if t is None:
            return
        with torch.no_grad(), tool_calls(), self._alarm.held():  # our read, not the user's (no sync for advise)
            v = t.detach().float()
            model.outputs.append({"output_mean": float(v.mean()), "output_abs_mean": float(v.abs().mean())})

    def _on_backward(self, tensors: Any) -> None:
        import torch

        self._check_budget_before_backward()
        if not self.optimizers and self._losses:  # no optimizer (yet): the last backward was a step
            self._end_iteration(by="backward")
        self.backwards += 1
        t = tensors if isinstance(tensors, torch.Tensor) else (
            tensors[0] if isinstance(tensors, (list, tuple)) and tensors and isinstance(tensors[0], torch.Tensor)
            else None)
        if t is None or t.numel() != 1:
            return
        value = self._scaled.pop(id(t), None)
        if value is None:
            with tool_calls():  # our read of the loss, not the user's
                value = float(t.detach().float())
        self._scaled.clear()
        self._losses.append(value)
        fn = type(t.grad_fn).__name__ if t.grad_fn is not None else None
        if self.loss_fn is None:
            self.loss_fn = fn

    def _check_budget_before_backward(self) -> None:
        # the hand-updated program: the step budget counts backwards; stop before one more
        if self.optimizers or self.steps is None:
            self._check_time()
            return
        if self.backwards >= self.steps:
            self._stop(f"{self.steps} steps done")
        self._check_time()

    def _check_time(self) -> None:
        if self.seconds is not None and self._elapsed() >= self.seconds:
            self._stop(self._budget_reason())

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        key = id(opt)
        if key not in self.optimizers:
            self._opt_order.append(key)
            self.optimizers[key] = {"class": type(opt).__name__, "steps": 0, "params": seen.opt_params(opt), "losses": [],
                                    "param_ids": {id(p) for g in opt.param_groups for p in g["params"]},
                                    "lr": seen.lr(opt), "index": len(self.optimizers)}
            if len(self.optimizers) == 1 and self.iterations:
                # steps were counted by backward until the first optimizer showed up: count them again
                self._losses = [x for it in self.iterations for x in it["losses"]] + self._losses
                self.iterations.clear()
                self._step_calls.clear()
        elif key == self._opt_order[0] and self.steps is not None:
            lead = self.optimizers[key]["steps"]
            if lead >= self.steps:  # every other optimizer has had its chance in the last iteration
                self._stop(f"{self.steps} steps done")
        self._check_time()

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        facts = self.optimizers.get(id(opt))
        if facts is None:
            return
        facts["steps"] += 1
        facts["losses"].append(self._losses)  # a backward's loss belongs to the optimizer step that follows it
        self._losses = []
        lead = self.optimizers[self._opt_order[0]]
        if id(opt) == self._opt_order[0]:
            self._end_iteration(by="optimizer")
        if self.steps is not None and lead["steps"] >= self.steps and all(
                f["steps"] >= self.steps for f in self.optimizers.values()):
            self._stop(f"{self.steps} steps done")

    def _end_iteration(self, by: str) -> None:
        now = self._elapsed()
        start = self._iter_t if self._iter_t is not None else (self._first_call_t or 0.0)
        self._iter_t = now
        losses: list[float] = []
        if by == "backward":
            losses, self._losses = self._losses, []
        self.iterations.append({"step": len(self.iterations), "t": round(now, 4),
                                "seconds": round(now - start, 6), "losses": losses, "by": by})
        if self._watch is not None:
            self._step_calls.append(self._watch.calls)
        if len(self.iterations) >= DISCOVERY_STEPS:
            self._unhook_modules()
        if now - self._progress_t >= 1.0 or len(self.iterations) == 1:
            self._write_progress(now)

    def _write_progress(self, now: float) -> None:
        """``progress.json`` (rank 0): the steps made so far, at most once a second, for ``port`` to say while it
        waits."""
        self._progress_t = now
        if self.rank != 0:
            return
        try:
            from ascendify.core.fileio import write_atomic

            write_atomic(os.path.join(self.out, "progress.json"),
                         f'{{"steps": {len(self.iterations)}, "seconds": {now:.2f}}}\n')
        except OSError:
            pass

    def _stop(self, reason: str) -> None:
        self._alarm.disarm()
        self.stop_reason = reason
        raise StopRun(reason)

    # -- the findings ----------------------------------------------------------------------------------------

    def findings(self, exit_code: int | None, error: BaseException | None) -> Observation:
        """What the run showed, as the typed :class:`~ascendify.port.observation.Observation`."""
        from ascendify.port.observation import (
            FirstCall,
            Iteration,
            LossSeries,
            ModelSeen,
            Observation,
            OptimizerSeen,
            Output,
            RandomDraw,
        )

        models = []
        for m in self.models.values():
            params = list(m.module.parameters())
            owned = {id(p) for p in params}
            models.append(ModelSeen(
                index=m.index, cls=type(m.module).__name__,
                qualname=f"{type(m.module).__module__}.{type(m.module).__qualname__}", name=m.name,
                defined_at=m.defined_at, trained=m.trained, params=sum(p.numel() for p in params),
                trainable=sum(p.numel() for p in params if p.requires_grad), calls_seen=m.calls,
                optimizers=[f["index"] for f in self.optimizers.values() if f["param_ids"] & owned],
                first_call=FirstCall.from_dict(m.first_call) if m.first_call else None,
                outputs=[Output(**o) for o in m.outputs], snapshot_note=m.snapshot_note, wrapper=m.wrapper))
        if self.optimizers and self.stop_reason is None and len(self.optimizers) > 1:
            # stopped from outside (Ctrl-C, a crash) between one optimizer's step and another's: the last steps
            # are not whole, and are left out
            whole = min(f["steps"] for f in self.optimizers.values())
            del self.iterations[whole:]
        if self.optimizers:  # step k's losses: those of every optimizer's step k, in the order they first stepped
            for k, it in enumerate(self.iterations):
                it["losses"] = [x for key in self._opt_order for x in (
                    self.optimizers[key]["losses"][k] if k < len(self.optimizers[key]["losses"]) else [])]
        series = []  # which optimizer's (and so which model's) loss each history column is
        for key in self._opt_order:
            f = self.optimizers[key]
            owners = [m.label for m in models if f["index"] in m.optimizers]
            width = max((len(x) for x in f["losses"]), default=0)
            for k in range(width):  # a DCGAN's D step has two backward()s (real, fake): backward k of width
                n = len(series)
                series.append(LossSeries(series="loss" if n == 0 else f"loss_{n + 1}", optimizer=f["class"],
                                         optimizer_index=f["index"], models=owners, backward=k + 1, of=width))
        stopped = self.stop_reason or ("interrupted" if isinstance(error, KeyboardInterrupt) else
                                       "error" if error is not None else "ended")
        return Observation(
            rank=self.rank, seed=self.seed, steps_asked=self.steps, seconds_asked=self.seconds, stopped=stopped,
            exit_code=exit_code,
            error=f"{type(error).__name__}: {error}" if error is not None and not isinstance(error, SystemExit)
            else None,
            wall_seconds=round(self._elapsed(), 4), first_model_call_at=self._first_call_t,
            step_unit="optimizer step" if self.optimizers or self.optimizers_built else (
                "backward" if self.backwards else None),
            backwards=self.backwards, optimizers_built=self.optimizers_built,
            training=bool(self.optimizers or self.optimizers_built or self.backwards),
            loss_fn=self.loss_fn, grad_scaler=self.scaler,
            iterations=[Iteration(**it) for it in self.iterations], models=models, functions=self.functions,
            optimizers=[OptimizerSeen(cls=f["class"], steps=f["steps"], params=f["params"], lr=f["lr"],
                                      index=f["index"]) for f in self.optimizers.values()],
            loss_series=series, notes=self.notes,
            random_draws=[RandomDraw(**d) for d in self.random_draws.values()])

    def finish(self, exit_code: int | None, error: BaseException | None = None) -> dict[str, Any]:
        """Switch off, write ``observe.json`` (the models and batches beside it on rank 0; ``overflow.json`` with
        the watch on) and return what was written (the observation's JSON form)."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
        self.uninstall()
        if not self.optimizers and self._losses and (self.steps is None or len(self.iterations) < self.steps):
            self._end_iteration(by="backward")  # the last hand-made update
        found = self.findings(exit_code, error)
        try:
            os.makedirs(self.out, exist_ok=True)
            suffix = "" if self.rank == 0 else f".rank{self.rank}"
            if self.rank == 0:
                snapshot.save_models(found, self.models.values(), self.out, self.root)
            from ascendify.core.fileio import write_atomic
            from ascendify.report import dumps_json

            write_atomic(os.path.join(self.out, f"observe{suffix}.json"), dumps_json(found.to_dict()) + "\n")
            if watch is not None:
                write_atomic(os.path.join(self.out, f"overflow{suffix}.json"),
                             dumps_json(self.overflow_summary(watch, found)) + "\n")
        except Exception as e:  # noqa: BLE001 (the user's run must never fail because of us)
            print(f"ascendify: could not write the run's findings to {self.out}: {e}", file=sys.stderr)
        return found.to_dict()

    def overflow_summary(self, watch: Any, found: Observation) -> dict[str, Any]:
        """The watch's summary (the fields of ``dump --overflow``'s overflow.json) for this run: each finding gets
        the observed step it fell in (``iteration``, 0-based: the steps whole before it; the set-up before the
        first step counts as step 0), and paths inside the run's tree become relative to it."""
        import bisect

        s = watch.summary()
        for f in s["findings"]:  # the watch's call count at each step's end places a call in its step
            f["iteration"] = bisect.bisect_right(self._step_calls, f["call"])
            f["file"] = self._in_root(f.get("file"))
        for sk in s["skipped_steps"]:
            where = sk.get("where") or {}
            if where.get("file"):
                where["file"] = self._in_root(where["file"])
        return {"schema": "ascendify.overflow/1", "rank": self.rank, "steps_seen": len(self.iterations),
                "stopped": found.stopped, "exit_code": found.exit_code, **s}

    def _in_root(self, path: str | None) -> str | None:
        if not path:
            return path
        p = os.path.abspath(path)
        return os.path.relpath(p, self.root) if p.startswith(self.root + os.sep) else path



# -- helpers ---------------------------------------------------------------------------------------------------


