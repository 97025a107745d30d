"""``ascendify compare``: the three forms, exit codes, outputs, bad input."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
import torch
import torch.nn as nn
from precision_conftest import HERE
from precision_conftest import planted_models as M

from ascendify.cli import main
from ascendify.precision.lockstep import copy_weights

MODELS = HERE / "models.py"


def _dump(model, path, x=None):
    from ascendify.precision import dump

    model.eval()
    with torch.no_grad(), dump(model, path, level="mix", mode="stats", backward=False):
        model(M.inputs() if x is None else x)
    return path


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("dumps")
    _dump(M.reference(), d / "golden")
    twin = M.twin("head_permutation")
    copy_weights(M.reference(), twin)
    _dump(twin, d / "perm")
    same = M.reference()
    _dump(same, d / "same")
    return d


def test_dumps_divergence_exit_1_and_outputs(dumps, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["compare", str(dumps / "golden"), str(dumps / "perm"), "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    first = text.splitlines()[0]
    assert first.startswith("DIVERGENCE") and "blocks.1.attn" in first
    with open(out / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for col in ("NPU Name", "Bench Name", "Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                "Result"):
        assert col in rows[0]
    errors = [r for r in rows if r["Result"] == "error"]
    assert [r["Module"] for r in errors] == ["blocks.1.attn"]
    payload = json.loads((out / "compare.json").read_text())
    assert payload["verdict"] == "divergence" and payload["first_divergence"]["module"] == "blocks.1.attn"
    assert (out / "compare.html").stat().st_size > 1000


def test_dumps_match_exit_0_json_on_stdout(dumps, tmp_path, capsys):
    rc = main(["compare", str(dumps / "golden"), str(dumps / "same"), "-o", str(tmp_path / "o"), "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "match"


def test_lockstep_from_the_command_line(tmp_path, capsys):
    args = ["compare", "--golden-model", f"{MODELS}:Reference", "--model", f"{MODELS}:_ln_eps",
            "--inputs", "4x16:int64:64", "--target", "cpu:fp32", "-o", str(tmp_path / "o")]
    assert main(args) == 1
    assert "blocks.1.ln2" in capsys.readouterr().out.splitlines()[0]
    args[4] = f"{MODELS}:_renamed_wrapped"  # a fresh FeedForward: its weights differ, a finding unless copied
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "4 weight(s) differ" in out.splitlines()[0] and "blocks.0.mlp.inner.up.weight" in out
    assert "blocks.0.mlp.fc1.weight -> blocks.0.mlp.inner.up.weight" in out  # the name mapping used is shown
    assert main([*args, "--copy-weights"]) == 0


def test_curves_from_the_command_line(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"train_loss": [2.0, 1.5, 1.0]}))
    (tmp_path / "b.json").write_text(json.dumps({"train_loss": [2.0, 1.5, 1.3]}))
    rc = main(["compare", "--curves", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(tmp_path / "o")])
    assert rc == 1
    assert "step 2" in capsys.readouterr().out.splitlines()[0]
    assert (tmp_path / "o" / "curves.html").exists() and (tmp_path / "o" / "curves.csv").exists()
    rc = main(["compare", "--curves", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--tolerance", "0.5",
               "-o", str(tmp_path / "o")])
    assert rc == 0


@pytest.mark.parametrize(
    "argv",
    [["compare"], ["compare", "onlyone"], ["compare", "a", "b", "--curves", "x", "y"],
     ["compare", "--curves", "a", "b", "--tolerance", "-1"]],
)
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2


def _expect_bad(argv, capsys, *needles, out=None):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 3, err
    for n in needles:
        assert n in err
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), "nothing may be written for bad input"


def test_truncated_dump_names_the_file(dumps, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(dumps / "perm", bad)
    dj = bad / "step0" / "rank0" / "dump.json"
    dj.write_text(dj.read_text()[:500])
    out = tmp_path / "o"
    _expect_bad(["compare", str(dumps / "golden"), str(bad), "-o", str(out)], capsys, "dump.json", out=out)


def test_foreign_dump_names_the_file(dumps, tmp_path, capsys):
    bad = tmp_path / "foreign" / "step0" / "rank0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text(json.dumps({"hello": "world"}))
    out = tmp_path / "o"
    _expect_bad(["compare", str(dumps / "golden"), str(tmp_path / "foreign"), "-o", str(out)], capsys,
                "dump.json", out=out)


def test_dumps_of_different_models(dumps, tmp_path, capsys):
    other = _dump(nn.Sequential(nn.Embedding(64, 8), nn.Linear(8, 3)), tmp_path / "other")
    out = tmp_path / "o"
    _expect_bad(["compare", str(dumps / "golden"), str(other), "-o", str(out)], capsys, "not a dump of the same model",
                str(other), "module calls find a counterpart in it", out=out)


def test_missing_rank(dumps, tmp_path, capsys):
    g = tmp_path / "g"
    shutil.copytree(dumps / "golden", g)
    shutil.copytree(g / "step0" / "rank0", g / "step0" / "rank1")
    out = tmp_path / "o"
    _expect_bad(["compare", str(g), str(dumps / "same"), "-o", str(out)], capsys, "rank1", "rank 1 is missing", out=out)


def test_missing_path(tmp_path, capsys):
    _expect_bad(["compare", str(tmp_path / "nope"), str(tmp_path / "nope2"), "-o", str(tmp_path / "o")], capsys,
                "nope")


def test_bad_model_spec(tmp_path, capsys):
    _expect_bad(["compare", "--model", f"{MODELS}:NoSuchThing", "--inputs", "2x16:int64:64", "--target", "cpu",
                 "-o", str(tmp_path / "o")], capsys, "NoSuchThing")


@pytest.mark.parametrize("extra, needle", [
    (["--inputs", "2x16:complex7", "--target", "cpu"], "unknown dtype"),
    (["--target", "cpu"], "--inputs is needed"),
    (["--inputs", "2x16:int64:64", "--target", "npu:fp64"], "--target npu:fp64: unknown precision 'fp64'"),
    (["--inputs", "2x16:int64:64", "--target", "tpu:fp32"], "--target tpu:fp32: unknown device 'tpu'"),
])
def test_bad_lockstep_settings_are_usage_errors(tmp_path, capsys, extra, needle):
    out = tmp_path / "o"
    assert main(["compare", "--model", f"{MODELS}:Reference", *extra, "-o", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_worked_example_cuda_original_vs_npu_port_on_the_emulated_npu(tmp_path):
    """docs/precision.md's worked example: the bundled CUDA project's GPT on the CPU (fp32) against its torch_npu
    port on the emulated NPU under bf16 AMP (a subprocess: enabling the emulator is process-wide)."""
    import subprocess
    import sys

    repo = HERE.parents[1]
    gpt = "GPT(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=2)"
    cmd = [sys.executable, "-m", "ascendify", "compare",
           "--golden-model", f"{repo / 'examples/cuda_project/models.py'}:{gpt}",
           "--model", f"{repo / 'examples/npu_project/models.py'}:{gpt}",
           "--inputs", "2x16:int64:64", "--golden", "cpu:fp32", "--target", "npu:bf16", "-o", str(tmp_path / "o")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    assert p.stdout.startswith("MATCH")
    payload = json.loads((tmp_path / "o" / "compare.json").read_text())
    assert payload["meta"]["target_autocast"] == "torch.bfloat16" and payload["meta"]["target_device"].startswith("npu")
    assert payload["matched"] >= 20 and payload["end_to_end"]["cosine"] > 0.9999


@pytest.mark.parametrize("width", [80, 100])
def test_flagged_table_fits_the_terminal(dumps, width):
    # at 80 columns the last number column was cropped to its first letter, then columns were dropped; now every
    # column is shown, the table split into parts that repeat the call's name where it cannot fit
    from ascendify import report
    from ascendify.precision import compare_dumps
    from ascendify.precision.compare_render import print_summary

    con = report.console(file=io.StringIO(), width=width)
    print_summary(compare_dumps(dumps / "golden", dumps / "perm"), console=con)
    text = con.file.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    headers = [line for line in lines if "┃" in line]
    header = " ".join(headers)
    for word in ("result", "target call", "computed in", "local err", "limit", "output err", "why"):
        assert word in header, header
    assert "code err" not in header  # dumps have no code check: a column empty in every row is left out
    assert all("target call" in h for h in headers)  # each part names the call
    for h in headers:  # every header cell shown is whole: no cropped fragment at the right edge
        assert h.rstrip().endswith(("err", "limit", "why", "in")), h
    assert all(len(line) <= width for line in text.splitlines())


def test_zoo_models_get_a_small_example_batch():
    # a resnet18 from ascendify.workloads.models (224 px by default) took 4 minutes in lockstep on the emulated npu under bf16
    from ascendify.precision.loading import inputs

    image = nn.Identity()
    image.ascendify_task, image.ascendify_image_size = "image-classification", 224
    (x,) = inputs(None, image)
    assert tuple(x.shape) == (2, 3, 64, 64)
    small = nn.Identity()
    small.ascendify_task, small.ascendify_image_size = "image-classification", 32
    assert tuple(inputs(None, small)[0].shape) == (2, 3, 32, 32)  # a model's own smaller size is kept
    lm = nn.Identity()
    lm.ascendify_task, lm.ascendify_seq_len, lm.vocab_size = "causal-lm", 1024, 50
    (t,) = inputs(None, lm)
    assert tuple(t.shape) == (2, 32) and int(t.max()) < 50


@pytest.mark.parametrize(
    "inputs",
    ["6x3:int64:40, (1x3x16, 1x3x16), scale={t=1}", "WORD_LM:batch", "WORD_LM:keywords"],
)
def test_lockstep_takes_nested_and_keyword_inputs(tmp_path, inputs):
    # an LSTM's model(x, (h, c)) with no glue file: nested tuples, dicts and keyword inputs on the command line
    lm = HERE / "run_pairs" / "word_lm.py"
    spec = inputs.replace("WORD_LM", str(lm))
    code = main(["compare", "--model", f"{lm}:WordLM", "--inputs", spec, "--target", "cpu:bf16", "--json",
                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 0
    doc = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert doc["verdict"] == "match" and doc["matched"] >= 4
    assert doc["end_to_end"]["outputs"] == 3  # logits, h, c


def test_lockstep_refuses_a_malformed_nested_spec(tmp_path, capsys):
    lm = HERE / "run_pairs" / "word_lm.py"
    assert main(["compare", "--model", f"{lm}:WordLM", "--inputs", "6x3:int64:40, (1x3x16", "-o",
                 str(tmp_path / "o")]) == 2  # fmt: skip
    assert "',' or ')' expected" in capsys.readouterr().err


def test_compare_models_casts_nested_inputs_to_the_target_dtype():
    from ascendify.precision import compare_models

    class DictIn(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, batch, bias=None):
            return self.fc(batch["x"]) + batch["pair"][1] + bias

    torch.manual_seed(0)
    m = DictIn()
    r = compare_models(m, m, {"x": torch.randn(2, 4), "pair": (torch.ones(3), torch.ones(3))},
                       kwargs={"bias": torch.zeros(3)}, target_dtype=torch.bfloat16)  # fmt: skip
    assert r.verdict == "match" and r.end_to_end["dtype"] == ["torch.bfloat16", "torch.float32"]
