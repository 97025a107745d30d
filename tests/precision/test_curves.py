"""Training-curve comparison: every history format, the band, the first step outside it, bad files."""

from __future__ import annotations

import json

import pytest

from ascendify.precision.curves import CurveError, compare_curves, load_history

A = {"train_loss": [2.3, 2.0, 1.7, 1.5, 1.4], "val_acc": [0.1, 0.2, 0.3, 0.35, 0.4],
     "epoch_time": [10.0, 9.0, 9.1, 9.0, 9.2]}
B = {"train_loss": [2.3, 2.01, 1.71, 1.62, 1.6], "val_acc": [0.1, 0.2, 0.3, 0.35, 0.4],
     "epoch_time": [30.0, 31.0, 29.0, 30.0, 30.0]}


def test_history_json_first_step_outside_the_band(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(A))
    b.write_text(json.dumps(B))
    r = compare_curves(a, b, tolerance=0.05)
    assert r.verdict == "divergence"
    assert r.first["series"] == "train_loss" and r.first["step"] == 3  # 1.62 vs 1.5 is 7.4% apart
    assert r.series["val_acc"]["first_outside"] is None
    # timings differ by device: reported, never a failure
    assert not r.series["epoch_time"]["checked"] and r.series["epoch_time"]["first_outside"]
    assert compare_curves(a, b, tolerance=0.2).verdict == "match"
    json.loads(r.to_json())


def test_list_of_dicts_and_plain_list_and_csv(tmp_path):
    rows = [{"step": 10 * i, "loss": v} for i, v in enumerate(A["train_loss"])]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.csv").write_text("step,loss\n" + "\n".join(f"{10 * i},{v}" for i, v in enumerate(B["train_loss"])))
    r = compare_curves(tmp_path / "a.json", tmp_path / "b.csv")
    assert r.first["step"] == 30
    h = load_history([1.0, 0.5])
    assert h.series["loss"] == ([0, 1], [1.0, 0.5])


def test_tensorboard_event_files(tmp_path):
    tb = pytest.importorskip("torch.utils.tensorboard")
    for name, hist in (("a", A), ("b", B)):
        w = tb.SummaryWriter(log_dir=str(tmp_path / name))
        for step, v in enumerate(hist["train_loss"]):
            w.add_scalar("loss/train", v, step * 100)
        w.close()
    r = compare_curves(tmp_path / "a", tmp_path / "b")
    assert r.first["series"] == "loss/train" and r.first["step"] == 300


def test_nan_in_one_run_is_outside_the_band():
    r = compare_curves({"loss": [1.0, 1.0, float("nan")]}, {"loss": [1.0, 1.0, 0.9]})
    assert r.first["step"] == 2


@pytest.mark.parametrize(
    "content, what",
    [("{not json", "not a readable JSON"), ('{"a": 1}', "no list of values"), ("[]", "an empty history"),
     ('["x"]', "dict of lists")],
)
def test_bad_histories_name_the_file(tmp_path, content, what):
    p = tmp_path / "h.json"
    p.write_text(content)
    with pytest.raises(CurveError, match=what) as e:
        load_history(p)
    assert str(p) in str(e.value)


def test_missing_file_and_unknown_series(tmp_path):
    with pytest.raises(CurveError, match="no such file"):
        load_history(tmp_path / "nope.json")
    with pytest.raises(CurveError, match="not in both"):
        compare_curves(A, B, series=["grad_norm"])


def test_summary_at_80_columns_keeps_one_line_per_series(tmp_path):
    # the timing note used to fold over six lines at 80 columns
    import io

    from ascendify import report
    from ascendify.precision.compare_render import print_curves

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(A))
    b.write_text(json.dumps(B))
    con = report.console(file=io.StringIO(), width=80)
    print_curves(compare_curves(a, b, tolerance=0.05), console=con)
    rows = [line for line in con.file.getvalue().splitlines() if "│" in line]
    assert [r.split("│")[0].strip() for r in rows] == ["train_loss", "val_acc", "epoch_time"], rows
    assert "timing: not judged" in con.file.getvalue()


