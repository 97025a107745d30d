"""Op kernels and their policy.

- :mod:`.table`: THE per-op table: for each op, every decision the emulator takes about it (special kernel,
  CPU arguments allowed, no NPU kernel on hardware, autocast policy, fast path). Kernels consult it; nothing
  else hard-codes an op name;
- :mod:`.opinfo`: schema facts per op overload (computed once), joined with the table's policy;
- :mod:`.kernels`: the fallback and the generic kernels (zero-copy CPU aliases, CPU kernel, adopt results);
- :mod:`.fastpath`: specialised kernels for the two commonest op shapes; :mod:`.special`: the ops that need
  their own kernel (copies, ``empty``, ``resize_``...); :mod:`.attention`, :mod:`.fused_rnn`: more of those;
- :mod:`.autocast`: ``torch.autocast("npu")`` with torch_npu's cast policies;
- :mod:`.fidelity`: the checks that make the emulator fail (or warn) where a real NPU would.
"""
