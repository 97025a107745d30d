"""torch.compile on the emulated npu (issue 19 §2): inductor and torch_npu's backends compile and give the
CPU's compiled numbers; graph breaks and recompilations are in the summary with their first cause."""

import pytest
import torch

from ascendify.emulator import render


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def _train(model, dev, backend=None, steps=2):
    torch._dynamo.reset()  # Module.forward compiled for the other device would count as a recompilation
    model = model.to(dev)
    kw = {"backend": backend} if backend else {}
    c = torch.compile(model, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to(dev)
    losses = []
    for _ in range(steps):
        loss = c(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, c


@pytest.fixture(scope="module")
def cpu_losses():
    return _train(_model(), "cpu")[0]


def test_default_backend_trains_on_npu_with_the_cpu_compiled_numbers(fresh_report, cpu_losses):
    losses, c = _train(_model(), "npu")
    assert losses == cpu_losses  # the same CPU inductor code, on aliases of the npu memory
    rep = fresh_report.report()["graph_mode"]
    assert rep["compiled_graphs"] == 2  # forward and backward, through inductor
    assert rep["graph_ops"] > 0 and rep["graph_breaks"] == 0 and rep["recompiles"] == 0
    out = c(torch.ones(2, 8, device="npu"))
    assert out.device.type == "npu" and out.requires_grad


def _convnet():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


def test_conv_training_where_inductor_changes_the_saved_layouts(fresh_report):
    # CPU inductor may save convolution outputs channels-last; the backward must be compiled for the strides
    # the compiled forward really produced (AOTAutograd restrides the backward's example inputs)
    from torch._inductor import config

    def train(dev):
        torch._dynamo.reset()
        m = _convnet().to(dev)
        c, opt = torch.compile(m), torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(2)).to(dev)
        out = []
        for _ in range(2):
            loss = c(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    with config.patch(force_layout_optimization=True):  # what inductor picks for conv-heavy nets (ResNets)
        assert train("npu") == pytest.approx(train("cpu"), rel=1e-5)


@pytest.mark.parametrize("backend", ["npu", "npugraph_ex", "npugraphs"])
def test_torch_npu_backends_are_registered_and_run(fresh_report, backend):
    import torch._dynamo

    torch._dynamo.reset()
    assert backend in torch._dynamo.list_backends(exclude_tags=())

    def f(x, y):
        return torch.sin(x) * y + 1

    x, y = torch.randn(5), torch.randn(5)
    got = torch.compile(f, backend=backend)(x.npu(), y.npu())
    assert got.device.type == "npu"
    assert torch.allclose(got.cpu(), f(x, y), atol=1e-6)
    assert fresh_report.report()["graph_mode"]["compiled_graphs"] == 1


def test_unknown_backend_is_dynamos_invalid_backend():
    from torch._dynamo.exc import InvalidBackend

    with pytest.raises(InvalidBackend, match="npu_nonexistent"):
        torch.compile(lambda x: x + 1, backend="npu_nonexistent")(torch.ones(1, device="npu"))


def test_recompile_loop_and_graph_breaks_are_reported_with_the_first_cause(fresh_report):
    import torch._dynamo

    torch._dynamo.reset()

    def f(x, tag):
        x = x * 2
        print("", end="")  # a graph break: print is not traceable
        return x + len(tag)

    c = torch.compile(f, backend="npugraphs")
    x = torch.ones(3, device="npu")
    with torch._dynamo.config.patch(recompile_limit=3, automatic_dynamic_shapes=False):
        for tag in ("a", "bb", "ccc", "dddd", "eeeee"):  # a new constant each call: a guard fails each time
            c(x, tag)
    g = fresh_report.report()["graph_mode"]
    assert g["graph_breaks"] >= 1 and "`print`" in g["first_graph_break"]
    assert g["recompiles"] >= 3
    loop = g["recompile_loop"]
    assert loop is not None and loop["limit"] == 3 and "_in_f_" in loop["function"]
    assert "tag ==" in loop["reason"] and "\n" not in loop["reason"]
    lines = render.graph_mode_lines(g)
    assert lines[0].startswith("recompile loop:") and "first cause" in lines[0]
    assert any(line.startswith("graph breaks:") and "print" in line for line in lines)
