"""A user module imported by cuda_compares.py: its device check is rewritten too (it is the user's code)."""


def on_gpu(device) -> bool:
    return device.type == "cuda"
