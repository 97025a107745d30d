"""Shared by the port tests: a run's :class:`Context` as :func:`ascendify.port.options.plan` would make it."""

from __future__ import annotations

from pathlib import Path

from ascendify.port.options import Context, PortOptions


def make_context(out: Path, project: Path, migrated: Path, command: list[str], target: str = "emulated",
                 target_reason: str = "", *, env: dict[str, str] | None = None, **options) -> Context:
    """``options``: :class:`PortOptions` fields (``steps``, ``lanes``, ``seconds``, ``model``, ``overflow``...)."""
    opts = PortOptions(project=project, command=list(command), **{"lanes": 1, **options})
    return Context(opts, out=out, project=project, migrated=migrated, command=list(command), target=target,
                   target_reason=target_reason, env=env or {})
