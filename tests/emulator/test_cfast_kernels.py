"""The C++ kernels (``ops/cfast.cpp``): the same results, counts, memory figures and errors as the Python path."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from ascendify.emulator.ops import cfast  # noqa: E402
from ascendify.emulator.ops.kernels import cxx_returns  # noqa: E402
from ascendify.emulator.ops.opinfo import info  # noqa: E402

needs_cxx = pytest.mark.skipif(cfast.module(build_if_missing=False) is None and not shutil.which("c++"),
                               reason="no C++ compiler: the Python kernels serve")


@needs_cxx
def test_the_kernels_are_built_where_a_compiler_is(emulator):
    assert cfast.module() is not None, cfast.why()
    assert emulator.report()["kernels"] == "c++"


def test_which_ops_the_cxx_kernel_takes():
    aten = torch.ops.aten
    assert cxx_returns(info(aten.add.Tensor)) == [-1]
    assert cxx_returns(info(aten.add_.Tensor)) == [0]  # returns the npu tensor it wrote
    assert cxx_returns(info(aten.native_batch_norm.default)) == [-1, -1, -1]
    assert cxx_returns(info(aten.view.default)) == []  # a view: the CPU view kernel on the npu tensor
    assert cxx_returns(info(aten.add.out)) is None  # out=: resizing rules stay in Python
    assert cxx_returns(info(aten.bernoulli.default)) is None  # random: the device generator
    assert cxx_returns(info(aten.index.Tensor)) is None  # CPU indices allowed: Python decides
    assert cxx_returns(info(aten.lgamma.default)) is None  # no NPU kernel: reported by Python


@needs_cxx
def test_results_alias_and_counts(fresh_report):
    a, b = torch.randn(3, 4, device="npu"), torch.randn(3, 4, device="npu")
    c = a + b
    assert c.device.type == "npu"
    assert torch.equal(c.cpu(), a.cpu() + b.cpu())
    before = a.cpu().clone()
    assert a.add_(1) is a  # in place: the same npu tensor back, its memory written
    assert torch.equal(a.cpu(), before + 1)
    assert a.data_ptr() == a.view(12).data_ptr()
    x = torch.randn(2, 3, 8, 8, device="npu")
    out, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)  # two fresh results
    ref, ref_idx = torch.nn.functional.max_pool2d(x.cpu(), 2, return_indices=True)
    assert out.device.type == idx.device.type == "npu"
    assert torch.equal(out.cpu(), ref) and torch.equal(idx.cpu(), ref_idx)
    assert torch.equal(torch.cat([a, b]).cpu(), torch.cat([a.cpu(), b.cpu()]))  # a tensor list
    assert cfast.module().counts().get("add.Tensor", 0) >= 1  # served in C++, counted there
    ops = fresh_report.report()["ops"]
    assert ops.get("add.Tensor", 0) >= 1 and ops.get("add_.Tensor", 0) >= 1 and ops.get("cat", 0) >= 1


@needs_cxx
def test_memory_follows_cxx_results(fresh_report):
    base = torch.npu.memory_allocated()
    x = torch.ones(256, 256, device="npu")
    y = x * 2  # served by the C++ kernel
    assert torch.npu.memory_allocated() - base == x.untyped_storage().nbytes() + y.untyped_storage().nbytes()
    assert torch.npu.max_memory_allocated() >= torch.npu.memory_allocated()
    del y
    assert torch.npu.memory_allocated() - base == x.untyped_storage().nbytes()
    fresh_report.settings.memory_capacity = torch.npu.memory_allocated() + 1024
    with pytest.raises(torch.OutOfMemoryError, match="NPU out of memory"):
        x * 3


@needs_cxx
def test_unusual_calls_get_the_python_errors(fresh_report):
    a = torch.randn(3, 4, device="npu")
    with pytest.raises(RuntimeError, match="npu"):
        a + torch.randn(3, 4)  # a non-scalar CPU tensor mixed in
    assert torch.equal((a + torch.tensor(2.0)).cpu(), a.cpu() + 2)  # a CPU scalar is fine
    fresh_report.settings.float64 = "error"
    with pytest.raises(Exception, match="float64"):
        a.to(torch.float64) * 2


@needs_cxx
def test_settings_that_need_per_op_checks_take_the_python_kernels(fresh_report):
    big = torch.full((4,), 60000.0, dtype=torch.float16, device="npu")
    big * 2  # C++: no check
    assert not fresh_report.report()["fp16_overflow_events"]
    fresh_report.settings.fp16_overflow = "warn"
    with pytest.warns(RuntimeWarning, match="overflow"):
        big * 2
    assert fresh_report.report()["fp16_overflow_events"]
    fresh_report.settings.fp16_overflow = "off"
    fresh_report.settings.overflow_mode = "saturation"
    assert torch.isfinite((big * 2).cpu()).all()


SCRIPT = textwrap.dedent("""
    import torch, ascendify.emulator as emu
    emu.enable()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).npu()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x, y = torch.randn(4, 3, 8, 8).npu(), torch.randint(0, 5, (4,)).npu()
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    print(repr(loss.item()), float(sum(p.double().sum() for p in m.cpu().parameters())))
    import sys
    print(emu.report()["kernels"], file=sys.stderr)
