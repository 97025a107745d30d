"""--apply's source rewrites, on small files (no run): each fused-operator finding becomes its fused call with exact
text edits (the rest of the file unchanged), `import torch_npu` is added once, and what cannot be rewritten safely
is left as it is with the reason."""

from __future__ import annotations

import ast
import textwrap

from ascendify.advise import apply
from ascendify.advise.model import Finding

SRC = textwrap.dedent('''\
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Norm(nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.variance_epsilon = eps
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, hidden):
            """RMS."""
            v = hidden.pow(2).mean(-1, keepdim=True)
            hidden = hidden * torch.rsqrt(v + self.variance_epsilon)
            return self.weight * hidden


    def rotate_half(x):
        a, b = x.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)


    def attend(self, q, k, v, mask):
        q = (q * cos) + (rotate_half(q) * sin)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.size(-1))
        n = q.size(-1)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        scores = F.softmax(scores, dim=-1)
        scores = self.drop(scores)
        out = scores @ v
        return out.transpose(1, 2)


    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    sgd = torch.optim.SGD(params, lr=0.1)
    ''')


def _finding(rule, line, **ev):
    return Finding(rule=rule, name="", family="fusion", title="", file="m.py", line=line, function=None, code="",
                   message="", evidence=ev, why="", sources=[], fix="", path=None)


def _line(text, marker):
    return next(i for i, t in enumerate(text.splitlines(), 1) if marker in t)


def test_each_fused_finding_is_rewritten(tmp_path):
    (tmp_path / "m.py").write_text(SRC)
    fs = [_finding("ADV401", _line(SRC, "torch.rsqrt")), _finding("ADV402", _line(SRC, "rotate_half(q)"), mode="half"),
          _finding("ADV404", _line(SRC, "F.softmax")), _finding("ADV405", _line(SRC, "AdamW"), optimizer="AdamW"),
          _finding("ADV405", _line(SRC, "SGD"), optimizer="SGD")]
    p = apply.plan(fs, str(tmp_path))
    assert not p.skipped, p.skipped
    new = apply.render(p.files[str(tmp_path / "m.py")])
    ast.parse(new)
    flat = " ".join(new.split()).replace("( ", "(").replace(" )", ")")
    assert new.count("import torch_npu") == 1 and "import torch.nn.functional as F\nimport torch_npu\n" in new
    assert '"""RMS.""" return torch_npu.npu_rms_norm(hidden, self.weight, epsilon=self.variance_epsilon)[0]' in flat
    assert ("q = torch_npu.npu_rotary_mul(q, cos.to(q.dtype)[(None,) * (q.dim() - cos.dim())], "
            "sin.to(q.dtype)[(None,) * (q.dim() - sin.dim())])") in flat
    assert "masked_fill" not in new and "softmax" not in new and "self.drop(scores)" not in new
    assert ("out = F.scaled_dot_product_attention(q, k, v, attn_mask=~(mask == 0), dropout_p=self.drop.p if "
            "self.training else 0.0, scale=1.0 / (math.sqrt(q.size(-1))))") in flat
    assert "n = q.size(-1)" in new  # a statement between them that does not touch the scores stays
    assert "torch.optim.AdamW(params, lr=1e-3, fused=True)" in new
    assert "torch.optim.SGD(params, lr=0.1, fused=True)" in new
    # everything else byte for byte
    assert new.startswith("import math\n\nimport torch\n") and new.endswith("sgd = torch.optim.SGD(params, lr=0.1, "
                                                                            "fused=True)\n")


def test_what_cannot_be_rewritten_is_said(tmp_path):
    src = textwrap.dedent('''\
        import torch
        import torch.nn.functional as F


        def attend(q, k, v):
            att = q @ k.transpose(-2, -1)
            att = F.softmax(att, dim=-1)
            y = att @ v
            return y, att


        def attend2(q, k, v):
            att = q @ k.transpose(-2, -1)
            print(att.shape)
            att = F.softmax(att, dim=-1)
            return att @ v


        def attend3(q, k, v, flag):
            att = q @ k.transpose(-2, -1)
            att = F.softmax(att, dim=-1)
            return torch.matmul(att, v) if flag else att @ v
        ''')
    (tmp_path / "m.py").write_text(src)
    p = apply.plan([_finding("ADV404", 7), _finding("ADV401", 7), _finding("ADV402", 6, mode="interleave"),
                    _finding("ADV404", 15), _finding("ADV404", 21)], str(tmp_path))
    why = {(s["rule"], s["where"]): s["why"] for s in p.skipped}
    assert "used after the attention" in why["ADV404", "m.py:7"]
    assert "line 14 uses 'att' between the attention's steps" in why["ADV404", "m.py:15"]
    assert "line 22 uses 'att' besides 'scores @ v'" in why["ADV404", "m.py:21"]
    why = {s["rule"]: s["why"] for s in p.skipped}
    assert "not inside an nn.Module class" in why["ADV401"]
    assert "interleave" in why["ADV402"]
    assert not p.changed()
    out = apply.plan([_finding("ADV404", 7)], str(tmp_path / "elsewhere"))
    assert out.skipped[0]["why"] == "the file is not in the project"


def test_definitions_load_without_the_scripts_top_level_code(tmp_path):
    (tmp_path / "s.py").write_text("import torch\nN = 3\nclass A(torch.nn.Module):\n    n = N\n"
                                   "raise SystemExit('the training loop ran')\n")
    ns = apply.load_definitions(str(tmp_path / "s.py"), "_advise_test_defs")
    assert ns["A"].n == 3
