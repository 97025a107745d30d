"""Outputs (JSON records, CSV, plots), 'bench compare', and the command line."""

import io
import json
import subprocess
import sys

import pytest

from ascendify import cli
from ascendify.bench import render


def _rec(**kw):
    r = {"model": "resnet50", "mode": "train", "precision": "fp32", "batch_size": 32, "device": "cuda",
         "device_name": "Tesla V100-SXM2-16GB", "emulated": False, "status": "ok", "throughput": 85.2,
         "throughput_spread": {"min": 84.0, "max": 86.0, "stdev": 1.0}, "label": None,
         "latency_ms": {"p50": 375.0, "p90": 380.0, "p99": 390.0}, "peak_memory_bytes": 8 << 30, "mfu": 0.3}
    r.update(kw)
    return r


def test_compare_ratios_and_missing_rows():
    a = [_rec(), _rec(batch_size=64, throughput=100.0)]
    b = [_rec(device="npu", device_name="Ascend910B3", throughput=92.75,
              latency_ms={"p50": 345.0, "p90": 1, "p99": 1}, peak_memory_bytes=4 << 30),
         _rec(precision="bf16", throughput=150.0)]
    rows = {(r["batch_size"], r["precision"]): r for r in render.compare(a, b)}
    r = rows[(32, "fp32")]
    assert r["throughput_ratio"] == pytest.approx(92.75 / 85.2)
    assert r["latency_ratio"] == pytest.approx(345 / 375) and r["memory_ratio"] == 0.5
    assert r["status"] == "ok"
    assert rows[(64, "fp32")]["status_b"] == "missing" and rows[(64, "fp32")]["throughput_ratio"] is None
    assert rows[(32, "bf16")]["status_a"] == "missing"


def test_load_records_errors(tmp_path):
    with pytest.raises(render.CompareError, match="no such file"):
        render.load_records(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(render.CompareError, match="bad.json: not a JSON file"):
        render.load_records(bad)
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(render.CompareError, match="no 'records' list"):
        render.load_records(tmp_path / "other.json")
    (tmp_path / "partial.json").write_text('{"records": [{"model": "x"}]}')
    with pytest.raises(render.CompareError, match="record 0 lacks mode"):
        render.load_records(tmp_path / "partial.json")


def test_write_all_files_and_emulated_label(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [_rec(precision=p, batch_size=b, throughput=t, emulated=True, device="npu", label=render.EMULATED_LABEL)
            for p, b, t in (("fp32", 2, 10.0), ("fp32", 4, 18.0), ("bf16", 2, 15.0), ("bf16", 4, 30.0))]
    recs.append(_rec(batch_size=4096, status="oom", throughput=None, latency_ms=None))
    written = render.write_all(recs, json_path=tmp_path / "r.json", out_dir=tmp_path / "out")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["emulated"] is True and doc["label"] == "emulated: host speed, not NPU speed"
    assert len(doc["records"]) == 5
    csv_text = (tmp_path / "out" / "bench.csv").read_text().splitlines()
    assert csv_text[0].startswith("model,mode,precision,batch_size") and len(csv_text) == 6
    for png in ("throughput_vs_batch.png", "latency_vs_batch.png", "amp_vs_fp32.png"):
        assert (tmp_path / "out" / png).read_bytes()[:4] == b"\x89PNG", png
    assert len(written) == 6
    assert "emulated: host speed" in render.title_for(recs)


def test_terminal_table_keeps_the_emulated_label_and_shows_no_empty_column():
    from ascendify import report

    emulated = [_rec(device="npu", device_name="Ascend910B3", emulated=True, mfu=None, batch_size=b)
                for b in (4, 8)]
    con = report.console(file=io.StringIO(), width=80)
    con.print(render.render_table(emulated))
    text = con.file.getvalue()
    assert "[emulated: host speed, not NPU speed]" in text  # was swallowed as rich markup
    assert "MFU" not in text and "part " not in text and max(map(len, text.splitlines())) <= 80
    con = report.console(file=io.StringIO(), width=120)
    con.print(render.render_table([_rec()]))
    assert "MFU %" in con.file.getvalue() and "30" in con.file.getvalue()


def test_cli_compare(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"records": [_rec()]}))
    (tmp_path / "b.json").write_text(json.dumps({"records": [_rec(throughput=170.4, device="npu")]}))
    rc = cli.main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                   "--json", str(tmp_path / "c.json")])
    assert rc == 0
    assert "2" in capsys.readouterr().out  # the ratio 2.0 is shown
    assert json.loads((tmp_path / "c.json").read_text())["rows"][0]["throughput_ratio"] == pytest.approx(2.0)
    assert cli.main(["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "zz.json")]) == 2
    assert "zz.json: no such file" in capsys.readouterr().err


def test_front_end_imports_no_torch():
    code = "import sys, ascendify.commands.bench; assert 'torch' not in sys.modules; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"


def test_cli_bad_input(capsys):
    pytest.importorskip("torch")
    assert cli.main(["bench", "--model", "vgg99", "--quick"]) == 2
    assert "unknown model 'vgg99'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--precision", "fp8"])
    from ascendify.core import devices

    if not devices.is_cuda_available():
        assert cli.main(["bench", "--device", "cuda", "--quick"]) == 3
        assert "no CUDA device" in capsys.readouterr().err


