"""Device-agnostic PyTorch spellings for the ``--to portable`` target (torch >= 2.6; checked against torch 2.13).

The portable code runs unchanged on NPU (torch_npu), CUDA, XPU, MPS and the CPU: the device is the current
accelerator when one is available, else the CPU; calls that need an accelerator are guarded.
"""

from __future__ import annotations


def device_type_expr(torch: str = "torch") -> str:
    """A ``str`` expression: ``"npu"``/``"cuda"``/... when an accelerator is usable, else ``"cpu"``."""
    return f'({torch}.accelerator.current_accelerator(check_available=True) or {torch}.device("cpu")).type'


# The portable output names the device type once per file, after its imports:
#     # ascendify: the accelerator in use ("npu", "cuda"...), else "cpu"
#     DEVICE_TYPE = (torch.accelerator.current_accelerator(check_available=True)
#                    or torch.device("cpu")).type
# (two lines: they fit PEP 8's 79 columns)
DEVICE_TYPE_NAME = "DEVICE_TYPE"
DEVICE_TYPE_COMMENT = '# ascendify: the accelerator in use ("npu", "cuda"...), else "cpu"'


def device_type_definition(torch: str = "torch", nl: str = "\n") -> str:
    head = f"{DEVICE_TYPE_NAME} = ("
    return (f"{head}{torch}.accelerator.current_accelerator(check_available=True){nl}"
            f"{' ' * len(head)}or {torch}.device(\"cpu\")).type")


def device_type_block(torch: str = "torch", nl: str = "\n") -> str:
    """The lines added after a file's imports (with a blank line before them)."""
    return f"{nl}{DEVICE_TYPE_COMMENT}{nl}{device_type_definition(torch, nl)}{nl}"


def accel_available(torch: str = "torch") -> str:
    return f"{torch}.accelerator.is_available()"


# Helper classes the portable output defines once per file (after DEVICE_TYPE) where torch has no CPU
# implementation. Their docstring starts with HELPER_MARK, so a later run recognises and reuses them.
HELPER_MARK = "ascendify:"
HOST_EVENT = "HostEvent"
VARLEN_ATTENTION = "varlen_attention"
NPU_CAUSAL_MASK = "npu_causal_mask"
_HELPERS: dict[str, list[str]] = {
    HOST_EVENT: [
        "class HostEvent:",
        '    """ascendify: timing on the host clock (the CPU has no torch.Event)."""',
        "",
        "    def __init__(self, *args, **kwargs):",
        "        self.t = 0.0",
        "",
        "    def record(self, stream=None):",
        "        from time import perf_counter",
        "",
        "        self.t = perf_counter()",
        "",
        "    def elapsed_time(self, end):",
        "        return (end.t - self.t) * 1000.0",
        "",
        "    def query(self):",
        "        return True",
        "",
        "    def synchronize(self):",
        "        pass",
        "",
        "    def wait(self, stream=None):",
        "        pass",
    ],
    # the mask of torch_npu's causal sparse modes, made once per device (ASC608, ASC609; --to npu)
    NPU_CAUSAL_MASK: [
        "def npu_causal_mask(device):",
        '    """ascendify: the 2048x2048 mask (True = masked out) of npu_fusion_attention\'s causal modes."""',
        "    import torch",
        "",
        '    masks = npu_causal_mask.__dict__.setdefault("masks", {})',
        "    if device not in masks:",
        "        ones = torch.ones(2048, 2048, dtype=torch.bool, device=device)",
        "        masks[device] = torch.triu(ones, diagonal=1)",
        "    return masks[device]",
    ],
    # flash_attn_varlen_func on packed (tokens, heads, dim) inputs: one SDPA call per sequence (ASC608)
    VARLEN_ATTENTION: [
        "def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p=0.0, scale=None, causal=False):",
        '    """ascendify: flash-attn varlen attention with SDPA, one sequence at a time (causal: bottom-right)."""',
        "    import torch",
        "    from torch.nn.attention.bias import causal_lower_right",
        "",
        "    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()",
        "    out = []",
        "    for i in range(len(cq) - 1):",
        "        qi = q[cq[i]:cq[i + 1]].transpose(0, 1)",
        "        ki = k[ck[i]:ck[i + 1]].transpose(0, 1)",
        "        vi = v[ck[i]:ck[i + 1]].transpose(0, 1)",
        "        mask = causal_lower_right(qi.shape[1], ki.shape[1]) if causal else None",
        "        out.append(torch.nn.functional.scaled_dot_product_attention(",
        "            qi, ki, vi, attn_mask=mask, dropout_p=dropout_p, scale=scale,",
        "            enable_gqa=ki.shape[0] != qi.shape[0]).transpose(0, 1))",
        "    return torch.cat(out)",
    ],
}
HELPERS = tuple(_HELPERS)


