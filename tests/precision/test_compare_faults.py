"""``ascendify compare`` on faulty runs and files: a NaN the golden does not hold is a finding wherever it comes
from (never a MATCH, never "random draws differ"), a damaged dump says what is wrong with it, and the report
folder is never a user's (one comparison at a time, an earlier report of ours replaced whole)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ascendify.cli import main
from ascendify.core import fileio
from ascendify.precision import compare_dumps, dump


class Net(nn.Module):
    """Two linear layers; ``poison``: the target multiplies its input by sqrt(-1) first, a call the golden never
    makes; ``noise``: adds ``0 * randn_like(x)`` (a random call that changes nothing)."""

    def __init__(self, poison: bool = False, noise: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)
        self.poison, self.noise = poison, noise

    def forward(self, x):
        if self.poison:
            x = x * torch.sqrt(torch.tensor(-1.0))
        if self.noise:
            x = x + 0 * torch.randn_like(x)
        return self.fc2(F.gelu(self.fc1(x))).pow(2).mean()


def _dump(path, **kw):
    model = Net(**kw)
    with torch.no_grad(), dump(model, path, level="mix", backward=False):
        torch.manual_seed(1)
        model(torch.randn(5, 4))
    return path


def _edit(root, name, section, fn):
    """Change the first tensor of ``section`` of node ``name`` in ``root``'s dump.json."""
    f = next(root.rglob("dump.json"))
    doc = json.loads(f.read_text())
    fn(doc["data"][name][section][0])
    f.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return _dump(tmp_path_factory.mktemp("g") / "golden")


def test_nan_from_a_call_the_golden_never_made_is_a_divergence(golden, tmp_path, capsys):
    target = _dump(tmp_path / "target", poison=True)
    r = compare_dumps(golden, target)
    assert r.verdict == "divergence"
    fd = r.first_divergence
    assert fd.api == "torch.sqrt" and "NaN appears here" in fd.reasons[0] and "golden makes no such call" in fd.reasons[0]
    # the CLI: exit 1, never MATCH
    assert main(["compare", str(golden), str(target), "-o", str(tmp_path / "r")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("DIVERGENCE: first at (root) [torch.sqrt]")


def test_nan_that_enters_through_the_inputs_is_a_divergence(golden, tmp_path):
    # the golden's own dump with NaN written into the input of the first layer (from code that was not recorded)
    target = tmp_path / "target"
    shutil.copytree(golden, target)
    for name in ("Module.fc1.Linear.forward.0", "Functional.linear.0.forward"):
        _edit(target, name, "input_args", lambda t: t.update(Max="NaN", Min="NaN", nan_count=1))
        _edit(target, name, "output", lambda t: t.update(Max="NaN", Min="NaN", Mean="NaN", Norm="NaN", nan_count=8))
    r = compare_dumps(golden, target)
    assert r.verdict == "divergence"
    assert r.first_divergence.module == "fc1" and "NaN" in r.first_divergence.reasons[-1]
    fc1 = next(n for n in r.nodes if n.name == "Module.fc1.Linear.forward.0")
    assert fc1.flagged and "NaN reaches it through its inputs" in fc1.reasons[-1]


def test_nan_written_into_statistics_is_not_a_random_draw(tmp_path):
    g = _dump(tmp_path / "g", noise=True)
    t = tmp_path / "t"
    shutil.copytree(g, t)
    _edit(t, "Torch.randn_like.0.forward", "output", lambda e: e.update(Max="NaN", Min="NaN", Mean="NaN", Norm="NaN"))
    r = compare_dumps(g, t)
    assert r.verdict == "divergence" and not r.not_comparable
    assert r.first_divergence.api == "torch.randn_like" and "NaN appears here" in r.first_divergence.reasons[0]


def test_a_golden_that_is_nan_itself_is_never_a_match(tmp_path):
    g = _dump(tmp_path / "g", poison=True)
    r = compare_dumps(g, g)
    assert r.golden_nonfinite["call"] == "Torch.sqrt.0.forward"
    assert r.verdict == "not comparable"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.update(Max="abc"), "output 0: Max is 'abc', not a number"),
        (lambda t: t.pop("dtype"), "output 0: a tensor without dtype"),
        (lambda t: (t.pop("dtype"), t.pop("shape")), "output 0: a tensor without dtype and shape"),
        (lambda t: [t.pop(k) for k in ("Max", "Min", "Mean", "Norm")], "output 0: no Max, Min, Mean, Norm"),
        (lambda t: t.update(shape="4x8"), "output 0: shape is '4x8', not a list of sizes"),
        (lambda t: t.update(nan_count="many"), "output 0: nan_count is 'many', not a count"),
    ],
)
def test_a_damaged_dump_says_what_is_wrong_with_it(golden, tmp_path, capsys, change, message):
    target = tmp_path / "target"
    shutil.copytree(golden, target)
    _edit(target, "Module.fc1.Linear.forward.0", "output", change)
    assert main(["compare", str(golden), str(target), "-o", str(tmp_path / "r")]) == 3
    err = capsys.readouterr().err
    assert "entry 'Module.fc1.Linear.forward.0' is malformed" in err and message in err
    assert "different model" not in err
    assert not (tmp_path / "r").exists()  # bad input: nothing written


