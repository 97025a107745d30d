"""Our dump against an msprobe-layout dump of the same program: API calls match whichever tool named them.

msprobe hooks ``Tensor`` methods, ``torch.*``, ``torch.nn.functional`` and ``torch._VF``, not ``torch.nn.init``:
an ``nn.init.normal_`` is its ``Tensor.normal_.N.forward``, and it names an API by the last part of its dotted name
(``torch.linalg.vector_norm`` is ``Torch.vector_norm``). Our dump names them ``Torch.normal_`` (API
``torch.nn.init.normal_``) and ``Torch.linalg_vector_norm``; read without our keys, ``Torch.normal_`` is all a
reader has."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ascendify.precision import compare_dumps, dump, load_dump


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.fc2 = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x) * 2.0
        return self.fc2(h) / torch.linalg.vector_norm(h, dim=-1, keepdim=True)


def _program(path: Path) -> Path:
    torch.manual_seed(0)
    with dump(None, path, level="mix", mode="stats", backward=False) as d:
        m = _Net()
        torch.nn.init.normal_(m.fc.weight, std=0.02)
        torch.nn.init.kaiming_uniform_(m.fc2.weight, a=5**0.5)
        torch.nn.init.constant_(m.fc2.bias, 0.1)
        with torch.no_grad():
            m(torch.randn(3, 6))
        d.step()
    return path


def _msprobe_names(data: dict) -> dict[str, str]:
    """msprobe's names for our nodes (Tensor methods for init, the last part of a dotted name), numbered as msprobe
    numbers them: per API name, in execution order."""
    method = {"normal_": "normal_", "uniform_": "uniform_", "kaiming_uniform_": "uniform_", "constant_": "fill_"}
    out, count = {}, {}
    for name, entry in data.items():
        api = (entry.get("ascendify") or {}).get("api") or ""
        if name.startswith("Module."):
            out[name] = name
            continue
        base, direction = name.rsplit(".", 2)[0], name.rsplit(".", 1)[1]
        if api.startswith("torch.nn.init."):
            base = "Tensor." + method[api.rsplit(".", 1)[1]]
        elif api.startswith("torch.linalg."):
            base = "Torch." + api.rsplit(".", 1)[1]
        i = count.get((base, direction), 0)
        count[(base, direction)] = i + 1
        out[name] = f"{base}.{i}.{direction}"
    return out


def _foreign(src: Path, dst: Path, rename: bool) -> Path:
    """A copy of our dump in msprobe's layout only: our keys dropped, and (``rename``) msprobe's API names."""
    shutil.copytree(src, dst)
    for f in dst.rglob("dump.json"):
        doc = json.loads(f.read_text())
        doc.pop("ascendify", None)
        names = _msprobe_names(doc["data"]) if rename else {k: k for k in doc["data"]}
        assert len(set(names.values())) == len(names)
        doc["data"] = {names[k]: {a: b for a, b in v.items() if a != "ascendify"} for k, v in doc["data"].items()}
        f.write_text(json.dumps(doc))
        c = f.with_name("construct.json")
        if c.is_file():
            con = json.loads(c.read_text())
            c.write_text(json.dumps({names.get(k, k): names.get(v, v) for k, v in con.items()}))
        stack = f.with_name("stack.json")
        if stack.is_file():
            stack.unlink()
    return dst


def test_init_and_linalg_calls_match_an_msprobe_layout_dump(tmp_path):
    ours = _program(tmp_path / "ours")
    apis = {n.api for n in load_dump(ours).forward() if n.kind == "api"}
    assert {"torch.nn.init.normal_", "torch.nn.init.kaiming_uniform_", "torch.linalg.vector_norm"} <= apis
    for rename in (False, True):
        other = _foreign(ours, tmp_path / f"foreign-{rename}", rename)
        loaded = load_dump(other)
        assert loaded.framework == "msprobe"
        if rename:
            assert {"Tensor.normal_.0.forward", "Torch.vector_norm.0.forward"} <= {n.name for n in loaded.nodes}
        else:  # Torch.normal_ read without our keys is the init function (torch has no normal_)
            assert "torch.nn.init.normal_" in {n.api for n in loaded.nodes}
        for g, t in ((ours, other), (other, ours)):
            r = compare_dumps(g, t)
            assert r.unmatched_golden == [] and r.unmatched_target == [], (rename, r.unmatched_golden)
            assert r.verdict == "match", (rename, r.verdict)
            paired = {n.golden_name.split(".")[1]: n.name.split(".")[1] for n in r.nodes if n.golden_name}
            if rename and g is ours:
                assert paired["normal_"] == "normal_" and paired["linalg_vector_norm"] == "vector_norm"
