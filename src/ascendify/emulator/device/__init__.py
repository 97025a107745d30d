"""Device plumbing, the emulator's base: how ``npu`` exists at all on the CPU. It imports nothing of the emulator
above it (the kernels in ``ops/``, the torch_npu surface in ``api/``); :mod:`ascendify.emulator.install` puts
the layers together.

- :mod:`.backend`: refuses where the emulator must not run, renames PrivateUse1 to ``npu``, makes the device
  hooks and guard;
- :mod:`.tensors`: the zero-copy DLPack retag between ``cpu`` and ``npu`` tensors;
- :mod:`.hostmem`: glibc malloc tuning (device memory accounting is :mod:`ascendify.emulator.memory`);
- :mod:`.default_index`: a bare ``"npu"`` means the current device; :mod:`.layouts`: sparse refused;
- :mod:`.autograd_engine`: clear errors where autograd cannot run; :mod:`.rng`: per-device generators;
- :mod:`.patches`: host-memory paths (pinning), parameter identity across moves.
"""
