"""CANN's overflow modes on the emulated NPU (inf_nan by default on Atlas A2, saturation on request or on 910A),
said in the overflow report; and ``compare --overflow``: the target run's first inf/NaN with its file and line."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ascendify.emulator.settings import Settings, overflow_mode_for


def test_mode_follows_the_chip_and_torch_npus_variables():
    assert Settings.from_env({}).overflow_mode == "inf_nan"
    assert Settings.from_env({"ASCENDIFY_EMULATE_DEVICE_NAME": "Ascend910A"}).overflow_mode == "saturation"
    # on Atlas A2 INF_NAN_MODE_ENABLE=0 alone is refused by CANN: it needs INF_NAN_MODE_FORCE_DISABLE=1 too
    assert overflow_mode_for("Ascend910B3", {"INF_NAN_MODE_ENABLE": "0"}) == "inf_nan"
    env = {"INF_NAN_MODE_ENABLE": "0", "INF_NAN_MODE_FORCE_DISABLE": "1"}
    assert Settings.from_env(env).overflow_mode == "saturation"
    assert Settings.from_env({"ASCENDIFY_EMULATE_OVERFLOW_MODE": "saturation"}).overflow_mode == "saturation"
    with pytest.raises(ValueError, match="overflow_mode"):
        Settings.from_env({"ASCENDIFY_EMULATE_OVERFLOW_MODE": "clip"})


_SATURATION = textwrap.dedent(
    """
    import json, torch
    import ascendify.emulator as emu
    emu.enable(overflow_mode="saturation")
    from ascendify.precision import overflow
    x = torch.tensor([12.0, 1.0], dtype=torch.float16, device="npu")
    out = {}
    for mode in ("saturation", "inf_nan"):  # the setting is live: the second round runs in IEEE mode
        emu.settings.update(overflow_mode=mode)
        res = out[mode] = {}
        def run():
            for _ in range(6):  # past the emulator's promotion of an op to its direct kernel
                res["exp"] = torch.exp(x).cpu().tolist()
                z = torch.full((2,), 300.0, dtype=torch.float16, device="npu")
                z.mul_(300.0)
                res["mul_"] = z.cpu().tolist()
            res["sqrt"] = torch.sqrt(torch.tensor([-1.0], dtype=torch.float16, device="npu")).cpu().tolist()
        s = overflow.watch_run(run)
        res["overflows"], res["mode"] = s["overflows"], s["npu_overflow_mode"]["mode"]
    print(json.dumps(out))
    """
)


def _py(code: str, *argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_saturation_mode_saturates_and_the_report_says_so():
    out = _py(_SATURATION)
    sat, ieee = out["saturation"], out["inf_nan"]
    assert sat["exp"][0] == 65504.0 and sat["mul_"] == [65504.0, 65504.0] and sat["sqrt"] == [0.0]
    assert sat["overflows"] == 0 and sat["mode"] == "saturation"  # nothing turns inf: the report must say why
    assert ieee["exp"][0] == float("inf") and ieee["sqrt"] != [0.0]
    assert ieee["overflows"] >= 3 and ieee["mode"] == "inf_nan"


_MODEL = textwrap.dedent(
    """
    import torch, torch.nn as nn


    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            h = self.fc(x)
            return h * h * 40.0


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.inner, self.b = nn.Linear(16, 16), Inner(), nn.Linear(16, 4)

        def forward(self, x):
            return self.b(torch.tanh(self.inner(self.a(x)) * 1e-4))


    def inputs():
        return torch.randn(8, 16) * 300
    """
)


def test_compare_overflow_names_the_op_deep_inside(tmp_path):
    f = tmp_path / "net.py"
    f.write_text(_MODEL)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-m", "ascendify", "compare", "--model", f"{f}:Net", "--inputs",
                        f"{f}:inputs", "--target", "npu:fp16", "--overflow", "--json", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr[-2000:]
    ovf = json.loads(r.stdout)["meta"]["overflow"]
    first = ovf["first"]
    assert (first["api"], first["direction"], first["line"]) == ("mul", "forward", 12)
    assert first["file"].endswith("net.py") and first["module"].endswith("inner")
    assert ovf["npu_overflow_mode"]["mode"] == "inf_nan"


class _Boost(__import__("torch").autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 1e9  # LINE_BACKWARD: a loss scale gone wrong


def test_one_record_run_names_the_deep_forward_op_first_and_the_backward_one():
    import torch
    import torch.nn as nn

    from ascendify.precision import overflow

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return torch.exp(self.fc(x))  # LINE_FORWARD: past 65,504 once the input is over 11.1

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Linear(16, 16), nn.Sequential(Deep()))
            self.b = nn.Linear(16, 4)

        def forward(self, x):
            return self.b(torch.tanh(_Boost.apply(self.a(x))))

    torch.manual_seed(0)
    net = Net().half()
    x = (torch.randn(8, 16) * 30).half()
    s = overflow.watch_run(lambda: net(x).float().pow(2).mean().backward())
    src = open(__file__).read().splitlines()
    line = {tag: next(i + 1 for i, t in enumerate(src) if tag in t) for tag in ("LINE_FORWARD", "LINE_BACKWARD")}
    got = [(f["api"], f["direction"], f["line"], f["module"] or f["autograd_node"]) for f in s["findings"]]
    assert got == [("exp", "forward", line["LINE_FORWARD"], "Net.a.1.0"),
                   ("mul", "backward", line["LINE_BACKWARD"], "_BoostBackward")]
    assert all(f["file"] == __file__ for f in s["findings"])


def test_compare_overflow_needs_a_model(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-m", "ascendify", "compare", "a", "b", "--overflow", "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--overflow" in r.stderr and "--model" in r.stderr
