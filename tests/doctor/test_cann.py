"""Finding the CANN toolkit (environment variables, default prefixes, both layouts) and ordering its versions."""

from __future__ import annotations

import pytest

from ascendify.doctor import cann

from .fakes import ARCH, make_cann


def test_found_through_ascend_home_path_with_version_and_set_env(tmp_path):
    home = make_cann(tmp_path, "8.0.RC2")
    out = cann.find({"ASCEND_HOME_PATH": str(home)}, ARCH, root=str(tmp_path))
    assert out["version"] == "8.0.RC2"
    assert out["found_via"] == "$ASCEND_HOME_PATH"
    assert out["home"] == str(home)
    assert out["set_env"] == str(tmp_path / "usr/local/Ascend/ascend-toolkit/set_env.sh")
    assert out["version_file"]["package_name"] == "Ascend-cann-toolkit"


def test_found_at_default_prefix_without_any_variable(tmp_path):
    make_cann(tmp_path, "8.3.RC1")
    out = cann.find({}, ARCH, root=str(tmp_path))
    assert (out["version"], out["found_via"]) == ("8.3.RC1", "default prefix")


def test_cann_85_layout_and_parent_prefix_in_ascend_home(tmp_path):
    home = make_cann(tmp_path, "8.5.0", layout="cann")
    out = cann.find({"ASCEND_HOME": str(tmp_path / "usr/local/Ascend")}, ARCH, root="/nonexistent-root")
    assert out["version"] == "8.5.0"
    assert out["home"] == str(home)
    assert out["set_env"] == str(home / "set_env.sh")


def test_a_variable_pointing_nowhere_is_recorded_and_the_default_is_used(tmp_path):
    make_cann(tmp_path, "9.1.0")
    out = cann.find({"ASCEND_HOME_PATH": str(tmp_path / "gone")}, ARCH, root=str(tmp_path))
    assert out["version"] == "9.1.0"
    assert {"path": str(tmp_path / "gone"), "via": "$ASCEND_HOME_PATH", "exists": False, "version": None} in out[
        "candidates"
    ]


def test_version_cfg_fallback_reads_the_release_after_the_colon(tmp_path):
    home = tmp_path / "tk"
    home.mkdir()
    (home / "version.cfg").write_text("# comment\nruntime_running_version=[7.7.T20.0.B210:8.1.RC1]\n")
    assert cann.read_version(str(home), ARCH)["version"] == "8.1.RC1"


def test_nothing_installed(tmp_path):
    out = cann.find({}, ARCH, root=str(tmp_path))
    assert out["home"] is None and out["version"] is None


@pytest.mark.parametrize(
    "older,newer",
    [("8.0.T6", "8.0.RC2"), ("8.0.RC2", "8.0.RC3"), ("8.0.RC3", "8.0.0"), ("8.0.0", "8.1.RC1"),
     ("9.2.0-beta.2", "9.2.0"), ("8.5.0.alpha002", "8.5.0"), ("7.0.0", "8.0.RC1")],
)
def test_version_order(older, newer):
    assert cann.version_key(older) < cann.version_key(newer)
