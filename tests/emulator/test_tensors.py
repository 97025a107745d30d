"""npu tensors behave like device tensors: copies, views, in-place ops, printing, pickling, save/load, errors."""

import copy
import io
import pickle

import pytest
import torch

from ascendify.emulator.device import tensors


def test_retag_is_zero_copy_both_ways():
    cpu = torch.arange(6.0)
    npu = tensors.adopt(cpu)
    assert npu.device == torch.device("npu:0")
    assert npu.data_ptr() == cpu.data_ptr()
    back = tensors.cpu_alias(npu)
    assert back.device.type == "cpu" and back.data_ptr() == cpu.data_ptr()
    back[0] = 42
    assert npu[0].item() == 42


def test_cpu_alias_keeps_lazy_conjugate_bit():
    z = torch.tensor([1 + 2j, 3 - 1j], device="npu")
    assert torch.equal(tensors.cpu_alias(z.conj()), torch.tensor([1 - 2j, 3 + 1j]))
    assert torch.equal(z.conj().cpu(), torch.tensor([1 - 2j, 3 + 1j]))


def test_to_and_cpu_copy_and_keep_values():
    cpu = torch.randn(3, 4)
    npu = cpu.to("npu")
    assert npu.is_npu and not npu.is_cpu
    assert npu.data_ptr() != cpu.data_ptr()
    assert torch.equal(npu.cpu(), cpu)
    assert npu.cpu().data_ptr() != npu.data_ptr()
    assert torch.equal(npu.to(torch.float16).cpu(), cpu.half())
    assert cpu.npu().device == torch.device("npu:0")
    assert torch.nn.Linear(2, 2).npu().weight.device.type == "npu"


def test_views_share_storage_and_in_place_ops_reach_the_base():
    x = torch.zeros(4, 4, device="npu")
    v = x[1:3, ::2]
    v.add_(1)
    x.t()[0].fill_(7)
    expected = torch.zeros(4, 4)
    expected[1:3, ::2] += 1
    expected.t()[0].fill_(7)
    assert torch.equal(x.cpu(), expected)
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.unsqueeze_(0)
    assert x.shape == (1, 4, 4)


def test_out_argument_is_resized_like_on_a_device():
    a = torch.arange(6.0, device="npu").reshape(2, 3)
    out = torch.empty(0, device="npu")
    torch.add(a, 1, out=out)
    assert out.shape == (2, 3) and torch.equal(out.cpu(), torch.arange(1.0, 7.0).reshape(2, 3))


def test_printing_shows_the_device():
    text = repr(torch.tensor([1.5, 2.0], device="npu"))
    assert "device='npu:0'" in text and "1.5000" in text


def test_pickle_and_deepcopy_keep_device_and_values():
    x = torch.randn(3, device="npu")
    for y in (copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y.device == x.device and torch.equal(y.cpu(), x.cpu())
        assert y.data_ptr() != x.data_ptr()
    m = copy.deepcopy(torch.nn.Linear(2, 2).npu())
    assert m.weight.device.type == "npu"


@pytest.mark.parametrize(
    "map_location, expected",
    [
        (None, "npu:0"),
        ("cpu", "cpu"),
        ("npu", "npu:0"),
        ("npu:1", "npu:1"),
        ("device:npu:0", "npu:0"),
        ({"npu:0": "cpu"}, "cpu"),
        ({"npu:0": "npu:1"}, "npu:1"),
        (lambda storage, loc: storage, "cpu"),
    ],
)
def test_save_load_with_every_map_location(map_location, expected):
    if map_location == "device:npu:0":  # a torch.device (built here: "npu" exists only once enabled)
        map_location = torch.device("npu:0")
    x = torch.arange(8.0, device="npu")
    buf = io.BytesIO()
    torch.save({"x": x, "view": x[2:5]}, buf)
    buf.seek(0)
    d = torch.load(buf, map_location=map_location) if map_location is not None else torch.load(buf)
    assert str(d["x"].device) == expected and str(d["view"].device) == expected
    assert torch.equal(d["x"].cpu(), torch.arange(8.0))
    assert torch.equal(d["view"].cpu(), torch.arange(2.0, 5.0))


def test_cpu_checkpoint_loads_onto_npu():
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(3, 2).state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, map_location="npu:0")
    assert {t.device.type for t in sd.values()} == {"npu"}


