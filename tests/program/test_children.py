"""``ascendify.program.children``: no child outlives the verb that started it, whatever signal ends the verb, and a
Ctrl-C is never lost. The mechanism first (small processes, a second or so each), then every verb that starts
children, signalled at a chosen moment by ``reaper.py`` (a child subreaper: whatever the verb leaves behind is
re-parented to it and found), with the moment marked by files the program writes."""

from __future__ import annotations

import doctest
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ascendify.program import children

HERE = Path(__file__).resolve().parent
PY = sys.executable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and prctl: Linux")


def _gone(pid: int, within: float = 5.0) -> bool:
    """Dead (or a zombie nobody waits for) within ``within`` seconds."""
    end = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def _wait_for(path: Path, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)
    time.sleep(0.02)
    return path.read_text()


def _parent_of_a_child(tmp_path: Path, child_code: str) -> tuple[subprocess.Popen, list[int]]:
    """A process that starts ``child_code`` through children.popen and waits; returns it and the pids the child
    wrote to ``pids`` (space-separated) once up."""
    pids = tmp_path / "pids"
    parent = subprocess.Popen([PY, "-c", "import sys, time\nfrom ascendify.program import children\n"
                               f"children.popen([sys.executable, '-c', {child_code!r}])\ntime.sleep(120)"],
                              env={**os.environ, "PIDS": str(pids)})
    return parent, [int(p) for p in _wait_for(pids).split()]


def test_docstring_examples():
    assert doctest.testmod(children).failed == 0


def test_a_child_dies_with_its_parent_even_a_killed_one(tmp_path):
    parent, (child,) = _parent_of_a_child(
        tmp_path, "import os, time\nopen(os.environ['PIDS'], 'w').write(str(os.getpid()))\ntime.sleep(120)")
    parent.kill()
    parent.wait()
    assert _gone(child), "the child outlived its SIGKILLed parent"


def test_an_adopted_child_takes_what_it_started_down_with_it(tmp_path):
    # an ascendify child (adopt(): what the CLI does first) and the process its program started, in its group
    parent, (child, grandchild) = _parent_of_a_child(
        tmp_path, "import os, subprocess, sys, time\nfrom ascendify.program import children\n"
        "assert children.adopt() and 'ASCENDIFY_PARENT' not in os.environ\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {g.pid}')\ntime.sleep(120)")
    parent.kill()
    parent.wait()
    assert _gone(child) and _gone(grandchild), "the program's own child outlived the verb"


def test_a_child_hears_ctrl_c_from_its_parent_where_the_parent_ignores_it():
    # a verb started in the background by a script ignores SIGINT, and its children inherited that: port's Ctrl-C
    # to its runs ("write what you found") was ignored, and each was killed 5 s later
    code = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nfrom ascendify.program import children\n"
            "p = children.popen([sys.executable, '-c', 'import signal; print(signal.getsignal(signal.SIGINT) is "
            "signal.default_int_handler)'], stdout=-1, text=True)\nprint(p.communicate()[0].strip())")
    assert subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip() == "True"


def test_adopt_takes_only_its_own_parent():
    code = "from ascendify.program import children; print(children.adopt())"
    run = lambda parent: subprocess.run([PY, "-c", code], env={**os.environ, "ASCENDIFY_PARENT": parent},  # noqa: E731
                                        capture_output=True, text=True, timeout=60)
    assert run(str(os.getpid())).stdout.strip() == "True"
    assert run("1").stdout.strip() == "False"  # alive, not its parent: started by something in between
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    gone = run(str(dead.pid))  # its parent died before it could be armed: it goes too
    assert gone.returncode == 143 and gone.stdout == ""


def test_deferred_signals_hold_a_ctrl_c_then_deliver_it():
    with pytest.raises(KeyboardInterrupt):
        with children.deferred_signals() as held:
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)  # the handler has run by now: it held the signal
            assert held == [signal.SIGINT]
    with children.deferred_signals(redeliver=False) as held:
        signal.raise_signal(signal.SIGINT)
    assert held == [signal.SIGINT]


@pytest.mark.skipif(signal.getsignal(signal.SIGTERM) != signal.SIG_DFL, reason="SIGTERM has a handler here")
def test_sigterm_unwinds_like_ctrl_c_while_children_run():
    with pytest.raises(children.Terminated) as e:
        with children.terminate_raises():
            signal.raise_signal(signal.SIGTERM)
            time.sleep(1)
    assert e.value.code == 143 and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_call_passes_ctrl_c_on_and_the_child_finishes_as_it_would(tmp_path):
    up, done = tmp_path / "up", tmp_path / "done"
    code = (f"import time\nopen({str(up)!r}, 'w').write('1')\ntry:\n    time.sleep(120)\n"
            f"except KeyboardInterrupt:\n    open({str(done)!r}, 'w').write('1')\n    raise SystemExit(130)")
    press = threading.Thread(target=lambda: (_wait_for(up), os.kill(os.getpid(), signal.SIGINT)))
    press.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        children.call([PY, "-c", code])
    press.join()
    assert done.exists() and time.monotonic() - t0 < 30  # it heard Ctrl-C (its own session: only through call)


