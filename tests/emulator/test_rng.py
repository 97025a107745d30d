"""Randomness on npu comes from the npu generator, as on hardware: torch.npu.manual_seed fixes dropout masks
(native_dropout takes no generator argument) and every other random op, whatever the CPU generator did."""

import pytest
import torch
import torch.nn.functional as F

RANDOM_OPS = {
    "nn.Dropout": lambda: torch.nn.Dropout(0.5).train()(torch.ones(64, device="npu")),
    "dropout2d": lambda: F.dropout2d(torch.ones(1, 16, 2, 2, device="npu"), 0.5),
    "sdpa dropout": lambda: F.scaled_dot_product_attention(*(torch.ones(1, 2, 4, 4, device="npu"),) * 3,
                                                           dropout_p=0.5),
    "bernoulli_": lambda: torch.empty(32, device="npu").bernoulli_(0.5),
    "rand": lambda: torch.rand(8, device="npu"),
    "randperm": lambda: torch.randperm(16, device="npu"),
    "multinomial": lambda: torch.multinomial(torch.ones(8, device="npu"), 4),
    "rrelu": lambda: F.rrelu(-torch.ones(16, device="npu"), training=True),
}


@pytest.mark.parametrize("name", list(RANDOM_OPS))
def test_npu_seed_alone_fixes_random_ops(name):
    op = RANDOM_OPS[name]
    torch.manual_seed(1)
    torch.npu.manual_seed(42)
    first = op().cpu()
    torch.manual_seed(2)  # a different CPU seed, and CPU draws, before the same npu seed
    torch.rand(11)
    torch.npu.manual_seed(42)
    again = op().cpu()
    assert torch.equal(first, again)
    torch.npu.manual_seed(43)
    assert not torch.equal(first, op().cpu())


def test_dropout_masks_follow_the_npu_stream_and_leave_the_cpu_stream_alone():
    x = torch.ones(256, device="npu")
    torch.manual_seed(3)
    expected_cpu = torch.rand(4)
    torch.manual_seed(3)
    torch.npu.manual_seed(7)
    a = F.dropout(x, 0.5).cpu()
    b = F.dropout(x, 0.5).cpu()
    assert not torch.equal(a, b)  # the npu stream advanced
    assert torch.equal(torch.rand(4), expected_cpu)  # the CPU stream did not
    torch.npu.manual_seed(7)
    assert torch.equal(F.dropout(x, 0.5).cpu(), a)
    assert torch.equal(F.dropout(x, 0.5).cpu(), b)


def test_dropout_replays_from_a_saved_npu_rng_state():
    x = torch.ones(128, device="npu")
    torch.npu.manual_seed(5)
    F.dropout(x, 0.3)
    state = torch.npu.get_rng_state()
    mask = F.dropout(x, 0.3).cpu()
    torch.rand(5)
    torch.npu.set_rng_state(state)
    assert torch.equal(F.dropout(x, 0.3).cpu(), mask)


def test_npu_dropout_draws_what_the_cpu_draws_from_the_same_seed():
    """The CPU kernel runs on the npu generator's state: a seed gives the CPU's mask (and scaling) exactly."""
    x = torch.randn(4, 32)
    torch.manual_seed(11)
    cpu = F.dropout(x, 0.25)
    torch.npu.manual_seed(11)
    npu = F.dropout(x.npu(), 0.25)
    assert npu.device.type == "npu" and torch.equal(npu.cpu(), cpu)


def test_dropout_backward_uses_the_forward_mask():
    torch.npu.manual_seed(0)
    x = torch.ones(64, device="npu", requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())  # grad = mask * scale = y for x = 1


def test_an_npu_generator_seeds_npu_random_ops_and_reports_its_device():
    g = torch.Generator("npu")
    assert g.device == torch.device("npu", 0) and isinstance(g, torch.Generator)
    assert torch.Generator(device="npu:1").device == torch.device("npu", 1)
    g.manual_seed(21)
    a = torch.randn(6, device="npu", generator=g)
    state = g.get_state()
    b = torch.empty(6, device="npu").uniform_(generator=g)
    torch.npu.manual_seed(0)  # the device's default stream is another stream
    g.manual_seed(21)
    assert torch.equal(torch.randn(6, device="npu", generator=g).cpu(), a.cpu())
    g.set_state(state)
    assert torch.equal(torch.empty(6, device="npu").uniform_(generator=g).cpu(), b.cpu())
    assert a.device.type == "npu"


def test_cpu_generators_are_unchanged_and_bad_npu_indices_fail():
    g = torch.Generator()
    assert type(g) is torch._C.Generator and g.device.type == "cpu"
    assert isinstance(torch.default_generator, torch.Generator)
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.Generator("npu:63")


def test_dtensor_gets_a_philox_shaped_state_and_can_move_its_offset():
    # DTensor's RNG tracker reads the state as Philox's (uint64 seed, uint64 offset), as torch_npu's is, and
    # moves the offset to give each shard its own stream (a 5056-byte state failed its assertion)
    from ascendify.emulator.device import rng

    torch.npu.manual_seed(7)
    state = rng.get_philox_state(0)
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert state.view(torch.uint64).tolist() == [7, 0]
    first = torch.rand(4, device="npu").cpu()
    assert rng.get_philox_state(0).view(torch.uint64).tolist()[1] > 0  # drawn since: another position
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="npu").cpu(), first)  # a handed-out state restores exactly

    def at(offset: int) -> torch.Tensor:
        s = state.clone()
        s[8:] = torch.tensor([offset], dtype=torch.int64).view(torch.uint8)
        torch.npu.set_rng_state(s)
        return torch.rand(4, device="npu").cpu()

    assert torch.equal(at(1000), at(1000)) and not torch.equal(at(1000), at(2000))  # a function of the offset
    assert torch.npu.get_rng_state().numel() > 16  # everyone else: the engine's state (exact in any process)
