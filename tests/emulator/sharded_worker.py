"""One rank of the sharded-stack job on emulated ``hccl`` (run by torchrun from tests/emulator/test_sharded.py).

Usage: ``python -m torch.distributed.run --nproc_per_node W sharded_worker.py OUT_DIR [CKPT_TO_LOAD]``.

Each rank enables the emulator, makes one ``hccl`` process group and runs every feature of :data:`FEATURES`
on it in turn: DeviceMesh (1-D, 2-D), DTensor, FSDP2 ``fully_shard`` (plain, ``MixedPrecisionPolicy``,
``CPUOffloadPolicy``), FSDP1, tensor parallel and sequence parallel (``parallelize_module``), and
``torch.distributed.checkpoint`` (save here; load a checkpoint written by a job of another world size). Each rank
writes ``OUT_DIR/result{R}.json``: the per-step global losses of each feature and what the features saw. The
test computes the single-process references with the functions of this file (``reference_*``) and compares.
Several features share one job because starting processes is the expensive part.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F

STEPS = 3
BATCH = 8  # global batch: divisible by 1, 2 and 4 ranks
LR = 0.1
DEV = os.environ.get("SHARDED_DEVICE", "npu")  # "cpu": the same job on gloo, to compare with PyTorch's own
FEATURES = ["dtensor", "fsdp2", "fsdp2_mixed", "fsdp2_offload", "fsdp2_meta", "hsdp", "fsdp1", "tp", "tp_attention",
            "sp", "mesh2d", "dcp"]


# -- the models and data (shared with the single-process reference) ----------------------------------------------


def make_mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    )


class SeqBlock(torch.nn.Module):
    """LayerNorm, then a two-layer MLP over (batch, sequence, features): the sequence-parallel pattern."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(self.norm(x))))


class AttnBlock(torch.nn.Module):
    """Causal self-attention with 4 heads through ``F.scaled_dot_product_attention``: tensor parallel over heads."""

    heads = 4

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (w(x).view(b, s, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, d))


def mlp_data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def seq_data():
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(2, BATCH, 16, generator=g), torch.randn(2, BATCH, 16, generator=g)) for _ in range(STEPS)]


def reference_mlp(dtype: torch.dtype | None = None) -> list[float]:
    """Single-process losses of the MLP on the whole batch (``dtype``: the forward in that precision)."""
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in mlp_data():
        opt.zero_grad()
        if dtype is None:
            out = model(x)
        else:
            low = [p.detach().to(dtype).requires_grad_() for p in model.parameters()]
            h = x.to(dtype)
            for i, layer in enumerate((0, 2, 4)):
                h = F.linear(h, low[2 * i], low[2 * i + 1])
                if layer != 4:
                    h = torch.relu(h)
            out = h.float()
        loss = F.mse_loss(out, y)
        loss.backward()
        if dtype is not None:
            for p, q in zip(model.parameters(), low, strict=True):
                p.grad = q.grad.float()
        opt.step()
        losses.append(loss.item())
    return losses


def reference_seq(make=None) -> list[float]:
    model = (make or SeqBlock)()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in seq_data():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# -- one rank ----------------------------------------------------------------------------------------------------


def _global_mean(loss: torch.Tensor, world: int) -> float:
    import torch.distributed as dist

    t = loss.detach().clone()
    dist.all_reduce(t)
    return t.item() / world


