"""Discovery at run time (ascendify.port.observe), in this process: the observer is switched on around a small
training loop and must find the models, the optimizers, the loss, and stop the loop after the asked steps."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

from ascendify.port import observe


def _observer(tmp_path, steps):
    obs = observe.Observer(str(tmp_path), steps=steps, seconds=None, seed=0, root=str(tmp_path))
    obs.install()
    return obs


def test_one_optimizer_stops_after_the_asked_steps_and_names_the_model(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    done = 0
    obs = _observer(tmp_path, steps=3)
    try:
        with pytest.raises(observe.StopRun):
            for _ in range(100):
                x = torch.randn(5, 4)
                loss = loss_fn(model(x), torch.zeros(5, 2))
                opt.zero_grad()
                loss.backward()
                opt.step()
                done += 1
    finally:
        data = obs.finish(0)
    assert done == 2  # the third step's update ran, then the loop was stopped inside opt.step()
    assert [len(it["losses"]) for it in data["iterations"]] == [1, 1, 1]
    assert data["stopped"] == "3 steps done" and data["step_unit"] == "optimizer step"
    (m,) = data["models"]  # the loss module has no parameters: a function, not a model
    assert m["class"] == "Sequential" and m["params"] == sum(p.numel() for p in model.parameters()) == 58
    assert m["optimizers"] == [0] and m["first_call"]["batch_size"] == 5 and m["name"] == "model"
    assert data["functions"] == {"MSELoss": 1} or data["functions"].get("MSELoss", 0) >= 1
    assert data["optimizers"][0]["class"] == "SGD" and data["optimizers"][0]["params"] == 58
    assert data["loss_fn"] == "MseLossBackward0"
    on_disk = json.loads((tmp_path / "observe.json").read_text())
    assert on_disk["models"][0]["file"] == "model-0.pkl" and (tmp_path / "batch-0.pt").is_file()
    # everything it patched is back
    assert nn.Module.__call__ is observe_original_call() and torch.autograd.backward.__module__ == "torch.autograd"


def observe_original_call():
    return nn.Module.__dict__["__call__"]


def test_two_optimizers_finish_their_step_before_the_stop(tmp_path):
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    og, od = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
    steps = {"g": 0, "d": 0}
    obs = _observer(tmp_path, steps=2)
    try:
        with pytest.raises(observe.StopRun):
            for _ in range(50):
                fake = g(torch.randn(3, 2))
                ld = d(fake.detach()).mean()
                od.zero_grad()
                ld.backward()
                od.step()
                steps["d"] += 1
                lg = -d(fake).mean()
                og.zero_grad()
                lg.backward()
                og.step()
                steps["g"] += 1
    finally:
        data = obs.finish(0)
    assert steps == {"d": 2, "g": 1}  # stopped inside the generator's second step, after its update
    assert [len(it["losses"]) for it in data["iterations"]] == [2, 2]
    assert sorted(m["params"] for m in data["models"]) == [3, 6]
    assert {o["steps"] for o in data["optimizers"]} == {2}


def test_updates_by_hand_count_backwards_as_steps(tmp_path):
    model = nn.Linear(3, 1)
    obs = _observer(tmp_path, steps=4)
    n = 0
    try:
        with pytest.raises(observe.StopRun):
            for _ in range(50):
                loss = model(torch.randn(2, 3)).pow(2).mean()
                model.zero_grad()
                loss.backward()
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-0.1)
                n += 1
    finally:
        data = obs.finish(0)
    assert n == 4 and len(data["iterations"]) == 4 and data["step_unit"] == "backward"
    assert data["models"][0]["optimizers"] == []


def test_an_inference_program_keeps_the_output_curve(tmp_path):
    model = nn.Linear(3, 2).eval()
    obs = _observer(tmp_path, steps=5)
    with torch.no_grad():
        outs = [model(torch.full((1, 3), float(i))) for i in range(4)]
    data = obs.finish(0)
    assert data["iterations"] == [] and data["step_unit"] is None
    m = data["models"][0]
    assert [round(o["output_mean"], 5) for o in m["outputs"]] == [round(float(o.mean()), 5) for o in outs]
    assert m["first_call"]["grad_enabled"] is False and m["first_call"]["training"] is False


def test_a_grad_scaler_loss_is_recorded_unscaled(tmp_path):
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    obs = _observer(tmp_path, steps=None)
    loss = model(torch.ones(1, 2)).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    data = obs.finish(0)
    assert data["grad_scaler"] is True
    assert data["iterations"][0]["losses"] == [pytest.approx(float(loss.detach()))]


def test_random_draws_off_the_cpu_are_counted_with_their_place(tmp_path):
    obs = _observer(tmp_path, steps=None)
    try:
        torch.rand(3)  # on the CPU: the reference run draws the same numbers
        for _ in range(3):  # any device but the CPU has a generator of its own (this torch has no CUDA: the
            with pytest.raises((RuntimeError, AssertionError)):  # draw is counted, then refused by torch)
                torch.rand(3, device="cuda")
        torch.rand(3, device="meta")  # a meta tensor (FSDP2 builds its model there) draws nothing
        torch.nn.init.uniform_(torch.empty(2, device="meta"))
        torch.nn.functional.dropout(torch.ones(2, device="meta"), p=0.5, training=True)
        torch.nn.functional.dropout(torch.ones(2), p=0.5, training=False)  # no draw
    finally:
        data = obs.finish(0)
    draws = {d["api"]: d for d in data["random_draws_on_device"]}
    assert set(draws) == {"torch.rand"} and draws["torch.rand"]["calls"] == 3
    assert draws["torch.rand"]["device"] == "cuda" and draws["torch.rand"]["first_at"].startswith("test_observe.py:")
    assert torch.rand.__module__ != __name__  # unpatched again


def test_a_time_budget_stops_an_evaluation_loop_before_the_first_step(tmp_path):
    # a training program that evaluates first (nanoGPT's estimate_loss): the budget stops it wherever it is, and
    # what it saw is no inference program: no output curve stands in for the missing steps
    import time

    from ascendify.port.observation import Observation

    obs = observe.Observer(str(tmp_path), steps=5, seconds=0.3, seed=0, root=str(tmp_path))
    obs.install()  # as in a run: before the program builds anything
    # the budget counts from the program's start, as `ascendify run` says it (install's deterministic mode imports
    # torch._inductor.config in torch 2.13: 0.8 s, in a process that had not imported it)
    obs.program_started()
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    calls = 0
    t0 = time.monotonic()
    try:
        with pytest.raises(observe.StopRun) as stop:
            model.eval()
            with torch.no_grad():
                while time.monotonic() - t0 < 20:  # far past the budget if nothing stops it
                    model(torch.randn(4, 3))
                    calls += 1
                    time.sleep(0.01)
            opt.step()
    finally:
        data = obs.finish(0)
    assert time.monotonic() - t0 < 5 and calls > 3
    assert stop.value.reason == data["stopped"] == "time budget of 0.3 s spent before the first step"
    assert data["training"] is True and data["optimizers_built"] == ["AdamW"] and data["iterations"] == []
    hist = Observation.from_dict(data).history()
    assert "output_mean" not in hist and hist["step"] == []
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is gone with the observer


def test_each_loss_column_names_its_backward_and_optimizer(tmp_path):
    # a DCGAN's D step calls backward() twice (real, fake) before its optimizer steps; G's once
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    og, od = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
    obs = _observer(tmp_path, steps=2)
    try:
        with pytest.raises(observe.StopRun):
            for _ in range(10):
                od.zero_grad()
                d(torch.randn(3, 2)).mean().backward()
                fake = g(torch.randn(3, 2))
                d(fake.detach()).mean().backward()
                od.step()
                og.zero_grad()
                (-d(fake).mean()).backward()
                og.step()
    finally:
        data = obs.finish(0)
    s = [(x["series"], x["optimizer_index"], x["backward"], x["of"]) for x in data["loss_series"]]
    assert s == [("loss", 0, 1, 2), ("loss_2", 0, 2, 2), ("loss_3", 1, 1, 1)]
    assert [x["models"] for x in data["loss_series"]] == [["d"], ["d"], ["g"]]
    from ascendify.port.stages.train import series_text

    assert series_text(data["loss_series"][2]) == "loss_3: the backward() before optimizer 2 (Adam).step(), of g"


def test_the_alarm_waits_for_the_tools_own_work():
    """The budget's alarm does not ring inside the tool's own work (a model's first call reads its source with
    inspect, whose parser turns an exception from a signal handler into a SystemError): it rings as that ends."""

    from ascendify.port.alarm import Alarm

    class Spent(Exception):
        pass

    def spent():
        raise Spent

    import signal

    before = signal.signal(signal.SIGALRM, signal.SIG_DFL)  # an earlier test's observer left its handler
    try:
        _alarm_waits(Alarm(spent), Spent)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _alarm_waits(alarm, Spent) -> None:
    import time

    inside = []
    with pytest.raises(Spent):
        with alarm.held():
            alarm.arm(0.01)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.1:
                pass
            inside.append("done")  # not stopped in the middle
    assert inside == ["done"] and not alarm.armed
    alarm.arm(0.01)  # and it still rings at once outside
    with pytest.raises(Spent):
        time.sleep(1)
    with alarm.held():  # disarmed inside: nothing rings at the end
        alarm.arm(0.01)
        time.sleep(0.05)
        alarm.disarm()
