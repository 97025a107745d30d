"""The reference trainer: the guide's ResNet-50 recipe for the NPU, done right (``ascendify train``).

Read ``runner.py`` top to bottom: it is the algorithm. Everything else is a small module with a plain name:

- ``config.py``: :class:`TrainConfig`, the one dataclass (TOML file + command-line overrides);
- ``data.py``: the datasets (``synthetic``, scikit-learn's ``digits``, an image folder) and the resumable sampler;
- ``network.py``: the network, from the zoo or ``FILE:FACTORY``: channels-last, activation checkpointing, compile;
- ``checkpoint.py``: best/last checkpoints written atomically, exact resume (RNG states, sampler position);
- ``distributed.py``: torchrun, DDP, the backend from the device (hccl / nccl / gloo), reductions;
- ``metrics.py``: running averages, ``history.json``/CSV, TensorBoard events, the curves PNG.

>>> from ascendify.train import TrainConfig, train          # doctest: +SKIP
>>> history = train(TrainConfig(model="resnet18", data="digits", epochs=5, device="cpu", out="runs/d"))  # doctest: +SKIP
"""

from ascendify.train.config import ConfigError, TrainConfig
from ascendify.train.runner import train

__all__ = ["ConfigError", "TrainConfig", "train"]
