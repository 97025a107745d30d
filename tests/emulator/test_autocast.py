"""Autocast on the emulated ``npu``: torch_npu's op lists, cast exactly as PyTorch's C++ autocast would."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ascendify.emulator as emulator
from ascendify.emulator.ops import autocast

LOWER = [torch.float16, torch.bfloat16]


@pytest.fixture(scope="module", autouse=True)
def _enabled():
    emulator.enable()
    autocast.install()


def _npu(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype).to("npu")


# --- the registration is exactly the table ----------------------------------------------------------------------


def test_autocast_key_carries_exactly_the_npu_table():
    expected = {op for op in autocast.policy_table("npu") if autocast.op_exists(op)}
    assert autocast.dispatcher_ops() == expected
    assert autocast.registered_ops() == {op: autocast.policy_table("npu")[op] for op in expected}


def test_cpu_table_is_the_running_torch_cpu_autocast():
    expected = {op for op in autocast.policy_table("cpu") if autocast.op_exists(op)}
    assert autocast.dispatcher_ops("AutocastCPU") == expected


def test_npu_table_has_no_duplicates_and_names_its_source():
    ops = [r.op for r in autocast.npu_rules()]
    assert len(ops) == len(set(ops))
    assert "AutoCastOps.cpp" in autocast.PROVENANCE["npu"]
    assert "autocast_mode.cpp" in autocast.PROVENANCE["cpu"]


def test_install_is_idempotent():
    first = autocast.install()
    assert autocast.install() == first


def test_differences_from_cpu_cover_both_directions():
    diff = autocast.differences_from_cpu()
    npu, cpu = autocast.policy_table("npu"), autocast.policy_table("cpu")
    for op, (n, c) in diff.items():
        assert (npu.get(op), cpu.get(op)) == (n, c) and n != c
    for op in set(npu) | set(cpu):
        assert (op in diff) == (npu.get(op) != cpu.get(op))


# --- each policy, observed through output dtypes --------------------------------------------------------------


LOWER_PRECISION_CASES = {
    "mm": lambda: torch.mm(_npu(3, 4), _npu(4, 5)),
    "addmm": lambda: torch.addmm(_npu(5), _npu(3, 4), _npu(4, 5)),
    "bmm": lambda: torch.bmm(_npu(2, 3, 4), _npu(2, 4, 5)),
    "baddbmm": lambda: torch.baddbmm(_npu(2, 3, 5), _npu(2, 3, 4), _npu(2, 4, 5)),
    "addbmm": lambda: torch.addbmm(_npu(3, 5), _npu(2, 3, 4), _npu(2, 4, 5)),
    "matmul": lambda: torch.matmul(_npu(3, 4), _npu(4)),
    "mv": lambda: torch.mv(_npu(3, 4), _npu(4)),
    "addmv": lambda: torch.addmv(_npu(3), _npu(3, 4), _npu(4)),
    "addr": lambda: torch.addr(_npu(3, 4), _npu(3), _npu(4)),
    "linear": lambda: F.linear(_npu(2, 4), _npu(3, 4), _npu(3)),
    "einsum": lambda: torch.einsum("ij,jk->ik", _npu(3, 4), _npu(4, 2)),
    "chain_matmul": lambda: torch.linalg.multi_dot([_npu(2, 3), _npu(3, 4), _npu(4, 2)]),
    "conv1d": lambda: F.conv1d(_npu(1, 2, 8), _npu(3, 2, 3)),
    "conv2d": lambda: F.conv2d(_npu(1, 2, 6, 6), _npu(3, 2, 3, 3), _npu(3)),
    "conv3d": lambda: F.conv3d(_npu(1, 2, 4, 4, 4), _npu(3, 2, 3, 3, 3)),
    "conv_transpose2d": lambda: F.conv_transpose2d(_npu(1, 2, 4, 4), _npu(2, 3, 3, 3)),
    "prelu": lambda: F.prelu(_npu(2, 3), _npu(1)),
    "sdpa": lambda: F.scaled_dot_product_attention(_npu(1, 2, 4, 8), _npu(1, 2, 4, 8), _npu(1, 2, 4, 8)),
    "gru_cell": lambda: torch.gru_cell(_npu(2, 4), _npu(2, 3), _npu(9, 4), _npu(9, 3)),
    "rnn_tanh_cell": lambda: torch.rnn_tanh_cell(_npu(2, 4), _npu(2, 3), _npu(3, 4), _npu(3, 3)),
}


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", sorted(LOWER_PRECISION_CASES))
def test_lower_precision_ops_run_in_the_autocast_dtype(case, dtype):
    with torch.autocast("npu", dtype=dtype):
        out = LOWER_PRECISION_CASES[case]()
    assert out.dtype == dtype and out.device.type == "npu"


def _low(*shape, dtype):
    return _npu(*shape).to(dtype)


FP32_CASES = {
    "exp": lambda d: _low(3, dtype=d).exp(),
    "log1p": lambda d: _low(3, dtype=d).abs().log1p(),
    "rsqrt": lambda d: _low(3, dtype=d).abs().rsqrt(),
    "pow": lambda d: _low(3, dtype=d).pow(2),
    "pow_tensor": lambda d: torch.pow(_low(3, dtype=d), _low(3, dtype=d)),
    "softplus": lambda d: F.softplus(_low(3, dtype=d)),
    "layer_norm": lambda d: F.layer_norm(_low(2, 4, dtype=d), (4,), _low(4, dtype=d), _low(4, dtype=d)),
    "group_norm": lambda d: F.group_norm(_low(2, 4, 3, dtype=d), 2),
    "mse_loss": lambda d: F.mse_loss(_low(4, dtype=d), _low(4, dtype=d)),
    "l1_loss": lambda d: F.l1_loss(_low(4, dtype=d), _low(4, dtype=d)),
    "nll_loss": lambda d: F.nll_loss(_low(3, 5, dtype=d), torch.tensor([1, 0, 4]).to("npu")),
    "bce_with_logits": lambda d: F.binary_cross_entropy_with_logits(_low(4, dtype=d), _low(4, dtype=d).sigmoid()),
    "cosine_similarity": lambda d: F.cosine_similarity(_low(2, 4, dtype=d), _low(2, 4, dtype=d)),
    "cdist": lambda d: torch.cdist(_low(3, 2, dtype=d), _low(4, 2, dtype=d)),
    "logsumexp": lambda d: _low(3, 4, dtype=d).logsumexp(1),
    "softmax": lambda d: torch.softmax(_low(2, 4, dtype=d), 1),
    "log_softmax": lambda d: F.log_softmax(_low(2, 4, dtype=d), 1),
    "sum": lambda d: _low(3, 4, dtype=d).sum(),
    "sum_dim": lambda d: _low(3, 4, dtype=d).sum(1),
    "cumsum": lambda d: _low(5, dtype=d).cumsum(0),
    "prod": lambda d: _low(5, dtype=d).prod(),
    "vector_norm": lambda d: torch.linalg.vector_norm(_low(5, dtype=d)),
    "norm": lambda d: _low(5, dtype=d).norm(),
    "norm_dim": lambda d: _low(2, 5, dtype=d).norm(2, 1),
}


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", sorted(FP32_CASES))
def test_fp32_ops_run_in_float32(case, dtype):
    with torch.autocast("npu", dtype=dtype):
        out = FP32_CASES[case](dtype)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("dtype", LOWER, ids=str)
def test_promote_widens_to_the_widest_floating_input(dtype):
    with torch.autocast("npu", dtype=dtype):
        assert torch.addcmul(_npu(3), _low(3, dtype=dtype), _low(3, dtype=dtype)).dtype == torch.float32
        assert torch.addcmul(*(_low(3, dtype=dtype) for _ in range(3))).dtype == dtype
        assert torch.atan2(_low(3, dtype=dtype), _npu(3)).dtype == torch.float32
        assert torch.dot(_low(3, dtype=dtype), _low(3, dtype=dtype)).dtype == dtype
        other = torch.float16 if dtype is torch.bfloat16 else torch.bfloat16
        # float32 first wins over anything; a foreign half type on its own is an error, as in PyTorch
        assert torch.addcmul(_npu(3), _low(3, dtype=other), _low(3, dtype=dtype)).dtype == torch.float32
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
            torch.addcmul(_low(3, dtype=other), _low(3, dtype=dtype), _low(3, dtype=dtype))


@pytest.mark.parametrize("dtype", LOWER, ids=str)
def test_unlisted_ops_keep_their_input_dtype(dtype):
    x = _npu(2, 3, 4, 4)
    with torch.autocast("npu", dtype=dtype):
        assert torch.relu(x).dtype == torch.float32
        assert (x + 1).dtype == torch.float32
        assert x.sin().dtype == torch.float32
        assert F.max_pool2d(x, 2).dtype == torch.float32
        assert _low(3, dtype=dtype).sin().dtype == dtype
        assert F.batch_norm(x, None, None, training=True).dtype == torch.float32


@pytest.mark.filterwarnings("ignore:.*float64.*:RuntimeWarning")  # the emulator's float64 policy
def test_cpu_float64_and_disabled_regions_are_untouched():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert torch.mm(a, b).dtype == torch.float32  # CPU tensors: not the autocast device
        d = _npu(3, 4, dtype=torch.float64)
        assert torch.mm(d, d.t()).dtype == torch.float64
        with torch.autocast("npu", enabled=False):
            assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.float32
        assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.bfloat16
    assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.float32


def test_default_dtype_is_float16_like_torch_npu():
    with torch.autocast("npu"):
        assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.float16


def test_binary_cross_entropy_is_banned_like_on_hardware():
    p, t = _npu(4).sigmoid(), _npu(4).sigmoid()
    with torch.autocast("npu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, t)
    assert F.binary_cross_entropy(p, t).dtype == torch.float32


def test_npu_and_cpu_autocast_disagree_where_the_tables_do():
    diff = autocast.differences_from_cpu()
    assert diff["exp"] == ("fp32", None) and diff["softmax.int"] == ("fp32_set_opt_dtype", None)
    assert diff["cat"] == (None, "promote") and diff["linalg_inv"] == (None, "fp32")
    x16 = torch.randn(4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert x16.exp().dtype == torch.bfloat16 and torch.softmax(x16, 0).dtype == torch.bfloat16
        assert torch.linalg.inv(torch.eye(3)).dtype == torch.float32
    with torch.autocast("npu", dtype=torch.bfloat16):
        assert x16.to("npu").exp().dtype == torch.float32 and torch.softmax(x16.to("npu"), 0).dtype == torch.float32


def test_torch_npu_amp_autocast():
    with torch.npu.amp.autocast():
        assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.float16
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert torch.mm(_npu(3, 4), _npu(4, 2)).dtype == torch.bfloat16
        assert torch.is_autocast_enabled("npu")
    assert not torch.is_autocast_enabled("npu")


# --- weight cache -----------------------------------------------------------------------------------------------


def test_leaf_weights_are_cast_once_per_region():
    w = _npu(4, 4).requires_grad_()
    x = _npu(2, 4)
    with torch.autocast("npu", dtype=torch.bfloat16):
        a, b = F.linear(x, w), F.linear(x, w)
        assert autocast._cast_cache, "a float32 leaf weight should be cached"
    assert not autocast._cast_cache, "the cache must be dropped when the outermost region exits"
    shared = _graph_nodes(a.grad_fn) & _graph_nodes(b.grad_fn)  # the cast of w is one node, used twice
    assert any(type(n).__name__ == "ToCopyBackward0" for n in shared)


def _graph_nodes(fn) -> set:
    seen, stack = set(), [fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
    return seen


def test_tied_weights_match_torch_cpu_autocast_bit_for_bit():
    """linear and mm are lower precision on both devices, so CPU autocast is an exact reference (cache incl.)."""
    torch.manual_seed(0)
    w, x = torch.randn(6, 6), torch.randn(3, 6)

    def run(device):
        wd = w.to(device).requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16):
            y = F.linear(F.linear(x.to(device), wd), wd)
            loss = torch.mm(y, wd).float().square().mean()
        loss.backward()
        return loss.detach().cpu(), wd.grad.cpu()

    (l_npu, g_npu), (l_cpu, g_cpu) = run("npu"), run("cpu")
    assert torch.equal(l_npu, l_cpu) and torch.equal(g_npu, g_cpu)


# --- bit-identical to a CPU run that casts the same ops the same way --------------------------------------------


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "conv_w": torch.randn(4, 3, 3, 3, generator=g) * 0.3,
        "conv_b": torch.randn(4, generator=g) * 0.1,
        "ln_w": 1 + 0.1 * torch.randn(4 * 6 * 6, generator=g),
        "ln_b": 0.1 * torch.randn(4 * 6 * 6, generator=g),
        "fc_w": torch.randn(5, 4 * 6 * 6, generator=g) * 0.05,
        "fc_b": torch.randn(5, generator=g) * 0.1,
    }


def _model(p, x, y, cast):
    """A small network; ``cast(t, policy)`` applies torch_npu's policy by hand (identity under autocast)."""
    h = F.conv2d(cast(x, "low"), cast(p["conv_w"], "low"), cast(p["conv_b"], "low"))  # lower_precision_fp
    h = F.relu(h).flatten(1)  # unlisted: stays in the lower dtype
    h = F.layer_norm(cast(h, "fp32"), h.shape[1:], cast(p["ln_w"], "fp32"), cast(p["ln_b"], "fp32"))  # fp32
    h = F.gelu(h)  # unlisted
    logits = F.linear(cast(h, "low"), cast(p["fc_w"], "low"), cast(p["fc_b"], "low"))  # lower_precision_fp
    logp = torch.log_softmax(logits, 1, dtype=cast(None, "opt_dtype"))  # fp32_set_opt_dtype
    return F.nll_loss(cast(logp, "fp32"), y)  # fp32


