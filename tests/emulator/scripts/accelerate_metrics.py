"""What transformers' Trainer does on 2 ranks with accelerate, in small: DDP with find_unused_parameters=True
(the Trainer's default under DDP: a pinned host copy in the first backward), evaluation with
``gather_for_metrics`` and ``pad_across_processes`` (flat-buffer all-gathers unless the backend is gloo).

Run it under a launcher (``accelerate launch --num_processes 2`` or ``torchrun --nproc-per-node 2``), on the
emulated NPU (hccl) or on the CPU (gloo: ``--cpu``); rank 0 writes OUT (JSON): the losses, the gathered
predictions and labels, and the padded lengths, which must be the same on both.
"""

from __future__ import annotations

import json
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        self.unused = torch.nn.Linear(3, 3)  # never used: find_unused_parameters must mark it

    def forward(self, x):
        return self.body(x)


def main() -> int:
    out = sys.argv[1]
    cpu = "--cpu" in sys.argv
    acc = Accelerator(cpu=cpu, kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    torch.manual_seed(0)
    model = Model()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:32], y[:32]), batch_size=4)
    evals = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[32:39], y[32:39]), batch_size=2)  # 7: uneven
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt, train, evals = acc.prepare(model, opt, train, evals)
    losses = []
    for xb, yb in train:
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), "mean").item())
    model.eval()
    preds, labels, lengths = [], [], []
    with torch.no_grad():
        for xb, yb in evals:
            logits = model(xb)
            p, t = acc.gather_for_metrics((logits.argmax(-1), yb))
            preds += p.cpu().tolist()
            labels += t.cpu().tolist()
            ragged = torch.ones(acc.process_index + 1, 2, device=acc.device)  # rank r: r + 1 rows
            lengths.append(acc.pad_across_processes(ragged, dim=0).shape[0])
    if acc.is_main_process:
        with open(out, "w") as f:
            json.dump({"device": acc.device.type, "backend": str(acc.state.backend), "world": acc.num_processes,
                       "losses": losses, "preds": preds, "labels": labels, "padded": lengths}, f)
    acc.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
