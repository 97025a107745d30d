"""autocast_policy: CUDA autocast's dtype for a call, from torch itself (fake CUDA replay), and the target calls
that ran in another dtype, shown next to the divergence."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ascendify.core import knowledge
from ascendify.precision import autocast_policy as ap
from ascendify.precision import compare_models, compare_render


def test_cuda_lists_are_the_dispatchers():
    ops = {o.removeprefix("aten::") for o in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")}
    lists = ap.cuda_ops()
    listed = {o for v in lists.values() for o in v}
    assert listed == ops
    assert "rms_norm" in lists["fp32"] and "rms_norm" not in {o for v in knowledge.npu_autocast_lists().values()
                                                             if isinstance(v, (list, dict)) for o in v}


@pytest.mark.parametrize(
    ("call", "want"),
    [
        (lambda h, f: (F.softmax, (h, -1)), "float32"),
        (lambda h, f: (F.layer_norm, (h, (8,))), "float32"),
        (lambda h, f: (F.rms_norm, (h, (8,))), "float32"),
        (lambda h, f: (F.linear, (f, f[0])), "float16"),
        (lambda h, f: (F.gelu, (h,)), "float16"),  # in no list: the input's dtype
        (lambda h, f: (F.gelu, (f,)), "float32"),
        (lambda h, f: (torch.addcmul, (h, f, h)), "float32"),  # promote
    ],
)
def test_replay_gives_cuda_autocasts_dtype(call, want):
    h, f = torch.empty(2, 8, 8, dtype=torch.float16), torch.empty(2, 8, 8)
    fn, args = call(h, f)
    assert ap.replay_dtype(fn, args, {}, torch.float16) == want
    assert not torch.is_autocast_enabled("cuda")  # state restored


def test_op_names_and_rules():
    assert ap.op_name("torch.nn.functional.softmax") == "softmax"
    assert ap.op_name("Tensor.__matmul__") == "matmul"
    assert ap.op_name(None, "LayerNorm") == "layer_norm"
    assert ap.rule("cuda", "rms_norm") == "fp32" and ap.rule("npu", "rms_norm") is None
    assert ap.rule("cuda", "softmax") == ap.rule("npu", "softmax") == "fp32_set_opt_dtype"


class _Net(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 8)
        self.scale = scale

    def forward(self, x):
        h = self.fc(x)
        return self.head(F.gelu(self.ln(h * self.scale)))


def test_lockstep_names_the_call_cpu_autocast_runs_in_low_precision():
    # CPU autocast lists no norm: layer_norm runs in bfloat16 there, in float32 under CUDA autocast
    torch.manual_seed(0)
    m = _Net()
    r = compare_models(m, m, torch.randn(4, 16), target_device="cpu", target_autocast=torch.bfloat16, level="mix")
    pol = r.meta["autocast_policy"]
    assert pol["autocast"] == "bfloat16" and pol["not_replayed"] == 0
    ops = {c["op"]: c for c in pol["calls"]}
    assert set(ops) == {"layer_norm"}  # linear: bfloat16 on both; gelu follows its input on both
    c = ops["layer_norm"]
    assert (c["target_dtype"], c["cuda_dtype"], c["cuda_rule"]) == ("bfloat16", "float32", "fp32")
    assert c["module"] == "ln" and c["source"].endswith(".py:" + c["source"].rsplit(":", 1)[1])
    lines = compare_render.summary_lines(r)
    assert any("layer_norm" in x and "CUDA" in x for x in lines)
    assert json.loads(r.to_json())["meta"]["autocast_policy"]["calls"][0]["op"] == "layer_norm"
    html = compare_render.html_report(r).to_html()
    assert "Autocast policy" in html and "layer_norm" in html


def test_no_autocast_no_section():
    m = _Net()
    r = compare_models(m, m, torch.randn(2, 16))
    assert "autocast_policy" not in r.meta
    assert not any("autocast" in x for x in compare_render.summary_lines(r))


_EMULATED = textwrap.dedent(
    """
    import json, sys, torch, torch.nn as nn, torch.nn.functional as F
    import ascendify.emulator as emu
    emu.enable()
    from ascendify.precision import compare_models, compare_render

    class RMSNet(nn.Module):  # F.rms_norm is in CUDA's fp32 list, in none of torch_npu 2.13's
        def __init__(self, eps=None):
            super().__init__()
            self.fc, self.w, self.head, self.eps = nn.Linear(16, 32), nn.Parameter(torch.ones(32)), nn.Linear(32, 8), eps
        def forward(self, x):
            return self.head(F.rms_norm(self.fc(x), (32,), self.w, self.eps))

    class Clean(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.ln, self.head = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)
        def forward(self, x):
            return self.head(torch.softmax(self.ln(self.fc(x)), -1))

    torch.manual_seed(0)
    x = torch.randn(4, 16)
    out = {}
    clean = Clean()
    for name, g, t in (("rms", RMSNet(), RMSNet(eps=0.5)), ("clean", clean, clean)):  # the port's eps: a defect
        t.load_state_dict(g.state_dict())
        r = compare_models(g, t, x, target_device="npu", target_autocast=torch.float16, level="mix")
        out[name] = {"policy": r.meta.get("autocast_policy"), "lines": compare_render.summary_lines(r),
                     "first": r.first_divergence.api if r.first_divergence else None}
    print(json.dumps(out))
    """
)


def test_emulated_npu_fp16_rms_norm_explained_next_to_its_divergence():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", _EMULATED], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    rms = out["rms"]
    assert rms["first"] == "torch.nn.functional.rms_norm"
    calls = rms["policy"]["calls"]
    assert [c["op"] for c in calls] == ["rms_norm"]
    assert (calls[0]["target_dtype"], calls[0]["cuda_dtype"]) == ("float16", "float32")
    i = next(i for i, x in enumerate(rms["lines"]) if x.strip().startswith("autocast: rms_norm"))
    assert i <= 3  # right under the divergence
    assert out["clean"]["policy"]["calls"] == []  # the lists agree on linear, layer_norm, softmax
    assert out["clean"]["first"] is None
