"""Device plumbing: how ``npu`` exists at all on the CPU.

- :mod:`.backend`: refuses where the emulator must not run, renames PrivateUse1 to ``npu``, registers hooks,
  guard, kernels and patches (the order matters);
- :mod:`.tensors`: the zero-copy DLPack retag between ``cpu`` and ``npu`` tensors;
- :mod:`.memory`: device memory accounting (capacity, peaks, OOM); :mod:`.hostmem`: glibc malloc tuning;
- :mod:`.accelerator`: ``torch.accelerator``, ``torch.Stream``/``torch.Event`` and ``torch.get_device_module``
  for the emulated device;
- :mod:`.default_index`: a bare ``"npu"`` means the current device; :mod:`.layouts`: sparse refused;
- :mod:`.autograd_engine`: clear errors where autograd cannot run; :mod:`.rng`: per-device generators;
- :mod:`.patches`: host-memory paths (pinning), ``record_stream``, parameter identity across moves.
"""
