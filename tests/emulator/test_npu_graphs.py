"""NPU graphs on the emulated npu (issue 19 §3): capture and replay on static buffers; what aclgraph refuses
(training capture, random ops, host synchronisation) is refused with the op named."""

import pytest
import torch

from ascendify.emulator.api.npu.graphs import GraphCaptureError


@pytest.fixture(scope="module")
def model(emulator):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).npu().eval()


def test_capture_then_replay_writes_the_new_result_into_the_same_static_output(model):
    static_in = torch.randn(3, 4, device="npu")
    g = torch.npu.NPUGraph()
    with torch.no_grad(), torch.npu.graph(g):
        assert torch.npu.is_current_stream_capturing()
        static_out = model(static_in)
    assert not torch.npu.is_current_stream_capturing()
    where = static_out.data_ptr()
    for seed in (1, 2):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        static_in.copy_(x.npu())
        g.replay()
        with torch.no_grad():
            want = model(x.npu()).cpu()
        assert static_out.data_ptr() == where
        assert torch.equal(static_out.cpu(), want)
    g.reset()
    with pytest.raises(RuntimeError, match="before a capture"):
        g.replay()


def test_make_graphed_callables_replays_for_new_arguments_and_refuses_training(model):
    with torch.no_grad():
        graphed = torch.npu.make_graphed_callables(model, (torch.randn(3, 4, device="npu"),), num_warmup_iters=1)
        x = torch.randn(3, 4, device="npu")
        got = graphed(x).cpu()
        ref = torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, model[0].weight, model[0].bias)),
                                         model[2].weight, model[2].bias).cpu()
    assert torch.equal(got, ref)
    with pytest.raises(GraphCaptureError, match="training step"):
        torch.npu.make_graphed_callables(torch.nn.Linear(4, 4).npu(), (torch.randn(3, 4, device="npu"),))


@pytest.mark.parametrize("bad, named", [
    (lambda y: y.sum().item(), "tensor.item()"),
    (lambda y: y.cpu(), "to the CPU"),
    (lambda y: y.nonzero(), "nonzero"),
    (lambda y: torch.randn(3, device="npu"), "randn"),
    (lambda y: torch.npu.synchronize(), "torch.npu.synchronize()"),
    (lambda y: torch.npu.current_stream().synchronize(), "Stream.synchronize()"),
])
def test_ops_that_cannot_be_captured_are_named(model, bad, named):
    g = torch.npu.NPUGraph()
    with pytest.raises(GraphCaptureError, match="cannot be captured") as e, torch.no_grad(), torch.npu.graph(g):
        bad(model(torch.ones(3, 4, device="npu")))
    assert named in str(e.value)
    assert not torch.npu.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="before a capture"):
        g.replay()


def test_training_capture_is_refused_with_the_op(model):
    m = torch.nn.Linear(4, 2).npu()
    g = torch.npu.NPUGraph()
    with pytest.raises(GraphCaptureError, match="capturing a training step.*inference only"), torch.npu.graph(g):
        m(torch.ones(1, 4, device="npu"))