def test_mixing_a_cpu_tensor_into_an_npu_op_fails_like_a_device():
    x = torch.ones(3, device="npu")
    with pytest.raises(RuntimeError, match="same device.*npu:0 and cpu"):
        x + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3).mul_(x)
    with pytest.raises(RuntimeError, match="same device"):
        torch.nn.Linear(3, 2)(x)
    # as on CUDA: 0-dim CPU tensors act as scalars, and indices may live on the CPU
    assert (x + torch.tensor(2.0)).device.type == "npu"
    assert torch.equal(x[torch.tensor([0, 2])].cpu(), torch.ones(2))


def test_two_npu_devices_do_not_mix():
    a, b = torch.ones(2, device="npu:0"), torch.ones(2, device="npu:1")
    assert (b * 2).device == torch.device("npu:1")
    with pytest.raises(RuntimeError, match="npu:0 and npu:1"):
        a + b
    assert torch.equal(b.to("npu:0").cpu(), torch.ones(2))


def test_device_index_beyond_the_emulated_count_is_an_error():
    n = torch.npu.device_count()
    with pytest.raises(RuntimeError, match=f"Invalid device ordinal npu:{n}"):
        torch.zeros(1, device=f"npu:{n}")
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.npu.set_device(n)
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.ones(1).to(f"npu:{n + 3}")


def test_set_device_changes_where_new_tensors_go():
    try:
        torch.npu.set_device(1)
        assert torch.npu.current_device() == 1
        assert torch.empty(2, device="npu").device == torch.device("npu:1")
        with torch.npu.device(0):
            assert torch.ones(1).npu().device == torch.device("npu:0")
    finally:
        torch.npu.set_device(0)


def test_common_ops_match_cpu():
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    n = x.npu()
    checks = [
        lambda t: t.max(dim=1).values, lambda t: t.argsort(dim=0), lambda t: t[t > 0],
        lambda t: torch.nonzero(t > 0.5), lambda t: t.cumsum(1), lambda t: t.softmax(-1),
        lambda t: torch.cat([t, t], 0), lambda t: t.unique(), lambda t: t.T.contiguous().view(-1),
        lambda t: torch.where(t > 0, t, torch.zeros_like(t)), lambda t: t.clamp(-0.5, 0.5).sum(),
        lambda t: t.to(memory_format=torch.channels_last) if t.dim() == 4 else t.reshape(1, 5, 6, 1),
        lambda t: t.index_add(0, torch.tensor([0, 0, 1, 1, 2], device=t.device), t),
    ]
    for f in checks:
        assert torch.equal(f(x), f(n).cpu())
    assert n.sum().item() == x.sum().item()
    assert n.tolist() == x.tolist()


def test_lstm_and_gru_cells_run_and_agree_with_cpu():
    torch.manual_seed(0)
    for cls in (torch.nn.LSTM, torch.nn.GRU):
        m = cls(3, 4)
        x = torch.randn(5, 2, 3, requires_grad=True)
        out_cpu, _ = m(x)
        out_cpu.sum().backward()
        g_cpu = x.grad.clone()
        mn, xn = copy.deepcopy(m).npu(), x.detach().npu().requires_grad_()
        out_npu, _ = mn(xn)
        out_npu.sum().backward()
        torch.testing.assert_close(out_npu.cpu(), out_cpu, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(xn.grad.cpu(), g_cpu, rtol=1e-5, atol=1e-6)


def test_single_device_mode_maps_every_index_to_device_zero(fresh_report):
    fresh_report.settings.single_device = True  # what torchrun workers get (LOCAL_RANK set)
    torch.npu.set_device(1)
    try:
        w = torch.ones(3, device="npu:1", requires_grad=True)
        # the current device is where tensors land (FSDP2 and DTensor compare the two)
        assert w.device == torch.device("npu:0") and torch.npu.current_device() == 0
        (w * 2).sum().backward()  # autograd runs: PyTorch's engine only drives device 0 of a Python backend
        assert torch.equal(w.grad.cpu(), torch.full((3,), 2.0))
        assert torch.npu.memory_allocated(1) == torch.npu.memory_allocated(0)
    finally:
        torch.npu.set_device(0)
