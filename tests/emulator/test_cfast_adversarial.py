"""Adversarial checks of the C++ kernels (``ops/cfast.cpp``): odd strides, aliasing, autograd, threads, settings
toggled mid-run. Each compares the npu result (or error) with the CPU's."""

import io
import threading

import pytest

torch = pytest.importorskip("torch")

from ascendify.emulator.ops import cfast  # noqa: E402

needs_cxx = pytest.mark.skipif(cfast.module(build_if_missing=False) is None,
                               reason="C++ kernels not loaded: the Python kernels serve")


def both(fn, seed=0):
    """``fn(device)`` on the CPU and on npu: the two results, as CPU tensors."""
    out = []
    for d in ("cpu", "npu"):
        torch.manual_seed(seed)
        r = fn(d)
        r = r if isinstance(r, tuple | list) else (r,)
        out.append([t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in r])
    return out


def same(fn, seed=0):
    cpu, npu = both(fn, seed)
    assert len(cpu) == len(npu)
    for i, (a, b) in enumerate(zip(cpu, npu, strict=True)):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a, b)
            assert torch.equal(a, b), (i, a, b)
        else:
            assert a == b, (i, a, b)


def ar(d, *shape):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(shape).to(d)


# --------------------------------------------------------------------------------------------------------
# strides, offsets, views written in place


def test_views_with_offsets_and_strides_written_in_place():
    def f(d):
        x = ar(d, 10)
        v = x[3:7]
        v.add_(1).mul_(2)
        x[::2].add_(1)
        y = ar(d, 12)
        a, b, c = torch.split(y, 4)
        b.mul_(3)
        c.zero_()
        z = ar(d, 3, 4)
        rows = z.unbind(0)
        rows[1].add_(5)
        return x, v, v.storage_offset(), y, a * 1, z, rows[2] + 0, z.t()[1:].sub_(1)
    same(f)


def test_cat_stack_where_index_select_scatter_of_non_contiguous_tensors():
    def f(d):
        x = ar(d, 4, 6)
        idx = torch.tensor([[0, 1], [2, 3], [4, 0]], device=d)
        s = torch.zeros(3, 5, device=d).scatter_(1, idx, ar(d, 3, 2))
        t = torch.zeros(10, device=d)
        t[::2].scatter_(0, torch.tensor([1, 3], device=d), 7.0)
        return (torch.cat([x[:, ::2], x.t()[:4, :3]]), torch.stack([x[:, 1:4], x[:, ::2]], 1),
                torch.where(x > 3, x, 0.0), torch.where(x[:, ::2] > 5, x[:, ::2], x[:, 1::2] * 2),
                x.t().index_select(1, torch.tensor([3, 0, 2], device=d)), s, t)
    same(f)


def test_several_results_and_dynamic_shapes():
    def f(d):
        x = torch.randn(5, 7).to(d)
        v, i = x.topk(3, dim=1)
        sv, si = x[:, ::2].sort(dim=0, descending=True, stable=True)
        u, inv, cnt = torch.unique(torch.tensor([3, 1, 3, 2, 1, 7], device=d), return_inverse=True, return_counts=True)
        mn, mi = x.t().min(dim=1)
        return v, i, sv, si, u, inv, cnt, mn, mi, torch.unique(x[:0])
    same(f)


@needs_cxx
def test_partial_overlap_is_refused_as_on_the_cpu(fresh_report):
    """Arguments that are views of one npu tensor must look like one memory to the CPU kernel: the CPU refuses a
    written tensor that partly overlaps an input (instead of computing on memory it is overwriting)."""
    cases = {
        "add_": lambda x: x[1:].add_(x[:-1]),
        "addcmul_": lambda x: x[1:].addcmul_(x[:-1], x[:-1]),
        "index_copy_": lambda x: x.index_copy_(0, torch.tensor([0, 1], device=x.device), x[2:4]),
    }
    for name, fn in cases.items():
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            fn(ar("cpu", 4, 6))
        x = ar("npu", 4, 6)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            fn(x)
        assert torch.equal(x.cpu(), ar("cpu", 4, 6)), name  # nothing written
    same(lambda d: ar(d, 4, 6)[:, 1:].mul_(ar(d, 4, 6)[:, 1:]))  # no overlap between two tensors
    x, c = ar("npu", 4, 6), ar("cpu", 4, 6)
    x[:, 1:].mul_(x[:, 1:])  # full overlap is fine, as on the CPU
    c[:, 1:].mul_(c[:, 1:])
    assert torch.equal(x.cpu(), c)


