"""What happened under emulation: :mod:`.record` (counters, filled on the hot path), :mod:`.summary` (the
report as plain data and as a table) and :mod:`.selftest` (the check run at enable time)."""
