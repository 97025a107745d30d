"""torch_npu's custom operators import under emulation (libraries import them when they see an NPU) and refuse
to run, naming the operator."""

import pytest

from ascendify.emulator import NotEmulatedError


def test_custom_op_imports_and_refuses_when_called():
    from torch_npu import npu_moe_distribute_dispatch  # not emulated; tests/emulator/fused: the fused ops

    with pytest.raises(NotEmulatedError, match="torch_npu.npu_moe_distribute_dispatch is a torch_npu custom operator"):
        npu_moe_distribute_dispatch(None)
    with pytest.raises(AttributeError):
        import torch_npu

        torch_npu.definitely_not_a_torch_npu_name  # noqa: B018


def test_transformers_models_build_under_emulation():
    pytest.importorskip("transformers")
    from transformers import (  # imports torch_npu ops when it sees an NPU
        ResNetConfig,
        ResNetForImageClassification,
    )

    model = ResNetForImageClassification(ResNetConfig(depths=[1], hidden_sizes=[8], embedding_size=8, num_labels=3))
    assert model.num_labels == 3
