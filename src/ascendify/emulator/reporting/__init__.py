"""What happened under emulation: :mod:`.record` (counters, filled on the hot path), :mod:`.ascend_pt` (the
profiler's output folder, as torch_npu writes it) and :mod:`.selftest` (the check run at enable time). The report
built from the counters, as plain data and as a table, is :mod:`ascendify.emulator.render`."""