def _train_dp(model, rank: int, world: int) -> list[float]:
    """Each rank trains on its slice of the global batch; returns the global loss per step."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per = BATCH // world
    losses = []
    for x, y in mlp_data():
        x, y = x[rank * per:(rank + 1) * per].to(DEV), y[rank * per:(rank + 1) * per].to(DEV)
        opt.zero_grad()
        loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(_global_mean(loss, world))
    return losses


def _train_whole_batch(model) -> list[float]:
    """Tensor parallel: every rank sees the whole batch, the weights are split; returns the loss per step."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)  # DTensors next to plain parameters
    losses = []
    for x, y in seq_data():
        opt.zero_grad()
        loss = F.mse_loss(model(x.to(DEV)), y.to(DEV))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def feature_dtensor(rank, world, out, ckpt_in):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(DEV, (world,))
    full = torch.arange(4.0 * world * 3).reshape(4 * world, 3)
    d = distribute_tensor(full.to(DEV), mesh, [Shard(0)])
    local = d.to_local()
    summed = (d * 2).sum()  # a DTensor op with a partial result, reduced on .full_tensor()
    return {
        "mesh_group_name": bool(mesh.get_group().group_name),
        "local_device": local.device.type,
        "local_rows": local.cpu()[:, 0].tolist(),
        "full_equal": torch.equal(d.full_tensor().cpu(), full),
        "replicated_equal": torch.equal(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full),
        "sum": summed.full_tensor().item(),
    }


def feature_fsdp2(rank, world, out, ckpt_in, mp=None, offload=False):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(DEV, (world,))
    model = make_mlp().to(DEV)
    kwargs = {"mesh": mesh}
    if mp is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=mp, reduce_dtype=torch.float32)
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    seen = []
    model[0].register_forward_hook(lambda m, i, o: seen.append((str(m.weight.dtype), m.weight.device.type)))
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    losses = _train_dp(model, rank, world)
    p = next(model.parameters())
    return {
        "losses": losses,
        "forward_weight": list(seen[0]),
        "sharded_device": p.to_local().device.type,
        "sharded_rows": p.to_local().shape[0],
    }


def feature_fsdp2_mixed(rank, world, out, ckpt_in):
    return feature_fsdp2(rank, world, out, ckpt_in, mp=torch.bfloat16)


def feature_fsdp2_offload(rank, world, out, ckpt_in):
    return feature_fsdp2(rank, world, out, ckpt_in, offload=True)


