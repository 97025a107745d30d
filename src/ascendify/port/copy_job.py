"""``python -m ascendify.port.copy_job SRC DST [--mirror PARENT] [SKIP...]``: the train stage's job that makes a
scratch copy of a project for one run of ``ascendify port``.

A program writes where it runs (checkpoints, samples, logs, ``out/``): the reference run must not overwrite the
user's project, nor the migrated run fill the migrated copy with its outputs. Each run therefore works in a copy
of its tree under the report folder (``runs/golden/tree/NAME``, ``runs/target/tree/NAME``, NAME the project's
folder name). The copy leaves out what no run needs (``.git``, ``__pycache__``, virtual environments) and links
files larger than ``LINK_ABOVE`` bytes instead of copying them (datasets and checkpoints, read by a run): a program
that writes *into* such a file in place would reach the original, which the report says (``stage.json``).

``--mirror PARENT`` (the folder the project sits in) links every other entry of PARENT beside the copy, so that a
path the program reads above its own folder (``../data``, pytorch/examples' layout) resolves as it would without
port; the migrated copy and the report folder are left out.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

LINK_ABOVE = 32 * 2**20
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache",
             ".ipynb_checkpoints", ".idea", ".vscode"}


def stage(src: Path, dst: Path, *, skip: tuple[Path, ...] = ()) -> dict:
    """Copy ``src`` to ``dst`` (which must not exist) as described above; ``skip``: folders inside ``src`` left
    out (the migrated copy or the report folder when the user put them there). Returns what was done."""
    src, dst = src.resolve(), dst.resolve()
    skipped = {p.resolve() for p in skip}
    linked: list[str] = []
    files = 0
    size = 0
    for root, dirs, names in os.walk(src):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and (here / d).resolve() not in skipped
                         and (here / d).resolve() != dst and not (here / d / "pyvenv.cfg").exists())
        target = dst / here.relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            s, d = here / name, target / name
            try:
                if s.is_symlink():
                    os.symlink(os.readlink(s), d)
                elif s.stat().st_size > LINK_ABOVE:
                    os.symlink(s, d)
                    linked.append(str(s.relative_to(src)))
                else:
                    shutil.copy2(s, d)
                    size += s.stat().st_size
                files += 1
            except OSError as e:
                raise OSError(f"cannot copy {s} for the run: {e.strerror or e}") from None
    return {"from": str(src), "to": str(dst), "files": files, "bytes_copied": size, "linked": linked,
            "link_above_bytes": LINK_ABOVE}


MAX_MIRRORED = 5000  # entries of PARENT linked at most (a project in a crowded home folder)


def mirror(parent: Path, dst: Path, *, own: str, skip: tuple[Path, ...] = ()) -> list[str]:
    """Link every entry of ``parent`` but ``own`` (the project) beside ``dst``; an entry in ``skip`` (the migrated
    copy, the report folder) or above one of them is left out. Returns the names linked."""
    skipped = [p.resolve() for p in skip]
    linked: list[str] = []
    try:
        entries = sorted(parent.iterdir())[:MAX_MIRRORED]
    except OSError:
        return linked
    for entry in entries:
        if entry.name == own or (dst.parent / entry.name).exists():
            continue
        real = entry.resolve()
        if any(real == s or real in s.parents for s in skipped):
            continue
        try:
            os.symlink(entry, dst.parent / entry.name)
            linked.append(entry.name)
        except OSError:
            continue
    return linked


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parent = None
    if "--mirror" in args:
        i = args.index("--mirror")
        parent = Path(args[i + 1]) if i + 1 < len(args) else None
        del args[i:i + 2]
    if len(args) < 2:
        print("usage: python -m ascendify.port.copy_job SRC DST [--mirror PARENT] [SKIP...]", file=sys.stderr)
        return 2
    src, dst = Path(args[0]), Path(args[1])
    top = dst.parent if parent is not None else dst
    if top.exists():
        shutil.rmtree(top)
    skip = tuple(Path(p) for p in args[2:])
    try:
        info = stage(src, dst, skip=skip)
    except OSError as e:
        print(f"copy: {e}", file=sys.stderr)
        return 3
    if parent is not None:
        info["mirrored_from"] = str(parent.resolve())
        info["mirrored"] = mirror(parent, dst, own=dst.name, skip=skip)
    info_dir = dst.parent.parent if parent is not None else dst.parent
    (info_dir / "stage.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    print(f"copy: {info['files']} files of {src} in {dst}" + (f"; {len(info['linked'])} large files linked"
                                                               if info["linked"] else "")
          + (f"; {len(info['mirrored'])} entries beside it linked from {parent}" if info.get("mirrored") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