# --------------------------------------------------------------------------------------------------------
# autograd


def test_layer_norm_backward_double_backward_and_conv_grad():
    def f(d):
        x = torch.randn(4, 6).to(d).requires_grad_()
        w = torch.randn(6).to(d).requires_grad_()
        b = torch.randn(6).to(d).requires_grad_()
        y = torch.nn.functional.layer_norm(x, (6,), w, b)
        (y * y).sum().backward()
        p = torch.randn(5).to(d).requires_grad_()
        g, = torch.autograd.grad((p ** 3).sum(), p, create_graph=True)
        g2, = torch.autograd.grad(g.sum(), p)
        xi = torch.randn(1, 2, 6, 6).to(d).requires_grad_()
        wc = torch.randn(3, 2, 3, 3).to(d).requires_grad_()
        out = torch.nn.functional.conv2d(xi, wc, padding=1)
        gx, = torch.autograd.grad(out.square().sum(), xi, create_graph=True)
        gw, = torch.autograd.grad(gx.sum(), wc)
        return y, x.grad, w.grad, b.grad, g, g2, out, gx, gw
    same(f)


def test_no_grad_in_place_on_a_leaf():
    def f(d):
        p = torch.randn(5).to(d).requires_grad_()
        v0 = p._version
        with torch.no_grad():
            p.mul_(2)
            p[1:3].add_(1)
        return p, p.requires_grad, p._version - v0, p.is_leaf
    same(f)


# --------------------------------------------------------------------------------------------------------
# storages


def test_resize_set_and_storage_pointers_after_cxx_ops():
    def f(d):
        x = ar(d, 6) * 2
        x.resize_(10)
        x[6:] = 1
        y = ar(d, 6) + 1
        z = torch.empty(0, device=d)
        z.set_(y.untyped_storage(), 2, (2,))
        z.add_(10)
        return x, y, z
    same(f)
    y = (ar("npu", 12) * 2)[3:]
    s = y.untyped_storage()
    assert s.device.type == "npu" and s.nbytes() == 48
    assert s.data_ptr() == y.data_ptr() - 3 * 4 == y.view(3, 3).untyped_storage().data_ptr()


def test_save_and_load_of_cxx_results():
    x = ar("npu", 12) * 2
    buf = io.BytesIO()
    torch.save({"x": x, "y": x[2:8:2]}, buf)
    buf.seek(0)
    d = torch.load(buf)
    assert d["x"].device.type == "npu" and torch.equal(d["x"].cpu(), ar("cpu", 12) * 2)
    d["y"].add_(100)  # the view still shares the loaded storage
    assert d["x"][2].item() == 104.0
    buf.seek(0)
    assert torch.equal(torch.load(buf, map_location="cpu")["y"], (ar("cpu", 12) * 2)[2:8:2])


def test_pin_memory_and_a_pinning_dataloader_with_workers():
    x = torch.randn(4, 4)
    assert torch.equal((x.pin_memory().npu(non_blocking=True) * 2).cpu(), x * 2)
    data = ar("cpu", 20, 2)
    ds = torch.utils.data.TensorDataset(data, torch.arange(20))
    got = [(a.npu() * 2 + 1).sum(1).cpu()
           for a, _ in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True)]
    assert torch.equal(torch.cat(got), (data * 2 + 1).sum(1))