def test_the_report_folder_is_never_a_users(golden, tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "compare.csv").write_text("my,own\n1,2\n")
    assert main(["compare", str(golden), str(golden), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not empty and was not written by ascendify compare" in err and "compare.csv" in err
    assert (out / "compare.csv").read_text() == "my,own\n1,2\n"


def test_an_earlier_report_is_replaced_whole_and_one_comparison_writes_at_a_time(golden, tmp_path, capsys):
    out = tmp_path / "r"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    hist = [{"epoch": i, "train_loss": 1.0 / i} for i in (1, 2, 3)]
    a.write_text(json.dumps(hist))
    b.write_text(json.dumps(hist))
    assert main(["compare", "--curves", str(a), str(b), "-o", str(out)]) == 0
    assert (out / "curves.json").is_file()
    (out / "notes.txt").write_text("mine")
    assert main(["compare", str(golden), str(golden), "-o", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [".ascendify-compare.json", "compare.csv", "compare.html", "compare.json", "notes.txt"]
    with fileio.output_lock(out, "ascendify compare"):  # another comparison writing there now
        assert main(["compare", str(golden), str(golden), "-o", str(out)]) == 2
        assert "is being written by ascendify compare (pid" in capsys.readouterr().err


def test_lockstep_inputs_of_the_wrong_shape_are_bad_input_not_a_divergence(tmp_path, capsys):
    (tmp_path / "m.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n")
    code = main(["compare", "--model", f"{tmp_path / 'm.py'}:Net", "--inputs", "2x5", "--target", "cpu:fp32",
                 "-o", str(tmp_path / "r")])
    assert code == 3
    err = capsys.readouterr().err
    assert err.startswith("ascendify compare: the golden model raised RuntimeError: mat1 and mat2 shapes cannot be "
                          "multiplied (2x5 and 4x2)")
    assert f"at {tmp_path / 'm.py'}:10 when called on the inputs (2x5 float32): check --inputs" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--tolerance", "nan"], 2, "--tolerance must be a positive finite number, not nan"),  # passed everything
        (["--tolerance", "inf"], 2, "--tolerance must be a positive finite number, not inf"),
    ],
)
def test_a_tolerance_that_passes_everything_is_refused(golden, tmp_path, capsys, argv, code, message):
    assert main(["compare", str(golden), str(golden), *argv, "-o", str(tmp_path / "r")]) == code
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("2x-3", "input spec '2x-3': every size must be at least 1"),  # was torch's traceback, exit 1
        ("0x4", "input spec '0x4': every size must be at least 1"),  # an empty tensor: a MATCH that proves nothing
        ("4x2:int64:0", "input spec '4x2:int64:0': the upper bound must be at least 1"),
    ],
)
def test_lockstep_input_sizes_must_be_positive(tmp_path, capsys, spec, message):
    (tmp_path / "m.py").write_text("import torch.nn as nn\n\n\ndef make():\n    return nn.Linear(4, 2)\n")
    code = main(["compare", "--model", f"{tmp_path / 'm.py'}:make", "--inputs", spec, "--target", "cpu",
                 "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_an_empty_history_is_said_to_be_empty(tmp_path, capsys):
    (tmp_path / "h.json").write_text("[]")
    assert main(["compare", "--curves", str(tmp_path / "h.json"), str(tmp_path / "h.json"),
                 "-o", str(tmp_path / "r")]) == 3
    assert "h.json: an empty history (no epoch or step recorded" in capsys.readouterr().err


def test_a_dump_that_did_not_finish_is_said_so(tmp_path, capsys):
    (tmp_path / "t.py").write_text("import torch\nx = torch.ones(3) * 2\n")
    g = tmp_path / "g"
    assert main(["dump", "-q", "-o", str(g), str(tmp_path / "t.py")]) == 0
    assert main(["compare", str(g), str(g), "-o", str(tmp_path / "r1")]) == 0
    assert "did not finish" not in capsys.readouterr().err
    marker = g / ".ascendify-dump.json"
    marker.write_text(marker.read_text().replace('"finished": true', '"finished": false'))  # killed mid-run
    assert main(["compare", str(g), str(g / "step0"), "-o", str(tmp_path / "r2")]) == 0
    err = capsys.readouterr().err
    assert err.count(f"warning: {g} is from a dump that did not finish") == 1