def feature_fsdp2_meta(rank, world, out, ckpt_in):
    """torchtitan's and pytorch/examples' FSDP2 pattern: build on meta, shard, ``to_empty``, ``reset_parameters``
    (a random init of each DTensor shard from the device generator, whose state DTensor reads as Philox's seed and
    offset); a buffer made on the CPU is moved by ``fully_shard`` with ``tensor.data = tensor.to(device)``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(DEV, (world,))
    with torch.device("meta"):
        model = make_mlp()
    model.register_buffer("scale", torch.ones(4))  # not on meta
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=DEV)
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.reset_parameters()
    full = model[0].weight.full_tensor().cpu()
    return {"losses": _train_dp(model, rank, world), "finite": bool(torch.isfinite(full).all()),
            "std": float(full.std()), "buffer_device": model.scale.device.type, "weight": full[0, :4].tolist()}


def feature_hsdp(rank, world, out, ckpt_in):
    """FSDP2 on a 2-D mesh (replicate x shard): HSDP, sharded within pairs of ranks, replicated across them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(DEV, (world // 2, 2), mesh_dim_names=("replicate", "shard"))
    model = make_mlp().to(DEV)
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = _train_dp(model, rank, world)
    p = next(model.parameters())
    return {"losses": losses, "placements": str(p.placements), "sharded_rows": p.to_local().shape[0]}


def feature_fsdp1(rank, world, out, ckpt_in):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    device_id = torch.npu.current_device() if DEV == "npu" else None
    model = FSDP(make_mlp().to(DEV), device_id=device_id, use_orig_params=True)
    return {"losses": _train_dp(model, rank, world)}


def feature_tp(rank, world, out, ckpt_in):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(DEV, (world,))
    model = SeqBlock().to(DEV)
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return {"losses": _train_whole_batch(model), "fc1_local_rows": model.fc1.weight.to_local().shape[0]}


def feature_tp_attention(rank, world, out, ckpt_in):
    """Attention heads split across ranks: q/k/v stay DTensors (sharded on heads) into SDPA, as in pytorch/examples'
    FSDP + TP Llama; the emulator runs the CPU's flash kernel there, with DTensor sharding rules for it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(DEV, (world,))
    model = AttnBlock().to(DEV)
    plan = {name: ColwiseParallel(use_local_output=False) for name in ("wq", "wk", "wv")}
    plan["wo"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)
    return {"losses": _train_whole_batch(model), "wq_local_rows": model.wq.weight.to_local().shape[0]}


def feature_sp(rank, world, out, ckpt_in):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh(DEV, (world,))
    model = SeqBlock().to(DEV)
    parallelize_module(model, mesh, {
        "norm": SequenceParallel(),
        "fc1": ColwiseParallel(input_layouts=Shard(1)),
        "fc2": RowwiseParallel(output_layouts=Shard(1)),
    })
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per = BATCH // world
    losses = []
    for x, y in seq_data():  # the sequence dimension (1) is split across ranks
        x, y = x[:, rank * per:(rank + 1) * per].to(DEV), y[:, rank * per:(rank + 1) * per].to(DEV)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        # the weights' gradients sum over the sequence shards: each rank's part of the global mean
        (loss / world).backward()
        opt.step()
        losses.append(_global_mean(loss, world))
    return {"losses": losses}


def feature_mesh2d(rank, world, out, ckpt_in):
    """A 2-D mesh (dp x tp): tensor parallel inside each dp group, FSDP2 across them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = 2
    dp = world // tp
    mesh = init_device_mesh(DEV, (dp, tp), mesh_dim_names=("dp", "tp"))
    model = SeqBlock().to(DEV)
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    dp_rank = mesh.get_local_rank("dp")
    per = 2 // dp
    losses = []
    for x, y in seq_data():  # the batch dimension (0, size 2) is split across dp groups
        x, y = x[dp_rank * per:(dp_rank + 1) * per].to(DEV), y[dp_rank * per:(dp_rank + 1) * per].to(DEV)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(_global_mean(loss, world))
    return {"losses": losses, "mesh_shape": list(mesh.shape), "fc1_placements": str(model.fc1.weight.placements)}


def feature_dcp(rank, world, out, ckpt_in):
    """Save an FSDP2-sharded model on this world size; load one saved by another world size."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(DEV, (world,))
    model = make_mlp().to(DEV)
    fully_shard(model, mesh=mesh)
    _train_dp(model, rank, world)
    ckpt = os.path.join(out, "ckpt")
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save(full, os.path.join(out, "saved_full.pt"))
    res = {"saved": True}
    if ckpt_in:
        other = make_mlp()
        torch.nn.init.zeros_(other[0].weight)
        other = other.to(DEV)
        fully_shard(other, mesh=mesh)
        sd = other.state_dict()
        dcp.load({"model": sd}, checkpoint_id=os.path.join(ckpt_in, "ckpt"))
        loaded = {k: v.full_tensor().cpu() for k, v in other.state_dict().items()}
        expect = torch.load(os.path.join(ckpt_in, "saved_full.pt"))
        res["loaded_equal"] = all(torch.equal(loaded[k], expect[k]) for k in expect)
        res["loaded_device"] = next(other.parameters()).to_local().device.type
    dist.barrier()
    return res


def main() -> None:
    import ascendify.emulator

    ascendify.emulator.enable()
    import torch.distributed as dist

    out = sys.argv[1]
    ckpt_in = sys.argv[2] if len(sys.argv) > 2 else None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if DEV == "npu":
        torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl" if DEV == "npu" else "gloo", timeout=datetime.timedelta(seconds=60))
    results = {"world": world, "backend": dist.get_backend()}
    only = os.environ.get("SHARDED_FEATURES")
    for name in (only.split(",") if only else FEATURES):
        try:
            results[name] = globals()[f"feature_{name}"](rank, world, out, ckpt_in)
        except Exception as exc:  # record and go on: the test names the feature that failed
            results[name] = {"error": "".join(traceback.format_exception(exc))[-3000:]}
            dist.barrier()
    results["hccl_rule_violations"] = ascendify.emulator.report().get("hccl_rule_violations")
    with open(os.path.join(out, f"result{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