@pytest.mark.parametrize("dtype", LOWER, ids=str)
def test_training_steps_bit_identical_to_cpu_with_the_same_casts(dtype):
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 3, 1, 4])

    def manual_cast(t, policy):
        if policy == "opt_dtype":
            return torch.float32
        return t.to(dtype if policy == "low" else torch.float32)

    def train(device, steps=3):
        params = {k: v.to(device).requires_grad_() for k, v in _params().items()}
        opt = torch.optim.SGD(params.values(), lr=0.1, momentum=0.9)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            if device == "npu":
                with torch.autocast("npu", dtype=dtype):
                    loss = _model(params, x.to(device), y.to(device), lambda t, policy: t)
            else:
                loss = _model(params, x, y, manual_cast)
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        return losses, {k: v.detach().cpu() for k, v in params.items()}

    (l_npu, p_npu), (l_cpu, p_cpu) = train("npu"), train("cpu")
    assert all(loss.dtype == torch.float32 for loss in l_npu)
    assert all(torch.equal(a, b) for a, b in zip(l_npu, l_cpu, strict=True))
    for k in p_cpu:
        assert torch.equal(p_npu[k], p_cpu[k]), k


def test_the_table_prints_as_json(capsys):
    import json

    assert autocast._main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["npu"] == autocast.policy_table("npu") and data["provenance"] == autocast.PROVENANCE
    assert {op: (d["npu"], d["cpu"]) for op, d in data["differences"].items()} == autocast.differences_from_cpu()
