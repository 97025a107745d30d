"""20 training steps on the emulated npu end bit-identical to the same run on the CPU (fp32)."""

import pytest
import torch

from .models import train


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_twenty_steps_bit_identical_to_cpu(kind, optimizer):
    cpu = train(kind, optimizer, "cpu")
    npu = train(kind, optimizer, "npu")
    assert cpu.keys() == npu.keys()
    different = [k for k in cpu if not torch.equal(cpu[k], npu[k])]
    assert different == []
    # the run did train: parameters moved away from their initial values
    init = train(kind, optimizer, "cpu", steps=0)
    assert any(not torch.equal(init[k], cpu[k]) for k in cpu)