# -- every verb that starts children ---------------------------------------------------------------------------------


def _reap(tmp_path: Path, argv: list[str], sig: str, *, wait_for=(), wait_count=(), timeout=240,
          cwd: Path | None = None) -> dict:
    spec = {"argv": argv, "cwd": str(cwd or tmp_path), "log": str(tmp_path / "verb.log"), "signal": sig,
            "wait_for": [str(w) for w in wait_for], "wait_count": [[str(g), n] for g, n in wait_count],
            "timeout": timeout,
            "exit_timeout": 60, "env": {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}}
    r = subprocess.run([PY, str(HERE / "reaper.py"), json.dumps(spec)], capture_output=True, text=True,
                       timeout=timeout + 120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    out["log"] = (tmp_path / "verb.log").read_text(errors="replace")
    assert out["moment_reached"], f"the moment never came:\n{out['log'][-3000:]}"
    return out


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "sleeper.py").write_bytes((HERE / "sleeper.py").read_bytes())
    return proj


def _port(tmp_path, project, *extra):
    return [PY, "-m", "ascendify", "port", str(project), "-o", str(tmp_path / "npu"), "--report",
            str(tmp_path / "rep"), "-q", "--skip", "doctor,bench", *extra, "--", "python", "sleeper.py",
            str(tmp_path / "marks")]


def test_port_ctrl_c_while_its_runs_start_stops_them_and_writes_the_partial_report(tmp_path, project):
    out = _reap(tmp_path, _port(tmp_path, project), "SIGINT", wait_for=[tmp_path / "rep/logs/train-target.log"])
    assert out["returncode"] == 130 and out["exit_seconds"] < 30, out
    assert out["left"] == [], out
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["interrupted"]


def test_port_sigterm_while_its_runs_start_stops_everything_at_once(tmp_path, project):
    out = _reap(tmp_path, _port(tmp_path, project), "SIGTERM", wait_for=[tmp_path / "rep/logs/train-target.log"])
    assert out["returncode"] == 143 and out["exit_seconds"] < 5, out
    assert out["left"] == [], out


def test_port_sigkill_while_the_programs_run_leaves_nothing_behind(tmp_path, project):
    out = _reap(tmp_path, _port(tmp_path, project), "SIGKILL", wait_count=[(tmp_path / "marks/run-*", 2)])
    assert out["returncode"] == -9 and out["left"] == [], out  # the runs, and the process each program started


def test_demo_sigkill_leaves_nothing_behind(tmp_path):
    out = _reap(tmp_path, [PY, "-m", "ascendify", "demo", "--out", str(tmp_path / "demo"), "-q"], "SIGKILL",
                wait_for=[tmp_path / "demo/logs/*.log"])
    assert out["left"] == [], out


@pytest.mark.parametrize("verb, sig, code", [
    (["run", "--to", "cpu"], "SIGINT", 130),  # the docs' 130, not 1 ("torchrun failed: SignalException")
    (["emulate", "--"], "SIGKILL", -9),
])
def test_torchrun_under_a_verb_leaves_no_worker(tmp_path, verb, sig, code):
    argv = [PY, "-m", "ascendify", *verb, "torchrun", "--nproc-per-node", "1", str(HERE / "sleeper.py"),
            str(tmp_path / "marks")]
    out = _reap(tmp_path, argv, sig, wait_for=[tmp_path / "marks/run-*"])
    assert out["returncode"] == code and out["left"] == [], out
    assert "SignalException" not in out["log"]


def test_bench_sigkill_leaves_no_loader_worker(tmp_path):
    (tmp_path / "tiny.py").write_text(
        "import time, torch\n"
        "class M(torch.nn.Linear):\n"
        "    def forward(self, x):\n"
        f"        open({str(tmp_path / 'forward')!r}, 'w').close()\n"
        "        time.sleep(0.05)\n"
        "        return super().forward(x.flatten(1))\n"
        "def build():\n"
        "    return M(3 * 8 * 8, 2)\n")
    argv = [PY, "-m", "ascendify", "bench", "--model", "tiny.py:build", "--image-size", "8", "--batch-size", "2",
            "--loader-workers", "1", "--device", "cpu", "--steps", "100000", "--warmup", "0", "--no-flops",
            "--mode", "infer"]
    out = _reap(tmp_path, argv, "SIGKILL", wait_for=[tmp_path / "forward"])
    assert len(out["started"]) >= 2, out  # the bench and its loader's worker
    assert out["left"] == [], out
