"""Graph mode on the emulated npu: ``torch.compile`` backends (:mod:`.backends`) and the graph-break /
recompilation counts of the summary (:mod:`.events`). NPU graphs (``torch.npu.NPUGraph``) live with the rest of
``torch.npu`` in :mod:`ascendify.emulator.api.npu.graphs`."""
