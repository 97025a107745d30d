"""A Llama-style model from transformers trains and generates on the emulated npu through transformers' own NPU
paths: attention "sdpa" and "eager" give the CPU's losses bit for bit (fp32, AdamW) and the same tokens; the
"flash_attention_2" path, which transformers routes to ``torch_npu.npu_fusion_attention`` on an NPU, trains
within fp32 rounding of the CPU and generates the same tokens; ``compare_models`` (lockstep) finds no
divergence between the CPU and the emulated npu."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import import_utils  # noqa: E402

STEPS = 3


def _clear_transformers_probes():
    """transformers caches its device probes (``is_torch_npu_available`` is an ``lru_cache``): answer for the
    emulated npu while this module runs, and for no npu afterwards."""
    for value in vars(import_utils).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


@pytest.fixture(scope="module", autouse=True)
def npu_probes(emulator):
    """What transformers sees when the npu exists before it is imported (``ASCENDIFY_EMULATE=npu``, ``import
    torch`` first): in this shared pytest process it was imported while the emulator was inactive, and two of its
    modules keep an import-time answer."""
    import torch_npu
    from transformers.integrations import npu_flash_attention, sdpa_attention

    _clear_transformers_probes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sdpa_attention, "_is_torch_npu_available", True)
        mp.setattr(npu_flash_attention, "npu_fusion_attention", torch_npu.npu_fusion_attention, raising=False)
        yield
    _clear_transformers_probes()


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(3, 128, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # the second row is left-padded
    ids[1, :5] = 0
    return model, ids, mask


def _train_and_generate(base, ids, mask, device, impl):
    model = copy.deepcopy(base)
    model.config._attn_implementation = impl  # what from_pretrained(attn_implementation=impl) sets
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    labels = ids.masked_fill(mask == 0, -100)
    losses = []
    for _ in range(STEPS):
        loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        tokens = model.generate(ids[:, :10].to(device), attention_mask=mask[:, :10].to(device), max_new_tokens=5,
                                do_sample=False, pad_token_id=0)
    assert tokens.device.type == torch.device(device).type
    params = {k: v.detach().cpu() for k, v in model.named_parameters()}
    return losses, tokens.cpu(), params


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_training_and_generation_equal_the_cpu_bit_for_bit(llama, impl):
    base, ids, mask = llama
    cpu_losses, cpu_tokens, cpu_params = _train_and_generate(base, ids, mask, "cpu", impl)
    npu_losses, npu_tokens, npu_params = _train_and_generate(base, ids, mask, "npu", impl)
    assert npu_losses == cpu_losses  # fp32 bit-equal, every step
    assert all(torch.equal(npu_params[k], cpu_params[k]) for k in cpu_params)
    assert torch.equal(npu_tokens, cpu_tokens)


def test_flash_attention_2_runs_through_npu_fusion_attention(llama, monkeypatch):
    """transformers sends flash_attention_2 on an NPU to ``torch_npu.npu_fusion_attention`` (BSND without
    padding, TND with the varlen lengths of a padded batch): the emulated operator trains the model within fp32
    rounding of the CPU's SDPA and generates the same tokens."""
    from transformers.integrations import npu_flash_attention

    calls = []
    real = npu_flash_attention.npu_fusion_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("input_layout", args[4] if len(args) > 4 else None))
        return real(*args, **kwargs)

    monkeypatch.setattr(npu_flash_attention, "npu_fusion_attention", counting)
    base, ids, mask = llama
    cpu_losses, cpu_tokens, _ = _train_and_generate(base, ids, mask, "cpu", "sdpa")
    npu_losses, npu_tokens, _ = _train_and_generate(base, ids, mask, "npu", "flash_attention_2")
    assert calls and set(calls) <= {"BSND", "TND"} and "TND" in calls  # the padded batch went varlen
    assert npu_losses == pytest.approx(cpu_losses, rel=1e-5, abs=0)
    assert torch.equal(npu_tokens, cpu_tokens)


def test_compare_models_finds_the_emulated_npu_run_equal_to_the_cpu(llama):
    from ascendify.precision import compare_models

    base, ids, mask = llama
    golden = copy.deepcopy(base)
    golden.config._attn_implementation = "sdpa"
    # use_cache=False: lockstep re-runs every call on the golden inputs, and a DynamicCache argument would
    # grow with each re-run (the layer appends its keys again)
    result = compare_models(golden, golden, ids, golden_device="cpu", target_device="npu",
                            kwargs={"attention_mask": mask, "use_cache": False})
    assert result.verdict == "match", result.to_dict().get("first_divergence")
    layers = [n for n in result.nodes if n.class_name == "LlamaDecoderLayer"]
    assert len(layers) == 2 and all(n.golden_name and n.local["rel_l2"] == 0.0 for n in layers)


def test_accelerate_picks_the_emulated_npu_and_trains_as_the_cpu(llama):
    """accelerate's device plumbing (``Accelerator()``: ``is_npu_available``, ``prepare``, ``backward``) where
    accelerate is installed (it is not a dependency of ascendify)."""
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    base, ids, _ = llama

    def run(cpu: bool):
        AcceleratorState._reset_state(True)
        acc = Accelerator(cpu=cpu)
        model = copy.deepcopy(base)
        model.config._attn_implementation = "sdpa"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=1)
        model, opt, loader = acc.prepare(model, opt, loader)
        losses = []
        for (x,) in loader:
            loss = model(input_ids=x, labels=x).loss
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return str(acc.device), x.device.type, losses

    try:
        npu_device, npu_batch, npu_losses = run(cpu=False)
        cpu_device, _, cpu_losses = run(cpu=True)
    finally:
        AcceleratorState._reset_state(True)
    assert (npu_device, npu_batch, cpu_device) == ("npu", "npu", "cpu")
    assert npu_losses == cpu_losses
