"""Training machinery on the emulated npu: optimizers (for-loop, foreach, fused), activation checkpointing,
torch.compile (eager, aot_eager), DataLoader with pin_memory and workers, AMP with GradScaler."""

import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from .models import SmallCNN


def _step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("impl", [{"foreach": False}, {"foreach": True}, {"fused": True}])
@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.SGD])
def test_optimizer_paths_match_cpu(cls, impl):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    m_npu = copy.deepcopy(model).npu()
    kw = {"lr": 0.01, **({"momentum": 0.9} if cls is torch.optim.SGD else {})}
    opt_cpu, opt_npu = cls(model.parameters(), **kw, **impl), cls(m_npu.parameters(), **kw, **impl)
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 1, 0])
    for _ in range(3):
        _step(model, opt_cpu, x, y)
        _step(m_npu, opt_npu, x.npu(), y.npu())
    for a, b in zip(model.parameters(), m_npu.parameters(), strict=True):
        assert b.device.type == "npu"
        assert torch.equal(a, b.detach().cpu())


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_gives_the_same_gradients(reentrant):
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).npu()
    x = torch.randn(3, 4, device="npu", requires_grad=True)
    block(x).pow(2).sum().backward()
    ref = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    checkpoint(block, x, use_reentrant=reentrant).pow(2).sum().backward()
    for r, p in zip(ref, block.parameters(), strict=True):
        assert torch.equal(r.cpu(), p.grad.cpu())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_eager_backends(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).npu()
    x = torch.randn(3, 4, device="npu")
    expected = model(x)
    compiled = torch.compile(model, backend=backend)
    out = compiled(x)
    assert out.device.type == "npu" and torch.equal(out.cpu(), expected.cpu())
    out.sum().backward()
    assert model[0].weight.grad.device.type == "npu"


def test_dataloader_with_pin_memory_and_workers():
    ds = torch.utils.data.TensorDataset(torch.arange(24.0).reshape(12, 2), torch.arange(12))
    dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)
    seen = []
    for x, y in dl:
        xn = x.npu(non_blocking=True)
        assert xn.device.type == "npu"
        seen.extend(y.tolist())
    assert seen == list(range(12))


def test_amp_with_grad_scaler_trains_in_fp16_and_bf16():
    for dtype in (torch.float16, torch.bfloat16):
        torch.manual_seed(0)
        model = SmallCNN().npu()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.npu.amp.GradScaler(enabled=dtype == torch.float16)
        x, y = torch.randn(4, 3, 12, 12, device="npu"), torch.randint(0, 10, (4,), device="npu")
        before = model.head.weight.detach().clone()
        for _ in range(2):
            with torch.npu.amp.autocast(dtype=dtype):
                out = model(x)
                assert out.dtype == dtype
                loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        assert model.head.weight.dtype == torch.float32
        assert not torch.equal(before.cpu(), model.head.weight.detach().cpu())


def test_grad_scaler_skips_a_step_with_inf_gradients():
    p = torch.nn.Parameter(torch.ones(2, device="npu"))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.npu.amp.GradScaler(init_scale=4.0)
    scaler.scale((p * torch.tensor(float("inf"), device="npu")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(p.detach().cpu(), torch.ones(2))
    assert scaler.get_scale() == 2.0