def helper_source(name: str) -> str:
    return "\n".join(_HELPERS[name]) + "\n"


# torch.cuda.X -> (torch.<replacement>, value when no accelerator is available or None for "no guard")
# "NOGUARD" means the replacement works without an accelerator.
NOGUARD = object()
CUDA_TO_PORTABLE: dict[str, tuple[str, object]] = {
    "is_available": ("accelerator.is_available", NOGUARD),
    "device_count": ("accelerator.device_count", NOGUARD),
    "current_device": ("accelerator.current_device_index", "0"),
    "set_device": ("accelerator.set_device_index", "None"),
    "synchronize": ("accelerator.synchronize", "None"),
    "empty_cache": ("accelerator.empty_cache", "None"),
    "memory_allocated": ("accelerator.memory_allocated", "0"),
    "max_memory_allocated": ("accelerator.max_memory_allocated", "0"),
    "memory_reserved": ("accelerator.memory_reserved", "0"),
    "max_memory_reserved": ("accelerator.max_memory_reserved", "0"),
    "memory_stats": ("accelerator.memory_stats", "{}"),
    "reset_peak_memory_stats": ("accelerator.reset_peak_memory_stats", "None"),
    "reset_accumulated_memory_stats": ("accelerator.reset_accumulated_memory_stats", "None"),
    "mem_get_info": ("accelerator.get_memory_info", "(0, 0)"),
    "current_stream": ("get_device_module().current_stream", NOGUARD),  # torch.cpu has a dummy stream
    "stream": ("get_device_module().stream", NOGUARD),
    "set_stream": ("accelerator.set_stream", "None"),
    # called: guarded, see STREAM_EVENT_FALLBACK; named without a call (isinstance, annotations): renamed
    "Stream": ("Stream", NOGUARD),
    "Event": ("Event", NOGUARD),
}

# torch.cuda.Stream(...) / torch.cuda.Event(...) calls -> torch.Stream / torch.Event when an accelerator is
# available, else torch.cpu's stand-ins: torch.cpu.Stream (wait_stream, wait_event, record_event do nothing;
# torch.cpu.stream(s) selects it) and torch.cpu.Event, or the HostEvent helper for timing events
# (record() / elapsed_time() on the host clock). A CPU torch.Stream/torch.Event fails on record_event(),
# wait_stream() and record(): "cpu backend doesn't support events".
STREAM_EVENT_FALLBACK = {"Stream": "cpu.Stream()", "Event": "cpu.Event()"}

# torch.cuda.X -> torch.get_device_module().X (the current accelerator's module: torch.npu, torch.cuda, ...),
# guarded, with this value when no accelerator is available.
DEVICE_MODULE_DEFAULTS: dict[str, str] = {
    "manual_seed": "None",
    "manual_seed_all": "None",
    "seed": "None",
    "seed_all": "None",
    "set_rng_state": "None",
    "set_rng_state_all": "None",
    "get_rng_state": "None",
    "get_device_name": '"cpu"',
    "get_device_properties": "None",
    "is_bf16_supported": "True",
    "utilization": "0",
    "ipc_collect": "None",
}

# Legacy typed constructors torch.cuda.<X>Tensor -> dtype
LEGACY_TENSOR_DTYPES: dict[str, str] = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
    "ByteTensor": "uint8", "BoolTensor": "bool",
}

# Names every torch 2.13 build has (a test checks them by introspection).
TORCH_NAMES_USED = sorted(
    {"torch." + v[0] for v in CUDA_TO_PORTABLE.values()}
    | {
        "torch.accelerator.current_accelerator",
        "torch.accelerator.is_available",
        "torch.amp.autocast",
        "torch.amp.GradScaler",
        "torch.amp.custom_fwd",
        "torch.amp.custom_bwd",
        "torch.distributed.get_default_backend_for_device",
        "torch.get_device_module",
        "torch.Tensor.is_cpu",
        "torch.cpu.current_stream",
        "torch.cpu.stream",
        "torch.cpu.Stream",
        "torch.cpu.Event",
        "torch.autograd.profiler.record_function",
        "torch.Stream",
        "torch.Event",
        "torch.Tensor.record_stream",
        "torch.tensor",
        "torch.empty",
    }
)
