"""npu_moe_gating_top_k_softmax and npu_grouped_matmul (float path)."""

import pytest
import torch

from ascendify.emulator.errors import NotEmulatedError, NpuOpError

torch_npu = pytest.importorskip("torch_npu")


def test_gating_top_k_softmax_values_indices_and_row_idx():
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    finished = torch.tensor([False, True, False, False, False, False])
    y, idx, row = torch_npu.npu_moe_gating_top_k_softmax(x.npu(), finished.npu(), k=3)
    p = torch.softmax(x, -1)
    want_y, want_idx = p.topk(3, -1)
    torch.testing.assert_close(y.cpu(), want_y)
    assert idx.dtype == row.dtype == torch.int32
    assert torch.equal(idx[0].cpu(), want_idx[0].int()) and idx[1].tolist() == [8, 8, 8]  # finished row -> E
    assert row.cpu().tolist() == [[i, i + 6, i + 12] for i in range(6)]
    y3 = torch_npu.npu_moe_gating_top_k_softmax(x.view(2, 3, 8).npu(), k=2)[0]
    assert y3.shape == (2, 3, 2)
    with pytest.raises(NpuOpError, match="k must be in \\(0, min\\(8, 1024\\)\\]"):
        torch_npu.npu_moe_gating_top_k_softmax(x.npu(), k=9)


def test_grouped_matmul_group_list_kinds_split_items_and_gradients():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    sizes = [2, 0, 7]
    want = torch.cat([xi @ w[i] for i, xi in enumerate(x.split(sizes))])
    (y,) = torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([2, 2, 9]), split_item=2, group_type=0)
    torch.testing.assert_close(y, want)
    (y1,) = torch_npu.npu_grouped_matmul([x], [w], group_list=[2, 0, 7], group_list_type=1, split_item=3,
                                         group_type=0)
    torch.testing.assert_close(y1, want)
    outs = torch_npu.npu_grouped_matmul([x[:2], x[2:]], [w[0], w[2]], bias=[torch.ones(5, dtype=torch.float64)] * 2)
    torch.testing.assert_close(outs[1], x[2:] @ w[2] + 1)
    assert torch.autograd.gradcheck(
        lambda a, b: torch_npu.npu_grouped_matmul([a], [b], group_list=[2, 2, 9], split_item=2, group_type=0)[0],
        (x, w))


def test_grouped_matmul_on_npu_and_refusals():
    x, w = torch.randn(6, 4).npu(), torch.randn(2, 4, 3).npu()
    (y,) = torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([3, 6]).npu(), split_item=2, group_type=0)
    assert y.device.type == "npu" and y.shape == (6, 3)
    with pytest.raises(NpuOpError, match="must be non-decreasing"):
        torch_npu.npu_grouped_matmul([x], [w], group_list=[4, 3], split_item=2, group_type=0)
    with pytest.raises(NpuOpError, match="scale and per_token_scale apply to int8 / float8 inputs only"):
        torch_npu.npu_grouped_matmul([x], [w], scale=[torch.ones(3).npu()], group_list=[3, 6])
    with pytest.raises(NotEmulatedError, match="antiquant_scale"):
        torch_npu.npu_grouped_matmul([x], [w], antiquant_scale=[torch.ones(3).npu()], group_list=[3, 6])
    with pytest.raises(NpuOpError, match="do not agree on K"):
        torch_npu.npu_grouped_matmul([torch.randn(2, 5).npu()], [torch.randn(4, 3).npu()])
