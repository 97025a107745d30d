"""The tracer, in this process on CPU tensors: steps and the stop, the user's line of each op (backward ops credited
to the forward line that made them), the Python-level facts, the round trip to JSON, and everything undone."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from ascendify.advise.trace import BWD, FWD, OPT, StopTrace, Trace, Tracer


def _line(marker: str) -> int:
    import inspect

    src = inspect.getsource(inspect.getmodule(_line)).splitlines()
    return next(i for i, text in enumerate(src, 1) if marker in text and "_line(" not in text)


def test_steps_stop_the_program_and_ops_name_the_users_lines(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    done = 0
    tr = Tracer(steps=2, root=str(tmp_path)).start()  # before the loader and the optimizer: they are recorded
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
        loader = DataLoader(TensorDataset(torch.randn(40, 8), torch.randn(40, 4)), batch_size=8)  # LOADER
        with pytest.raises(StopTrace):
            for _ in range(10):
                for x, y in loader:
                    out = model(x)  # FORWARD
                    loss = ((out - y) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()  # BACKWARD
                    opt.step()  # STEP
                    done += 1
    finally:
        t = tr.stop()
    assert done == 2 and len(t.steps) == 2 and t.step_unit == "optimizer step"
    assert t.meta["stopped"] == "2 steps done"
    by_line = {}
    for o in t.ops:
        s = t.site(o)
        if s is not None:
            by_line.setdefault((s.line, o.phase), set()).add(o.base)
    assert "addmm" in by_line[(_line("# FORWARD"), FWD)]
    # the backward of the linear layers is credited to the forward line, not to loss.backward()
    assert {"mm", "t"} & by_line[(_line("# FORWARD"), BWD)]
    assert all(o.phase != BWD or t.site(o).line != _line("# BACKWARD") or o.base in ("ones_like", "expand", "detach")
               for o in t.ops if t.site(o) is not None)
    assert any(b.startswith("_foreach_") for b in by_line[(_line("# STEP"), OPT)])
    (ld,) = t.dataloaders
    assert t.sites[ld["site"]].line == _line("# LOADER") and ld["num_workers"] == 0 and ld["dataset_len"] == 40
    (o,) = t.optimizers
    assert o["class"] == "SGD" and o["foreach"] is True and o["tensors"] == 4
    assert t.steps[0]["ops"] > 0 and t.steps[0]["data_wait_s"] >= 0
    # the library function between the user's line and the op is named
    assert any(s.via and s.via.startswith("torch/nn/") for s in t.sites)
    # a JSON round trip keeps everything an analysis reads
    back = Trace.from_dict(t.to_dict())
    assert back.to_dict() == t.to_dict() and len(back.ops) == len(t.ops)
    # and everything is undone
    assert torch.autograd.backward.__module__ == "torch.autograd"
    assert DataLoader.__init__.__qualname__ == "DataLoader.__init__"
    assert torch.optim.Optimizer.__init__.__qualname__ == "Optimizer.__init__"


def test_backward_steps_and_model_calls_when_there_is_no_optimizer():
    w = torch.randn(4, 4, requires_grad=True)
    tr = Tracer(steps=3).start()
    with pytest.raises(StopTrace):
        for _ in range(10):
            (w @ w).sum().backward()
    t = tr.stop()
    assert t.step_unit == "backward" and len(t.steps) == 3
    net = nn.Linear(3, 3)
    tr = Tracer(steps=2).start()
    with torch.no_grad():
        for _ in range(5):  # inference: steps of one model call, never a reason to stop
            net(torch.randn(2, 3))
    t = tr.stop()
    assert t.step_unit == "model call" and len(t.steps) == 4 and t.meta["stopped"] == "ended"
    assert t.model_calls and t.model_calls[0]["class"] == "Linear"


def test_a_wrong_schema_is_refused():
    with pytest.raises(ValueError, match="not an advise trace"):
        Trace.from_dict({"schema": "something/1"})


def test_sdpa_is_one_op_even_where_the_cpu_takes_its_math_path():
    # with dropout (or a float mask) the CPU decomposes SDPA into bmm/softmax/dropout/bmm; torch_npu runs
    # aten::scaled_dot_product_attention as one kernel: the trace says so, forward and backward
    import torch.nn.functional as F

    q = torch.randn(2, 2, 8, 16, requires_grad=True)
    tr = Tracer().start()
    y = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    y.sum().backward()
    t = tr.stop()
    names = [o.name for o in t.ops]
    assert names.count("scaled_dot_product_attention") == 1 and "bmm" not in names and "_softmax" not in names
    assert names.count("scaled_dot_product_attention_backward") == 1
    bwd = next(o for o in t.ops if o.name == "scaled_dot_product_attention_backward")
    assert bwd.phase == BWD and bwd.ins[0][0] == (2, 2, 8, 16)  # its forward's inputs, for the estimate
    from ascendify.advise import estimate as est

    assert est.flops(bwd)[1] == "attention"
