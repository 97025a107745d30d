"""Version-matrix verdicts (data/compat_matrix.json)."""

from __future__ import annotations

from ascendify.doctor import matrix


def test_listed_combination_is_ok():
    v = matrix.verdict("2.12.0", "2.12.0", "9.1.0", "3.11.7")
    assert v["status"] == "ok" and v["problems"] == []


def test_torch_mismatch_fails_with_the_torch_to_install():
    v = matrix.verdict("2.13.0+cpu", "2.12.0", "9.1.0", "3.11.7")
    assert v["status"] == "fail"
    assert "pip install torch==2.12.0" in v["fix"]


def test_cann_older_than_required_fails_and_names_the_post_release_for_it():
    v = matrix.verdict("2.7.1", "2.7.1.post8", "8.5.0", "3.11.2")
    assert v["status"] == "fail"
    assert "upgrade CANN to 9.1.0" in v["fix"]
    assert "torch-npu==2.7.1.post2" in v["fix"]  # the 2.7.1 build listed for CANN 8.5.0


def test_cann_newer_than_release_warns():
    v = matrix.verdict("2.7.1", "2.7.1", "9.1.0", "3.10.1")
    assert v["status"] == "warn"
    assert "torch-npu==2.7.1.post8" in v["fix"]


def test_python_outside_wheel_range_fails():
    v = matrix.verdict("2.4.0", "2.4.0", "8.0.RC3", "3.12.1")
    assert v["status"] == "fail"
    assert any("Python 3.12.1" in p for p in v["problems"])


def test_range_row_and_dev_builds():
    assert matrix.cann_relation("6.3.RC1-8.0.RC2", "7.0.0") == "range-ok"
    assert matrix.cann_relation("6.3.RC1-8.0.RC2", "8.0.0") == "range-out"
    assert matrix.row_for("2.5.1.dev20250320")["torch_npu"] == "2.5.1"
    assert matrix.base("2.13.0+cpu") == "2.13.0"


def test_unknown_torch_npu_warns_and_no_torch_npu_skips():
    assert matrix.verdict("3.0.0", "3.0.0", "9.9.0", "3.12.0")["status"] == "warn"
    v = matrix.verdict("2.12.0", None, "9.1.0", "3.11.0")
    assert v["status"] == "skip" and v["suggested_torch_npu"] == ["2.12.0"]
