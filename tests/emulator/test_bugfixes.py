"""Regressions found by the OpInfo sweep and by use: SDPA's gradient w.r.t. the mask, sparse tensors at the
device boundary, enabling after a CPU backward, a bare ``"npu"`` after ``set_device``, backward on ``npu:1``."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import ascendify.emulator as emu
from ascendify.emulator import NotEmulatedError
from ascendify.emulator.errors import LayoutNotEmulatedError

# --- 1. scaled_dot_product_attention with a mask that requires grad ------------------------------------


def _sdpa_run(device, q, k, v, mask, **kw):
    leaves = [t.clone().to(device).requires_grad_(t.is_floating_point()) for t in (q, k, v, mask)]
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3], **kw)
    (out * torch.linspace(-1, 1, out.shape[-1], device=device)).sum().backward()
    return [out.detach().cpu()] + [None if t.grad is None else t.grad.cpu() for t in leaves]


@pytest.mark.parametrize("mask_kind", ["float_requires_grad", "bool"])
def test_sdpa_backward_with_a_mask_equals_the_cpu_bit_for_bit(mask_kind):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    mask = torch.randn(2, 3, 5, 5, generator=g) if mask_kind != "bool" else torch.rand(5, 5, generator=g) > 0.3
    if mask_kind == "bool":
        mask[:, 0] = True  # no fully masked row
    cpu = _sdpa_run("cpu", q, k, v, mask)
    npu = _sdpa_run("npu", q, k, v, mask)
    if mask_kind == "float_requires_grad":
        assert npu[4] is not None and npu[4].abs().sum() > 0  # the mask got its gradient
    for c, n in zip(cpu, npu, strict=True):
        assert (c is None and n is None) or torch.equal(c, n)


# --- 2. sparse tensors stop at the device boundary ----------------------------------------------------


@pytest.mark.parametrize("make", [
    pytest.param(lambda: torch.eye(3, device="npu").to_sparse(), id="to_sparse"),
    pytest.param(lambda: torch.eye(3, device="npu").to_sparse_csr(), id="to_sparse_csr"),
    pytest.param(lambda: torch.eye(3).to_sparse().to("npu"), id="sparse_cpu_to_npu"),
    # a compressed (CSR...) CPU tensor moved to npu is built without reaching the device's kernels: it fails at
    # its first use instead
    pytest.param(lambda: torch.eye(3).to_sparse_csr().npu().to_dense(), id="csr_cpu_to_npu_then_used"),
    pytest.param(lambda: torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (2, 2), device="npu"),
                 id="sparse_coo_tensor"),
])
@pytest.mark.filterwarnings("ignore:Sparse:UserWarning")
def test_sparse_tensors_raise_a_clear_not_emulated_error(make):
    with pytest.raises(LayoutNotEmulatedError, match="sparse tensors are not emulated on the npu device") as ei:
        make()
    assert isinstance(ei.value, NotEmulatedError) and isinstance(ei.value, NotImplementedError)


def test_sparse_ops_from_the_opinfo_sweep_fail_at_the_boundary_and_leave_the_device_working():
    dense = torch.eye(3, device="npu")
    with pytest.raises(NotEmulatedError, match="sparse tensors are not emulated"):
        torch.sparse.mm(torch.eye(3).to_sparse().to("npu"), dense)
    with pytest.raises(NotEmulatedError, match="sparse tensors are not emulated"):
        torch.sparse.sampled_addmm(torch.eye(3).to_sparse_csr().to("npu"), dense, dense)
    assert torch.equal((dense @ dense).cpu(), torch.eye(3))


# --- 3. enabling after a CPU backward -----------------------------------------------------------------


def test_enabling_after_a_cpu_backward_works():
    # the engine's device queues were sized before npu existed; npu backward runs on the caller's thread
    code = (
        "import torch\n"
        "x = torch.ones(2, requires_grad=True); (x * 2).sum().backward()\n"
        "import ascendify.emulator as emu\n"
        "emu.enable()\n"
        "w = torch.ones(2, device='npu', requires_grad=True)\n"
        "(w * torch.arange(2.0, device='npu')).sum().backward()\n"
        "print('GRAD', w.grad.device, w.grad.tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDIFY_EMULATE")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "GRAD npu:0 [0.0, 1.0]", r.stdout


# --- 4. a bare "npu" means the current device ---------------------------------------------------------


@pytest.fixture
def device_one(fresh_report):
    if torch.npu.device_count() < 3:
        pytest.skip("needs 3 emulated devices (ASCENDIFY_EMULATE_DEVICES)")
    torch.npu.set_device(1)
    try:
        yield
    finally:
        torch.npu.set_device(0)


def test_to_npu_after_set_device_lands_on_the_current_device(device_one):
    one = torch.device("npu", 1)
    cpu = torch.arange(4.0)
    assert cpu.to("npu").device == one
    assert cpu.to(torch.device("npu")).device == one
    assert cpu.to(device="npu", dtype=torch.float16).device == one
    assert torch.zeros(2, device="npu").device == one and cpu.npu().device == one
    m = torch.nn.Linear(2, 2).to("npu")
    assert {p.device for p in m.parameters()} == {one}
    x = torch.ones(2, device="npu:1")
    assert x.to("npu") is x and torch.equal(cpu.to("npu").cpu(), cpu)
    assert torch.ones(1, device="npu:0").to("npu").device == one  # moved, as on a real device
    with torch.npu.device(2):
        assert cpu.to("npu").device == torch.device("npu", 2)
    assert cpu.to("npu:0").device == torch.device("npu", 0)  # an explicit index is kept


def test_a_lazy_module_moves_after_set_device(device_one):
    """Once a device other than 0 has been current, ``Tensor.to`` is wrapped; a LazyModule's uninitialised
    parameters still allow ``.to`` (PyTorch checks the method by identity), under a torch-function mode too."""
    from torch.overrides import TorchFunctionMode

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    m = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.ReLU())
    with Passthrough():
        m.to(torch.float32)
    m.to("npu")
    out = m(torch.randn(2, 5, device="npu"))
    assert out.shape == (2, 3) and out.device == torch.device("npu", 1)


def test_to_npu_in_single_device_mode_stays_on_device_zero(device_one):
    emu.settings.single_device = True
    x = torch.arange(3.0).to("npu")
    assert x.device == torch.device("npu", 0) and x.to("npu") is x


def test_to_npu_on_device_zero_is_pytorchs_own():
    torch.npu.set_device(0)
    x = torch.ones(2, device="npu")
    assert x.device == torch.device("npu", 0) and x.to("npu") is x


# --- 5. backward on npu:N > 0 -------------------------------------------------------------------------


def test_backward_on_a_second_device_gives_the_cpus_gradients(fresh_report):
    emu.settings.single_device = False
    w = torch.arange(3.0, device="npu:1", requires_grad=True)
    (w * w).sum().backward()
    assert w.grad.device == torch.device("npu", 1) and torch.equal(w.grad.cpu(), torch.tensor([0.0, 2.0, 4.0]))
    (g,) = torch.autograd.grad((w * 3).sum(), w)
    assert g.device == torch.device("npu", 1) and torch.equal(g.cpu(), torch.full((3,), 3.0))
    v = torch.ones(2, device="npu", requires_grad=True)
    (v * 2).sum().backward()
    assert torch.equal(v.grad.cpu(), torch.full((2,), 2.0))


def test_assigning_data_across_cpu_and_npu_works_as_on_an_npu():
    # `p.data = p.data.npu()` and FSDP2's `tensor.data = tensor.to(device)` (pytorch/examples' FSDP2 example
    # died there: "incompatible tensor type"); torch_npu registers _has_compatible_shallow_copy_type for this
    p = torch.nn.Parameter(torch.arange(3.0))
    p.data = p.data.to("npu")
    assert p.device.type == "npu" and p.cpu().tolist() == [0.0, 1.0, 2.0] and isinstance(p, torch.nn.Parameter)
    p.data = torch.ones(2)
    assert p.device.type == "cpu" and p.tolist() == [1.0, 1.0]
    assert not torch._has_compatible_shallow_copy_type(torch.ones(1, device="npu"), torch.ones(1, device="meta"))