@needs_cxx
def test_pinned_host_memory_is_real_as_on_an_npu():
    """torch_npu's host allocator: pin_memory=True allocates pinned blocks and is_pinned() tells them (and views
    into them) from ordinary CPU memory; freed blocks are forgotten."""
    before = cfast.module().pinned_blocks()
    t = torch.empty(3, 4, pin_memory=True)
    plain = torch.ones(6)
    p = plain.pin_memory()
    assert t.is_pinned() and p.is_pinned() and p[2:].is_pinned() and torch.zeros(2, pin_memory=True).is_pinned()
    assert not plain.is_pinned() and not torch.empty(3).is_pinned()
    assert torch.equal(p, plain) and p.data_ptr() != plain.data_ptr()
    assert torch.equal(p.to("npu", non_blocking=True).cpu(), plain)
    assert cfast.module().pinned_blocks() == before + 2  # t and p (the zeros are gone)
    del t, p
    assert cfast.module().pinned_blocks() == before


# --------------------------------------------------------------------------------------------------------
# memory counters


@needs_cxx
def test_memory_counters_stay_exact_with_threads(fresh_report):
    """The C++ kernels count without the GIL while the Python kernels count too (here ``empty``): no update
    may be lost, or memory_allocated drifts for good."""
    base = torch.npu.memory_allocated()
    stop = threading.Event()

    def python_side():
        while not stop.is_set():
            t = torch.empty(1000, device="npu")
            del t

    x = torch.ones(1000, device="npu")
    th = threading.Thread(target=python_side)
    th.start()
    try:
        for _ in range(20000):
            y = x + 1
            del y
    finally:
        stop.set()
        th.join()
    del x
    assert torch.npu.memory_allocated() == base


@needs_cxx
def test_oom_leaves_the_counters_and_the_tensor_right(fresh_report):
    x = torch.ones(256, 256, device="npu")
    base, ooms = torch.npu.memory_allocated(), fresh_report.report()["memory"][0]["ooms"]
    fresh_report.settings.memory_capacity = base + 100
    x.add_(1)  # in place: nothing new, no OOM
    with pytest.raises(torch.OutOfMemoryError):
        x.topk(2)  # two fresh results
    with pytest.raises(torch.OutOfMemoryError):
        x * 2
    assert torch.npu.memory_allocated() == base
    assert torch.equal(x.cpu(), torch.full((256, 256), 2.0))
    assert fresh_report.report()["memory"][0]["ooms"] == ooms + 2


# --------------------------------------------------------------------------------------------------------
# settings toggled mid-run, no-NPU-kernel reports


def test_settings_toggled_mid_run(fresh_report):
    s = fresh_report.settings
    big = torch.full((4,), 60000.0, dtype=torch.float16, device="npu")
    s.fp16_overflow = "warn"
    with pytest.warns(RuntimeWarning, match="overflow"):
        big * 2
    # the slow path hands every op to the Python kernels: multi-result, kwarg-only, list ops alike
    same(lambda d: (*torch.randn(3, 5).to(d).sort(dim=1, stable=True), *torch.randn(3, 5).to(d).topk(2),
                    torch.cat([ar(d, 2, 3)[:, ::2], ar(d, 1, 2)])))
    s.fp16_overflow = "off"
    assert torch.isinf((big * 2).cpu()).all()
    s.overflow_mode = "saturation"
    b = big.clone()
    b.mul_(2)
    assert torch.isfinite((big * 2).cpu()).all() and torch.isfinite(b.cpu()).all()
    s.overflow_mode = "inf_nan"
    assert torch.isinf((big * 2).cpu()).all()
    s.single_device = True
    assert (torch.ones(2, device="npu:1") + 1).device == torch.device("npu", 0)
    s.single_device = False
    assert (torch.ones(2, device="npu:1") + 1).device == torch.device("npu", 1)
    assert fresh_report.report()["fp16_overflow_events"]


def test_foreach_ops_and_a_foreach_op_with_no_npu_kernel(fresh_report):
    xs = [torch.ones(3, device="npu"), torch.ones(2, device="npu")[::1]]
    torch._foreach_add_(xs, 1.0)
    ys = torch._foreach_mul(xs, 3.0)
    assert torch.equal(ys[0].cpu(), torch.full((3,), 6.0)) and torch.equal(xs[1].cpu(), torch.full((2,), 2.0))
    with pytest.warns(Warning, match="no NPU kernel"):
        zs = torch._foreach_lgamma(xs)
    assert torch.equal(zs[0].cpu(), torch.lgamma(torch.full((3,), 2.0)))
    assert fresh_report.report()["cpu_fallback_on_npu"]