""")


@needs_cxx
def test_training_is_bit_identical_with_and_without_the_cxx_kernels(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    outs = []
    for flag in ("1", "0"):
        env = {**os.environ, cfast.ENV: flag, "ASCENDIFY_EMULATE_FLOAT64": "allow"}
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.strip())
        want = "c++" if flag == "1" else "python (ASCENDIFY_EMULATE_CKERNELS=0)"
        assert r.stderr.strip().splitlines()[-1] == want

    assert outs[0] == outs[1]


@needs_cxx
def test_convolution_runs_the_cpu_convolution_in_cxx(fresh_report):
    """convolution's overrideable pair: the C++ kernel runs aten.convolution / convolution_backward on aliases."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1, groups=1)
    x = torch.randn(2, 3, 8, 8)
    ref = conv(x)
    ref.sum().backward()
    npu = torch.nn.Conv2d(3, 4, 3, padding=1).npu()
    npu.load_state_dict(conv.state_dict())
    before = dict(cfast.module().counts())
    out = npu(x.npu())
    out.sum().backward()
    assert torch.equal(out.cpu(), ref.detach())
    assert torch.equal(npu.weight.grad.cpu(), conv.weight.grad) and torch.equal(npu.bias.grad.cpu(), conv.bias.grad)
    after = cfast.module().counts()
    for name in ("convolution_overrideable", "convolution_backward_overrideable"):
        assert after.get(name, 0) > before.get(name, 0)
    with pytest.raises(RuntimeError, match="npu"):  # a CPU weight next to an npu input: the Python kernel's error
        torch.nn.functional.conv2d(x.npu(), conv.weight.detach())


def test_without_a_working_compiler_the_python_kernels_serve_and_say_why(tmp_path):
    """A failed build: the Python kernels, the reason in the report, and no second build in the next process."""
    code = ("import torch, ascendify.emulator as emu; emu.enable(); "
            "assert torch.equal((torch.ones(3, device='npu') * 2).cpu(), torch.full((3,), 2.0)); "
            "print(emu.report()['kernels'])")
    env = {**os.environ, "CXX": "/bin/false", "ASCENDIFY_CACHE": str(tmp_path), cfast.ENV: "1"}
    said = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        said.append(r.stdout.strip().splitlines()[-1])
    assert said[0].startswith("python (the C++ build failed")
    assert "remove" in said[1] and ".failed to try again" in said[1]  # the second process did not build again
    assert list((tmp_path / "cfast").glob("*.failed"))