def test_cli_bench_run_writes_outputs(tmp_path, tiny_model_file, capsys):
    rc = cli.main(["bench", "--model", f"{tiny_model_file}:linear", "--mode", "train,infer", "--quick",
                   "--batch-size", "2,4", "--image-size", "8", "--device", "cpu", "--threads", "1",
                   "--json", str(tmp_path / "cpu.json"), "--out", str(tmp_path / "o")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "tiny_models.py:linear" in out and "samples/s" in out
    doc = json.loads((tmp_path / "cpu.json").read_text())
    recs = doc["records"]
    assert {(r["mode"], r["batch_size"]) for r in recs} == {("train", 2), ("train", 4), ("infer", 2), ("infer", 4)}
    for r in recs:
        assert set(r) >= {"model", "mode", "precision", "batch_size", "device", "device_name", "throughput",
                          "latency_ms", "peak_memory_bytes", "mfu", "emulated"}
        assert r["steps"] == 3 and r["warmup"] == 1 and r["repeats"] == 1 and r["threads"] == 1
    assert (tmp_path / "o" / "bench.csv").exists() and (tmp_path / "o" / "throughput_vs_batch.png").exists()


def test_cli_loader_quick(tmp_path, capsys):
    rc = cli.main(["bench", "loader", "--quick", "--device", "cpu", "--workers", "0", "--samples", "8",
                   "--batch-size", "4", "--batches", "2", "--epochs", "1", "--image-size", "24",
                   "--compute-rate", "1000000", "--json", str(tmp_path / "l.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "recommended: workers=0 batch=4" in out and "starves" in out
    doc = json.loads((tmp_path / "l.json").read_text())
    assert doc["recommendation"]["setting"]["num_workers"] == 0
    assert doc["feeds_compute"]["status"] == "fail"
    assert doc["augmentation"]["cpu"] > 0 and doc["augmentation"]["device"] > 0


@pytest.mark.slow
def test_cli_find_max_batch_on_emulated_npu(tmp_path, tiny_model_file, npu, capsys):
    rc = cli.main(["bench", "--model", f"{tiny_model_file}:cnn", "--device", "npu", "--emulate-memory", "1M",
                   "--quick", "--batch-size", "4", "--image-size", "16", "--find-max-batch", "--no-flops",
                   "--json", str(tmp_path / "m.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "largest batch that fits:" in out and "emulated: host speed, not NPU speed" in out
    recs = json.loads((tmp_path / "m.json").read_text())["records"]
    best = [r for r in recs if r["status"] == "max-batch"][0]
    assert best["batch_size"] >= 4 and best["emulated"] is True
    statuses = {p["batch_size"]: p["status"] for p in best["probes"]}
    assert statuses[best["batch_size"]] == "ok" and statuses[best["batch_size"] + 1] == "oom"


def test_cli_outputs_are_checked_before_measuring(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert cli.main(["bench", "--quick", "--model", "resnet18", "--out", str(tmp_path / "afile")]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err
    assert cli.main(["bench", "loader", "--quick", "--json", str(tmp_path / "afile" / "x.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    # a folder that cannot be made under a file: said before measuring, not a traceback after it
    assert cli.main(["bench", "--quick", "--model", "resnet18", "--out", str(tmp_path / "afile" / "b")]) == 2
    assert "afile is a file, not a folder" in capsys.readouterr().err


def test_cli_loader_quick_keeps_the_settings_given(tmp_path, capsys):
    rc = cli.main(["bench", "loader", "--quick", "--device", "cpu", "--workers", "1", "--persistent", "no",
                   "--prefetch", "3", "--samples", "8", "--batch-size", "4", "--batches", "2", "--epochs", "1",
                   "--image-size", "24", "--json", str(tmp_path / "l.json")])
    assert rc == 0
    rows = json.loads((tmp_path / "l.json").read_text())["rows"]
    assert {(r["setting"]["persistent_workers"], r["setting"]["prefetch_factor"]) for r in rows} == {(False, 3)}


def test_compare_pair_by_config_pairs_an_original_with_its_port():
    # the original and the migrated copy carry different model labels: by model they never pair
    a = [_rec(model="cuda_project/models.py:GPT", inputs="(2x16:int64)"),
         _rec(model="cuda_project/models.py:GPT", mode="infer", throughput=300.0)]
    b = [_rec(model="npu_project/models.py:GPT", inputs="(2x16:int64)", throughput=170.4),
         _rec(model="npu_project/models.py:GPT", mode="infer", throughput=600.0),
         _rec(model="npu_project/models.py:GPT", batch_size=64)]
    by_model = render.compare(a, b)
    assert not any(r["throughput_ratio"] for r in by_model) and len(by_model) == 5
    rows = render.compare(a, b, pair_by="config")
    assert [(r["mode"], r["batch_size"], r["status"]) for r in rows] == [
        ("train", 32, "ok"), ("infer", 32, "ok"), ("train", 64, "skip")]
    assert rows[0]["throughput_ratio"] == pytest.approx(2.0) and rows[1]["throughput_ratio"] == pytest.approx(2.0)
    assert rows[0]["model"] == "cuda_project/models.py:GPT | npu_project/models.py:GPT"
    assert rows[0]["model_a"].startswith("cuda_") and rows[0]["model_b"].startswith("npu_")
    # a different batch structure is another configuration
    other = render.compare(a[:1], [_rec(model="x", inputs="(2x16:int64, (1x2x16:float32))")], pair_by="config")
    assert [r["status"] for r in other] == ["skip", "skip"]
    with pytest.raises(ValueError, match="pair_by"):
        render.compare(a, b, pair_by="label")


def test_cli_compare_pair_by_config(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"records": [_rec(model="orig.py:LM")]}))
    (tmp_path / "b.json").write_text(json.dumps({"records": [_rec(model="port.py:LM", throughput=42.6)]}))
    args = ["bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json", str(tmp_path / "c.json")]
    assert cli.main([*args, "--pair-by", "config"]) == 0
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["pair_by"] == "config" and len(doc["rows"]) == 1
    assert doc["rows"][0]["throughput_ratio"] == pytest.approx(0.5)
    out = capsys.readouterr().out
    assert "orig.py:LM" in out and "port.py:LM" in out


def test_a_cpu_quick_run_fits_80_columns_in_one_part():
    # a user model (its FACTORY spec is the name) on the CPU, memory measured, no MFU: the MiB column was a second
    # part of its own
    from ascendify import report

    recs = [_rec(model="mlp.py:build", device="cpu", device_name="AMD EPYC", mfu=None, precision=p,
                 throughput=12345.6, throughput_spread={"min": 11000.0, "max": 13000.0, "stdev": 9.0},
                 latency_ms={"p50": 2480.0, "p90": 2500.0, "p99": 2600.0}, peak_memory_bytes=123456 << 20)
            for p in ("fp32", "bf16")]
    con = report.console(file=io.StringIO(), width=80)
    con.print(render.render_table(recs))
    text = con.file.getvalue()
    assert "part " not in text and max(map(len, text.splitlines())) <= 80, text
    assert "MiB" in text and "123,456" in text and "2480/2600" in text
    assert "status" not in text  # every run ended ok
    # a sweep with an OOM shows the status column (and may split to fit it)
    con = report.console(file=io.StringIO(), width=120)
    con.print(render.render_table([*recs, _rec(status="oom", throughput=None, latency_ms=None, mfu=None)]))
    assert "status" in con.file.getvalue() and "oom" in con.file.getvalue()
    assert render.csv_rows(recs)[0]["status"] == "ok"  # the records themselves keep it


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", ""], "expected a model name"),  # ran nothing and exited 0
        (["--image-size", "0"], "--image-size: must be at least 1, got 0"),  # 0 was the default, silently
        (["--seq-len", "0"], "--seq-len: must be at least 1, got 0"),
        (["--num-classes", "0"], "--num-classes: must be at least 1, got 0"),
        (["--threads", "0"], "--threads: must be at least 1, got 0"),
    ],
)
def test_values_that_were_ignored_in_silence_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--quick", "--device", "cpu", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_bad_emulated_memory_size_is_a_bad_argument_said_first(capsys):
    pytest.importorskip("torch")
    # was exit 3 ("the device is not usable"), after the emulator had started
    assert cli.main(["bench", "--quick", "--device", "npu", "--emulate-memory", "abc", "--model", "resnet18"]) == 2
    assert "--emulate-memory: not a memory size: 'abc'" in capsys.readouterr().err
