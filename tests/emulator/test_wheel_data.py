"""The NPU kernel coverage and autocast lists derived from the torch_npu 2.13.0 wheel (data/npu_kernels.json),
checked against the running torch 2.13 dispatcher, used by the emulator's fidelity checks, and the project's own
torch_npu ports passing ``ascendify emulate --fidelity error``."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from ascendify.core import knowledge
from ascendify.emulator import NpuFidelityError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "tests"))

import build_kb  # noqa: E402
from example_runs import EXAMPLES, TINY, clean_env, summary_of  # noqa: E402

_has = torch._C._dispatch_has_kernel_for_dispatch_key
_ALL_OPS = frozenset(n[len("aten::"):] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))


@pytest.fixture(scope="module")
def data():
    return knowledge.load("npu_kernels")


def test_provenance_names_the_wheel_and_how(data):
    prov = data["provenance"]
    assert prov["wheel"] == "torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert len(prov["wheel_sha256"]) == 64 and prov["torch_npu_version"] == "2.13.0"
    assert prov["torch_version"] == "2.13.0" and len(prov["how"]) >= 4
    assert "npu_kernels.json" in (REPO / "src/ascendify/data/PROVENANCE.md").read_text()


def test_counts_match_the_lists(data):
    c = data["counts"]
    assert c["npu_registered"] == len(data["npu_registered"]) > 1000
    assert c["without_npu_kernel"] == len(data["without_npu_kernel"])
    assert c["kernels_that_fall_back_to_cpu"] == len(data["kernels_that_fall_back_to_cpu"])
    for policy in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote", "banned", "fp32_append_dtype"):
        assert c["autocast"][policy] == len(data["autocast"][policy])
    assert not set(data["npu_registered"]) & set(data["without_npu_kernel"])


def test_ops_named_are_ops_of_this_torch(data):
    for name in data["npu_registered"] + data["without_npu_kernel"] + data["covered_by_composite"]:
        assert name in _ALL_OPS or name + ".default" in _ALL_OPS or name in (
            "copy_memory_", "empty_with_format"), name


def test_no_op_reported_missing_has_a_composite_kernel_in_the_live_dispatcher(data):
    # a composite kernel runs on PrivateUse1 too: such an op must never be reported as "not on NPU"; except
    # torch's _foreach_* slow path over a per-tensor op that itself falls back (_foreach_lgamma -> lgamma)
    for name in data["without_npu_kernel"]:
        qual = "aten::" + name
        if name.startswith("_foreach_") and _has(qual, "CompositeExplicitAutograd"):
            assert name[len("_foreach_"):] in data["without_npu_kernel"], name
            continue
        assert not _has(qual, "CompositeImplicitAutograd"), name
        assert not _has(qual, "CompositeExplicitAutograd"), name


@pytest.mark.parametrize("op", ["argmax", "argmax.out", "_foreach_mul_.Tensor", "_foreach_mul.Tensor",
                                "_foreach_rsqrt", "add.Tensor", "mul_.Tensor", "native_layer_norm"])
def test_ops_that_run_on_an_npu(op):
    assert knowledge.has_npu_kernel(op), op


@pytest.mark.parametrize("op", ["lgamma", "digamma", "nonzero_static", "logit", "unfold_backward",
                                "_foreach_lgamma"])
def test_ops_that_fall_back_to_the_cpu(op):
    assert not knowledge.has_npu_kernel(op), op


def test_registered_kernels_that_fall_back_carry_torch_npu_s_own_message(data):
    msgs = {o: m["message"] for m in data["cpu_fallback_messages"] for o in m["ops"]}
    for op in data["kernels_that_fall_back_to_cpu"]:
        assert op in data["npu_registered"] or op.split(".")[0] in {n.split(".")[0] for n in data["npu_registered"]}
        assert "CPU" in msgs[op], op


def test_autocast_lists_are_disjoint_and_exist_in_torch(data):
    ac = knowledge.npu_autocast_lists()
    seen: set[str] = set()
    for policy in ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote", "banned"):
        for op in ac[policy]:
            assert op not in seen, op
            seen.add(op)
            assert op in _ALL_OPS or op + ".default" in _ALL_OPS, op
    seen |= set(ac["fp32_append_dtype"])
    assert seen == set(ac["registration_order"]) and len(ac["registration_order"]) == 104
    for target in ac["fp32_append_dtype"].values():
        assert target in _ALL_OPS, target


def test_autocast_policies_read_from_the_compiled_kernels():
    ac = knowledge.npu_autocast_lists()
    assert {"conv2d", "mm", "linear", "scaled_dot_product_attention"} <= set(ac["lower_precision_fp"])
    assert {"exp", "layer_norm", "mse_loss", "logsumexp"} <= set(ac["fp32"])
    assert {"softmax.int", "sum", "cumsum"} <= set(ac["fp32_set_opt_dtype"])
    assert ac["promote"] == ["addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler",
                             "index_put", "tensordot", "scatter_add"]
    assert ac["fp32_append_dtype"] == {"norm.Scalar": "norm.ScalarOpt_dtype",
                                      "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
    assert ac["banned"] == ["binary_cross_entropy"]


def test_emulator_registers_autocast_kernels_for_exactly_the_wheel_s_ops(fresh_report):
    from ascendify.emulator.ops import autocast

    ac = knowledge.npu_autocast_lists()
    registered = {n[len("aten::"):].removesuffix(".default") for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("aten::") and _has(n, "AutocastPrivateUse1")}
    assert registered == set(ac["registration_order"])
    assert autocast.policy_table("npu")["addcmul"] == "promote" and "wheel" in autocast.PROVENANCE["npu"]
    with torch.autocast("npu", dtype=torch.bfloat16):
        x = torch.ones(2, 2, device="npu")
        assert torch.mm(x, x).dtype == torch.bfloat16 and torch.exp(x.bfloat16()).dtype == torch.float32


def test_argmax_and_foreach_with_a_tensor_scalar_run_under_fidelity_error(fresh_report):
    fresh_report.settings.fidelity = "error"
    x = torch.tensor([[1.0, 3.0, 2.0], [5.0, 4.0, 0.0]], device="npu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.argmax(x, dim=1).tolist() == [1, 0]
        assert x.argmax().item() == 3
        grads = [torch.ones(2, device="npu"), torch.ones(3, device="npu")]
        torch._foreach_mul_(grads, torch.tensor(0.5, device="npu"))  # what clip_grad_norm_ does
    assert [g.tolist() for g in grads] == [[0.5, 0.5], [0.5, 0.5, 0.5]]
    assert fresh_report.report()["rejected"] == {}


def test_a_kernel_that_falls_back_on_the_npu_is_reported(fresh_report):
    fresh_report.settings.fidelity = "error"
    with pytest.raises(NpuFidelityError, match="aten::logit"):
        torch.logit(torch.full((2,), 0.25, device="npu"))


def test_wheel_step_refuses_a_file_that_is_not_a_torch_npu_wheel(tmp_path, capsys):
    fake = tmp_path / "torch_npu-0.0-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("torch_npu/__init__.py", "")
    with pytest.raises(ValueError, match="npu_native_functions_by_codegen.yaml is missing"):
        build_kb.build_from_wheel(fake, tmp_path / "no-reference")  # the wheel is read before the reference
    # with a reference folder that only looks right, the wheel is refused before anything is built or written
    ref = tmp_path / "ref"
    ref.mkdir()
    for name in build_kb.REFERENCE_FILES:
        (ref / name).write_text("not read")
    data = {f.name: f.stat().st_mtime_ns for f in build_kb.OUT.iterdir()}
    assert build_kb.main(["--wheel", str(fake), "--reference", str(ref)]) == 3
    assert "is missing" in capsys.readouterr().err
    assert {f.name: f.stat().st_mtime_ns for f in build_kb.OUT.iterdir()} == data


def test_build_kb_checks_its_arguments_in_the_order_given_and_names_what_is_missing(tmp_path, capsys):
    none, gone = str(tmp_path / "none.whl"), str(tmp_path / "gone")

    def err(*argv: str) -> str:
        assert build_kb.main(list(argv)) == 2
        return capsys.readouterr().err.strip()

    assert err("--wheel", none, "--reference", gone) == f"error: --wheel {none}: no such wheel file"
    assert err("--reference", gone, "--wheel", none).startswith(f"error: --reference {gone}: no such folder")
    # no --reference: the wheel the user named comes first, then the default folder, named as the default
    assert err("--wheel", none) == f"error: --wheel {none}: no such wheel file"
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "torch_npu_api.json").write_text("{}")
    assert err("--reference", str(tmp_path / "ref")) == (
        f"error: --reference {tmp_path / 'ref'}: not the reference data: npu_api_support_2.13.json, "
        "npu_aten_op_coverage.json, transfer_to_npu_patches.json, compat_matrix.csv missing")
    (tmp_path / "w.whl").write_text("text")
    assert err("--wheel", str(tmp_path / "w.whl")).endswith("w.whl: not a wheel (not a zip archive)")
    # the command line, as a user types it (a clone with nothing beside it has no default reference folder)
    r = subprocess.run([sys.executable, str(REPO / "tools/build_kb.py"), "--wheel", none],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr == f"error: --wheel {none}: no such wheel file\n"


def test_default_reference_is_named_as_the_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build_kb, "DEFAULT_REFERENCE", tmp_path / "shared" / "reference")
    assert build_kb.main([]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: no --reference given, and the default {tmp_path / 'shared' / 'reference'}: no such folder")


@pytest.mark.reference
def test_the_shipped_data_is_what_build_kb_makes_of_the_reference(reference_dir, tmp_path, monkeypatch):
    # the package data is generated, not edited by hand: rebuilt from ../shared/reference it is byte for byte the
    # same (npu_aten_op_coverage.json is the wheel step's, tested above; its reference digest is checked here)
    monkeypatch.setattr(build_kb, "OUT", tmp_path)
    monkeypatch.setattr(build_kb, "ROOT", tmp_path.parent)
    build_kb.build(reference_dir)
    built = sorted(f.name for f in tmp_path.glob("*.json"))
    assert built == ["compat_matrix.json", "npu_api_support.json", "npu_aten_op_coverage.json",
                     "torch_npu_api.json", "transfer_to_npu_patches.json"]
    for name in built:
        shipped = REPO / "src/ascendify/data" / name
        new = json.loads((tmp_path / name).read_text())
        if name == "npu_aten_op_coverage.json":
            assert json.loads(shipped.read_text())["provenance"]["sha256_16"] == new["provenance"]["sha256_16"]
        else:
            assert (tmp_path / name).read_bytes() == shipped.read_bytes(), name


def test_fallback_messages_are_classified():
    out = build_kb._fallback_messages({
        "CAUTION: The operator aten::logit, aten::logit_ and aten::logit.out is currently not supported on the "
        "NPU backend. Now this operator will fallback to run on the CPU and may have performance implications.",
        "CAUTION: The operator aten::_masked_softmax need to be met the following conditions to run on the NPU "
        "backend: 1. dim = -1. Now this operator will fallback to run on the CPU. Please check your params.",
        "unrelated string",
    })
    assert [(o["ops"], o["when"]) for o in out] == [
        (["_masked_softmax"], "conditional"), (["logit", "logit.out", "logit_"], "always")]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train_gpt.py", "train_imagenet.py", "infer.py"])
def test_the_project_s_own_npu_ports_pass_fidelity_error(name, tmp_path):
    argv = [sys.executable, "-m", "ascendify", "emulate", "--fidelity", "error", "--json", str(tmp_path / "e.json"),
            "--", "python", str(EXAMPLES / "npu_project" / name), *TINY[name]]
    argv += {"train_imagenet.py": ["--checkpoint", "", "--epochs", "1"], "train_gpt.py": ["--steps", "2"]}.get(name, [])
    proc = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
    summary_of(proc)
    assert "aten::argmax" not in proc.stderr and "CAUTION" not in proc.stderr, proc.stderr[-2000:]
    rep = json.loads((tmp_path / "e.json").read_text())
    assert rep["rejected"] == {} and rep["cpu_fallback_on_npu"] == {}, rep
