"""The planted-defect suite: each twin of the reference model (``models.py``) carries one defect that survives an
end-to-end check (output cosine >= 0.98); lockstep and statistics-mode dump+compare must each name the planted
module as the first divergence, and flag nothing in the twins that compute the same thing, in three settings:

* ``cpu``: target fp32 on the CPU, in this process;
* ``aten_default``: the target (and, for lockstep, the golden too: one process) with non-vectorised CPU kernels
  (``ATEN_CPU_CAPABILITY=default``, read at torch import, hence a subprocess); the dumps are compared against the
  golden dump made with vectorised kernels, so rounding really differs;
* ``npu_bf16``: target on the emulated NPU under bf16 autocast (a subprocess: enabling the emulator is
  process-wide), golden fp32 on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from precision_conftest import HERE, planted_models, planted_runner

CASES = list(planted_models.TWINS)
METHODS = ("lockstep", "dump")


def _subprocess_suite(setting: str, out, golden=None, env_extra=None) -> dict:
    env = {**os.environ, **(env_extra or {})}
    env.pop("ASCENDIFY_EMULATE", None)
    cmd = [sys.executable, str(HERE / "planted_runner.py"), setting, str(out)] + ([str(golden)] if golden else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    base = tmp_path_factory.mktemp("planted")
    cache: dict[str, dict] = {}

    def get(setting: str) -> dict:
        if setting not in cache:
            if setting == "cpu":
                cache[setting] = planted_runner.run_suite("cpu", base / "cpu")
            elif setting == "aten_default":
                get("cpu")  # its golden dump, made with vectorised kernels
                cache[setting] = _subprocess_suite(
                    "aten_default", base / "aten", base / "cpu" / "golden", {"ATEN_CPU_CAPABILITY": "default"}
                )
                assert cache[setting]["capability"] == "DEFAULT"
            else:
                cache[setting] = _subprocess_suite(setting, base / setting)
        return cache[setting]

    return get


@pytest.mark.parametrize("setting", ["cpu", "aten_default", "npu_bf16"])
@pytest.mark.parametrize("case", CASES)
def test_planted_defect_is_the_first_divergence(suites, setting, case):
    r = suites(setting)["cases"][case]
    assert r["end_to_end_cosine"] >= 0.98, "a planted defect must survive an end-to-end cosine check"
    for method in METHODS:
        got = r[method]
        if r["planted"] is None:
            assert got["flagged"] == 0 and got["first"] is None, (method, got)
        else:
            assert got["first"] == r["planted"], (method, got)


def test_every_defect_survives_an_end_to_end_check():
    """The defects are hard ones: the final output alone does not reveal them (cosine >= 0.98, in fact > 0.99)."""
    import torch

    from ascendify.precision.metrics import cosine

    x = planted_models.inputs()
    with torch.no_grad():
        ref = planted_models.reference().eval()(x)
        from ascendify.precision.lockstep import copy_weights

        for name in CASES:
            t = planted_models.twin(name).eval()
            copy_weights(planted_models.reference(), t)
            assert cosine(t(x), ref) >= 0.98, name


@pytest.mark.parametrize("setting", ["cpu", "aten_default", "npu_bf16"])
@pytest.mark.parametrize("case", list(planted_models.BACKWARD_TWINS))
def test_backward_defect_is_the_first_divergence(suites, setting, case):
    """The backward twins in each setting (the emulated NPU under bf16 autocast included): named first, phase
    backward; the clean ones flag nothing."""
    r = suites(setting)["backward"][case]
    if r["planted"] is None:
        assert r["verdict"] == "match" and r["flagged"] == 0, r
    else:
        assert r["first"] == r["planted"] and r["phase"] == "backward", r