NANOGPT_LOG = """\
step 0: train loss 4.1740, val loss 4.1789
iter 0: loss 4.1816, time 912.63ms, mfu -100.00%
iter 10: loss 3.2345, time 12.34ms, mfu 3.21%
loss_scale 65536.0 (not a loss)
iter 20: loss 2.9000, time 12.30ms, mfu 3.22%
"""
WORD_LM_LOG = """\
| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 45.12 | loss  7.63 | ppl  2050.15
| epoch   1 |   400/ 2983 batches | lr 20.00 | ms/batch 44.80 | loss  6.90 | ppl   992.27
| end of epoch   1 | time: 140.1s | valid loss  6.10 | valid ppl   445.86
"""


def test_training_logs_in_the_common_loss_forms(tmp_path):
    a = tmp_path / "gpt_a.log"
    a.write_text(NANOGPT_LOG)
    h = load_history(a)
    assert h.series["loss"] == ([0.0, 10.0, 20.0], [4.1816, 3.2345, 2.9])
    assert h.series["train_loss"] == ([0.0], [4.174]) and h.series["val_loss"] == ([0.0], [4.1789])
    w = tmp_path / "lm.txt"
    w.write_text(WORD_LM_LOG)
    h = load_history(w)
    assert h.series["loss"][1] == [7.63, 6.9] and h.series["val_loss"][1] == [6.1]
    b = tmp_path / "gpt_b.log"
    b.write_text(NANOGPT_LOG.replace("2.9000", "3.1000"))
    r = compare_curves(a, b, tolerance=0.05)
    assert r.verdict == "divergence" and r.first["series"] == "loss" and r.first["step"] == 20.0


def test_training_log_with_a_regex(tmp_path, capsys):
    from ascendify.cli import main

    for name, last in (("a.out", "0.50"), ("b.out", "0.51")):
        (tmp_path / name).write_text(f"e=0 ce=0.90 acc=0.1\ne=1 ce=0.70 acc=0.3\ne=2 ce={last} acc=0.5\n")
    pattern = r"e=(?P<step>\d+) ce=(?P<ce>\S+) acc=(?P<acc>\S+)"
    h = load_history(tmp_path / "a.out", pattern)
    assert h.series["ce"] == ([0.0, 1.0, 2.0], [0.9, 0.7, 0.5]) and h.series["acc"][1] == [0.1, 0.3, 0.5]
    assert load_history(tmp_path / "a.out", r"ce=(\S+)").series["loss"][1] == [0.9, 0.7, 0.5]
    code = main(["compare", "--curves", str(tmp_path / "a.out"), str(tmp_path / "b.out"), "--pattern", pattern,
                 "-o", str(tmp_path / "rep")])  # fmt: skip
    assert code == 0
    doc = json.loads((tmp_path / "rep" / "curves.json").read_text())
    assert doc["verdict"] == "match" and set(doc["series"]) == {"ce", "acc"}


@pytest.mark.parametrize(
    ("text", "pattern", "what"),
    [
        ("epoch 1 acc 0.5\n", None, "no values found in the log with the 'loss X' forms"),
        ("loss 1\n", "loss (", "not a valid regex"),
        ("loss 1\n", "loss", "has no group"),
        ("loss 1\n", r"ce=(\S+)", "no values found in the log with --pattern"),
    ],
)
def test_bad_logs_name_the_file(tmp_path, text, pattern, what):
    p = tmp_path / "train.log"
    p.write_text(text)
    with pytest.raises(CurveError, match=what) as e:
        load_history(p, pattern)
    assert str(p) in str(e.value)


def test_summary_says_when_one_run_stopped_early_and_when_a_value_is_nan():
    from ascendify.precision.compare_render import curves_summary_lines

    short = compare_curves({"loss": [2.0, 1.5, 1.2, 1.0]}, {"loss": [2.0, 1.5]})
    assert short.verdict == "match"  # the steps both have agree
    lines = curves_summary_lines(short)
    assert lines[0].startswith("MATCH") and "loss 2 of 4 (B stops early)" in lines[1]
    nan = compare_curves({"loss": [2.0, 1.5, 1.2]}, {"loss": [2.0, 1.5, float("nan")]})
    head = curves_summary_lines(nan)[0]
    assert head.startswith("DIVERGENCE: loss leaves the band at step 2") and "one is NaN" in head
    assert "inf%" not in head and len(curves_summary_lines(nan)) == 1  # same lengths: no extra line
