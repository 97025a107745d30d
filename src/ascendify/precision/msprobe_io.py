"""msprobe's on-disk layout: write our dumps in it, and read ours and msprobe's into ``precision.model``.

Layout (per step and rank)::

    ROOT/step{N}/rank{R}/dump.json      {"task", "level", "framework": "pytorch", "dump_data_dir", "data": {...}}
                         stack.json     {"0": [[node names], ["File F, line L, in FUNC, \\n CODE"]], ...}
                         construct.json {node name: enclosing module node name or null}
                         dump_tensor_data/NAME.input.0.pt   (tensor mode: plain tensors, torch.save)

msprobe itself writes ``proc{PID}`` (and older versions ``rank``) instead of ``rank{R}`` for a run without
torch.distributed; all three load. ``data`` entries (keys in execution order)::

    "Functional.gelu.0.forward": {"input_args": [T, ...], "input_kwargs": {"approximate": {"type": "str",
                                  "value": "tanh"}}, "output": [T]}
    "Module.fc.Linear.forward.0": {..., "parameters": {"weight": T, "bias": T}}
    "Module.fc.Linear.backward.0": {"input": [grad of outputs], "output": [grad of inputs]}
    "Module.fc.Linear.parameters_grad.0": {"weight": [T], "bias": [T]}
    T = {"type": "torch.Tensor", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad",
         "data_name" (tensor mode), "md5" (checksum mode)}

What we add, in keys msprobe ignores (``tests/precision/test_msprobe*.py`` checks that ``msprobe compare`` reads
our dumps): per tensor ``fingerprint``, ``nan_count``, ``inf_count``, ``device``; per node an ``"ascendify"``
object (kind, module_path, api, class_name, order, call_index, source, autocast); at the top an ``"ascendify"``
object with the dump's metadata (its presence marks our dumps: ``Dump.framework == "ascendify"``).

Tensor files load with ``torch.load(weights_only=True)`` (``.pt``) or ``numpy.load(allow_pickle=False)``
(``.npy``): never a pickle that can run code.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:  # ~15x faster than json for a step's ~100 KB document (1.6 ms -> 0.1 ms, benchmarks/dump_overhead.py)
    import orjson as _orjson
except ImportError:  # pragma: no cover - a dependency; json serves where it is missing
    _orjson = None
from ascendify.precision.model import Dump, DumpError, Node, ScalarArg, TensorStats, load_tensor  # noqa: F401

_LEVEL_TO_MSPROBE = {"module": "L0", "api": "L1", "mix": "mix"}
_LEVEL_FROM_MSPROBE = {"L0": "module", "L1": "api", "mix": "mix", "L2": "api"}
_MODE_TO_TASK = {"stats": "statistics", "tensors": "tensor", "checksum": "statistics"}

_STEP_RE = re.compile(r"^step(\d+)$")
_RANK_RE = re.compile(r"^(?:rank(\d*)|proc(\d+))$")


# ------------------------------------------------------------------------------------------------ writing


def _json_num(v: float | None) -> Any:
    if v is None:
        return None
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _dumps(obj: Any) -> bytes:
    """``obj`` as one line of JSON. Non-finite floats must already be strings (``_json_num``): orjson would write
    them as null, json as bare ``NaN``/``Infinity`` (not JSON)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj) + b"\n"
        except (TypeError, _orjson.JSONEncodeError):  # an integer beyond 64 bits, a type orjson refuses
            pass
    return (json.dumps(obj) + "\n").encode("utf-8")


class DumpWriteError(RuntimeError):
    """A step could not be written (a full disk, a folder that became read-only): the message names the step and
    the file, and says that the partial step was removed."""


def write_step(dumper, recs, rows) -> Path:
    """Write one recorded step of ``dumper`` (``Dumper``); returns the rank folder. ``rows``: the step's
    statistics rows (``StatTable.rows()``), or the ``StatTable`` itself, whose rows are then read where they are
    (``fastrec.entries``) and made into Python lists only where the Python path needs them. A write that fails (a
    full disk) removes what it wrote of the step, so no rank folder is left without its ``dump.json``, and raises
    :class:`DumpWriteError`."""
    folder = Path(dumper.root) / f"step{dumper.step_index}" / f"rank{dumper.rank}"
    try:
        return _write_step(dumper, recs, rows, folder)
    except OSError as e:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        try:
            folder.parent.rmdir()  # the step folder, when no other rank wrote into it
        except OSError:
            pass
        where = e.filename or folder
        raise DumpWriteError(f"{dumper.root}: step {dumper.step_index} could not be written ({where}: "
                             f"{e.strerror or e}); that step was removed, the steps before it are complete"
                             ) from None


def _write_step(dumper, recs, rows, folder: Path) -> Path:
    import torch

    fresh = not folder.is_dir()  # no earlier files of this step to remove first (_write_plain)
    if not fresh:  # rewriting a step: it stays "interrupted" until its new dump.json lands (_write_last)
        try:
            os.unlink(folder / "dump.json")
        except FileNotFoundError:
            pass
    data_dir = folder / "dump_tensor_data"
    if dumper.mode == "tensors":
        dumper.check_disk(Path(dumper.root), dumper.tensor_bytes())
    saved: dict[int, str] = {}
    host = None
    if hasattr(rows, "host_rows"):  # a StatTable
        host = rows.host_rows()
        rows = _LazyRows(rows, host)

    summaries: dict[Any, tuple] = {}  # statistics index -> the JSON values of its row (a tensor is in many entries)

    def summary(meta, idx) -> tuple:
        key = (idx, meta[1])  # the mean depends on the shape the tensor was seen with
        got = summaries.get(key)
        if got is None:
            row = rows[idx] if idx is not None else None
            if row is None:
                got = (None, None, None, None, [], 0, 0)
            else:
                numel = math.prod(meta[1]) if meta[1] else 1
                vals = [row[1], row[0], row[2] / numel, row[3]]
                fp = row[6:]
                if not math.isfinite(sum(vals) + sum(fp)):
                    vals = [_json_num(x) for x in vals]
                    fp = [_json_num(x) for x in fp]
                got = (*vals, fp, int(row[4]), int(row[5]))
            summaries[key] = got
        return got

    # in statistics and checksum mode an entry depends on the tensor and its shape only: built once, shared by
    # every node that names the tensor (the encoder writes it out each time)
    shared: dict[Any, dict[str, Any]] | None = None if dumper.mode == "tensors" else {}

    def tensor_entry(node_name: str, role: str, meta, idx) -> dict[str, Any]:
        if shared is not None:
            key = (idx, meta)
            e = shared.get(key)
            if e is None:
                e = shared[key] = _tensor_entry(node_name, role, meta, idx)
            return e
        return _tensor_entry(node_name, role, meta, idx)

    stats_only = dumper.mode == "stats"

    def _tensor_entry(node_name: str, role: str, meta, idx) -> dict[str, Any]:
        mx, mn, mean, norm, fp, nans, infs = summary(meta, idx)
        if stats_only:  # most dumps: no file, no checksum; one dict display, in the order below
            return {"type": "torch.Tensor", "dtype": meta[0], "shape": list(meta[1]), "Max": mx, "Min": mn,
                    "Mean": mean, "Norm": norm, "requires_grad": meta[2], "fingerprint": fp, "nan_count": nans,
                    "inf_count": infs, "device": meta[3]}  # fmt: skip
        e: dict[str, Any] = {
            "type": "torch.Tensor",
            "dtype": meta[0],
            "shape": list(meta[1]),
            "Max": mx,
            "Min": mn,
            "Mean": mean,
            "Norm": norm,
            "requires_grad": meta[2],
        }
        kept = dumper.kept_tensor(idx) if dumper.mode == "tensors" else None
        if kept is not None:
            # one file per entry, named as msprobe names it (its compare shows file names); a tensor seen under
            # several names is written once and hard-linked
            fname = f"{node_name}.{role}.pt"
            if idx not in saved:
                buf = io.BytesIO()
                torch.save(kept.contiguous(), buf)
                _write_plain(data_dir / fname, buf.getvalue(), fresh)
                saved[idx] = fname
            elif fname != saved[idx]:
                _link(data_dir / saved[idx], data_dir / fname)
            e["data_name"] = fname
        md5 = dumper.checksum(idx) if dumper.mode == "checksum" else None
        if md5 is not None:
            e["md5"] = md5
        e["fingerprint"] = fp
        e["nan_count"] = nans
        e["inf_count"] = infs
        e["device"] = meta[3]
        return e

    def value_entry(node_name: str, role: str, item) -> Any:
        key, meta, idx = item
        if isinstance(meta, ScalarArg):
            if meta.type == "NoneType":
                return None
            v = meta.value
            if isinstance(v, float):
                v = float(v)  # a subclass (numpy.float64): a plain float, which orjson writes
                if not math.isfinite(v):
                    v = _json_num(v)  # read back by _values
            return {"type": meta.type, "value": v}
        return tensor_entry(node_name, role, meta, idx)

    def shared_entry(item) -> Any:
        """``value_entry`` where entries do not depend on the node's name (``shared``: statistics, checksum)."""
        meta = item[1]
        if type(meta) is ScalarArg:
            return value_entry("", "", item)
        key = (item[2], meta)
        e = shared.get(key)
        if e is None:
            e = shared[key] = _tensor_entry("", "", meta, item[2])
        return e

    def flat_entries(items: list) -> list:
        """``_nest(items, shared_entry)`` for the common list: keys "0", "1", ... in order, tensors already
        entered (a tensor is named by several calls), each looked up once."""
        out = []
        for it in items:
            meta = it[1]
            if type(meta) is ScalarArg:
                out.append(value_entry("", "", it))
                continue
            key = (it[2], meta)
            e = shared.get(key)
            if e is None:
                e = shared[key] = _tensor_entry("", "", meta, it[2])
            out.append(e)
        return out

    data: dict[str, Any] = {}
    construct: dict[str, str | None] = {}
    stacks: dict[str, list[str]] = {}
    texts: dict[Any, tuple] = {}  # a source location -> its texts (many calls share a line)
    source_text = dumper.source_text
    n_flat = len(_FLAT_LISTS)

    def forward_entry(rec, order: int, src: str | None) -> dict[str, Any]:
        asc = _asc(rec, order, src)
        args, outs = rec.args, rec.outputs
        if (
            shared is not None and (not args or args[-1][0][:1].isdigit())
            and (not outs or (len(outs) == 1 and outs[0][0] == "0"))
        ):  # fmt: skip
            # most calls: no keyword arguments (the dumper records them after the positional ones), one output;
            # the entry as one dict display (the keys in msprobe's order, ours last)
            n = len(args)
            ins = flat_entries(args) if n < n_flat and [it[0] for it in args] == _FLAT_LISTS[n] else _nest(
                args, shared_entry)  # fmt: skip
            if rec.kind == "module":
                return {"input_args": ins, "input_kwargs": {}, "output": flat_entries(outs),
                        "parameters": {p: shared_entry((p, meta, idx)) for p, (meta, idx) in rec.params.items()},
                        "ascendify": asc}  # fmt: skip
            return {"input_args": ins, "input_kwargs": {}, "output": flat_entries(outs), "ascendify": asc}
        entry: dict[str, Any] = {}
        args = [x for x in rec.args if _is_positional(x[0])]
        kwargs = [x for x in rec.args if not _is_positional(x[0])]
        entry["input_args"] = _nest(args, lambda it, nm=rec.name: value_entry(nm, f"input.{it[0]}", it))
        entry["input_kwargs"] = {
            it[0]: value_entry(rec.name, f"input.{it[0]}", it) for it in kwargs if "." not in it[0]
        }
        for it in kwargs:  # a list passed by keyword: nest under its name
            if "." in it[0]:
                head = it[0].split(".")[0]
                entry["input_kwargs"].setdefault(head, [])
                if isinstance(entry["input_kwargs"][head], list):
                    entry["input_kwargs"][head].append(value_entry(rec.name, f"input.{it[0]}", it))
        if all(_is_positional(it[0]) for it in rec.outputs):
            entry["output"] = _nest(rec.outputs, lambda it, nm=rec.name: value_entry(nm, f"output.{it[0]}", it))
        else:  # a dict (a ModelOutput): a flat list in its order, each entry keeping its key
            entry["output"] = []
            for i, it in enumerate(rec.outputs):
                v = value_entry(rec.name, f"output.{i}", it)
                if isinstance(v, dict):
                    v = {**v, "key": it[0]}  # entries are shared between nodes: never changed in place
                entry["output"].append(v)
        if rec.kind == "module":
            entry["parameters"] = {
                p: tensor_entry(rec.name, f"parameters.{p}", meta, idx) for p, (meta, idx) in rec.params.items()
            }
        entry["ascendify"] = asc
        return entry

    # statistics mode: the forward entries as JSON text, written by the C++ recorder (fastrec.entries) in one call
    fast = _fast_entries() if stats_only else None
    specs: list[tuple] = []
    spec_recs: list[tuple] = []
    for order, rec in enumerate(recs):
        source = rec.source
        got = texts.get(source)
        if got is None:
            got = texts[source] = source_text(source)
        src, stack_line = got
        if rec.direction == "forward":
            if fast is not None:
                entry = None  # a place in the order, filled below
                specs.append((rec.name, rec.args, rec.outputs, rec.params if rec.kind == "module" else None,
                              (rec.kind, rec.module_path, rec.api, rec.class_name, order, rec.call_index, src,
                               rec.autocast)))  # fmt: skip
                spec_recs.append((rec, order, src))
            else:
                entry = forward_entry(rec, order, src)
        else:
            entry = {
                "input": _nest(_dense(rec.args), lambda it, nm=rec.name: value_entry(nm, f"input.{it[0]}", it)),
                "output": _nest(_dense(rec.outputs), lambda it, nm=rec.name: value_entry(nm, f"output.{it[0]}", it)),
                "ascendify": _asc(rec, order, src),
            }
        data[rec.name] = entry
        construct[rec.name] = rec.parent
        if stack_line:
            stacks.setdefault(stack_line, []).append(rec.name)
        if rec.grads:
            gname = f"{rec.base}.parameters_grad.{rec.call_index}"
            data[gname] = {
                p: [tensor_entry(gname, p, meta, idx)] for p, (meta, idx) in rec.grads.items()
            }
            construct[gname] = None
    if specs:
        # what it left (a nested or unusual value): as above
        for i in fast(specs, rows if host is None else host, _orjson.Fragment, data):
            data[spec_recs[i][0].name] = forward_entry(*spec_recs[i])

    import torch as _t

    doc = {
        "task": _MODE_TO_TASK[dumper.mode],
        "level": _LEVEL_TO_MSPROBE[dumper.level],
        "framework": "pytorch",
        "dump_data_dir": str(data_dir.resolve()) if dumper.mode == "tensors" else None,
        "data": data,
        "ascendify": {
            "level": dumper.level,
            "mode": dumper.mode,
            "step": dumper.step_index,
            "rank": dumper.rank,
            "torch": _t.__version__,
            "devices": sorted({r[1][3] for rec in recs for r in rec.outputs if not isinstance(r[1], ScalarArg)}),
            "scope": list(dumper.scope),
        },
    }
    stack_doc = {str(i): [names, [line]] for i, (line, names) in enumerate(stacks.items())}
    # dump.json last and atomically: a step folder without it is an interrupted step (the loader says so), and
    # the files written before it are only read through it
    _write_plain(folder / "stack.json", _dumps(stack_doc), fresh)
    _write_plain(folder / "construct.json", _dumps(construct), fresh)
    if specs:
        try:
            body = _orjson.dumps(doc) + b"\n"
        except (TypeError, _orjson.JSONEncodeError):  # a value orjson refuses elsewhere: json writes all, without text
            for rec, order, src in spec_recs:
                data[rec.name] = forward_entry(rec, order, src)
            body = _dumps(doc)
    else:
        body = _dumps(doc)
    _write_last(folder / "dump.json", body)
    return folder


class _LazyRows:
    """A ``StatTable``'s rows as lists, made from its ``host_rows()`` on the first look at a row (a node the Python
    path writes): the rows torch made on a device are moved to the host once."""

    __slots__ = ("table", "host", "rows")

    def __init__(self, table, host):
        self.table = table
        self.host = host
        self.rows = None

    def __getitem__(self, i: int):
        if self.rows is None:
            self.rows = self.table.rows_from(self.host)
        return self.rows[i]


# ------------------------------------------------------------------------------------------------ the dump folder

# written into the folder of ``ascendify dump``: a later dump recognises its own earlier output and replaces it
# whole; any other non-empty folder is refused (it holds a user's files)
DUMP_MARKER = ".ascendify-dump.json"


def _own_entry(p: Path) -> bool:
    """What ``ascendify dump`` writes at the top of its folder: ``step<N>/``, ``overflow.json``, the marker."""
    return (_STEP_RE.match(p.name) is not None and p.is_dir()) or p.name in ("overflow.json", DUMP_MARKER)


def _earlier_dump(folder: Path) -> bool:
    """A dump written before the marker existed: only our entries, and a ``dump.json`` (or ``overflow.json``) of
    ours among them (msprobe's dumps, with no ``ascendify`` key, are the user's)."""
    from ascendify.core.fileio import LOCK_NAME

    entries = [p for p in folder.iterdir() if p.name != LOCK_NAME]
    if not entries or not all(_own_entry(p) for p in entries):
        return False
    for p in entries:
        try:
            if p.name == "overflow.json":
                doc = json.loads(p.read_text(encoding="utf-8"))
                return isinstance(doc, dict) and "calls_checked" in doc and "program" in doc
            for rd in p.iterdir():
                f = rd / "dump.json"
                if f.is_file():
                    doc = _read_json(f)
                    return isinstance(doc, dict) and isinstance(doc.get("ascendify"), dict)
        except (OSError, ValueError):
            return False
    return False


class DumpFolder:
    """What :func:`dump_folder` yields: set ``exit_code`` before leaving; it goes in the marker."""

    def __init__(self, root: Path, prepared: bool):
        self.root = root
        self.prepared = prepared  # this process took the folder (not a rank of a run another process prepared)
        self.exit_code: int | None = None


class DumpFolderError(ValueError):
    """The dump folder cannot be used: another dump is writing it, or it holds a user's files."""


@contextlib.contextmanager
def dump_folder(root: str | os.PathLike[str], *, program: str, who: str = "ascendify dump") -> Iterator[DumpFolder]:
    """Take the dump folder ``root`` for one run of ``ascendify dump``: refuse it while another dump (or any
    ascendify verb) writes it (``core.fileio.output_lock``), refuse a non-empty folder it did not write (no
    ``.ascendify-dump.json`` marker, and not a dump of ours from before the marker), replace an earlier dump of
    ours whole (its ``step<N>/`` folders and ``overflow.json`` go; a file the user put beside them stays), and
    mark the folder as ours, unfinished until the run ends. Raises :class:`DumpFolderError`.

    Ranks other than 0 of a distributed run take nothing: rank 0 (or the ``ascendify dump`` that started
    torchrun) prepared the folder, and each rank writes only its own ``rank<R>`` folders."""
    from ascendify.core import fileio

    root = Path(root)
    if os.environ.get("RANK", "0").strip() not in ("", "0"):
        yield DumpFolder(root, prepared=False)
        return
    stack = contextlib.ExitStack()
    try:
        lock = stack.enter_context(fileio.output_lock(root, who))
    except fileio.OutputLocked as e:
        raise DumpFolderError(str(e)) from None
    except OSError as e:
        raise DumpFolderError(f"{root}: cannot be made ({e.strerror or e})") from None
    with stack:
        held = DumpFolder(root, prepared=not lock.inherited)
        if held.prepared:
            problem = fileio.foreign_output(root, DUMP_MARKER, who, ours=_earlier_dump)
            if problem:
                raise DumpFolderError(problem)
            try:
                fileio.remove_entries(root, _own_entry)
                _mark(root, who, program, finished=False)
            except OSError as e:
                raise DumpFolderError(f"{root}: cannot be written ({e.strerror or e})") from None
        yield held
        if held.prepared:
            try:
                _mark(root, who, program, finished=True, exit_code=held.exit_code)
            except OSError:
                pass  # a full disk: the marker still says "unfinished", which is true enough


def _mark(root: Path, who: str, program: str, **info: Any) -> None:
    import time

    from ascendify.core import fileio

    fileio.write_marker(root, DUMP_MARKER, who, program=program, time=time.strftime("%Y-%m-%d %H:%M:%S"), **info)


def _write_plain(path: Path, data: bytes | str, fresh: bool = False) -> None:
    """Write ``path`` in a step folder (made when missing). ``fresh``: the folder was made by this write of the
    step (nothing of an earlier dump in it to remove first). Plain ``os`` calls: a dump writes three files a step,
    and ``pathlib``'s and ``open()``'s layers cost more than the system calls (``benchmarks/dump_overhead.py``)."""
    p = os.fspath(path)
    if not fresh:
        # rewriting a step (whose dump.json _write_step removed first): the file is removed before it is written
        # again, as ext4 flushes a truncated file's new data at close (auto_da_alloc), ~0.5 ms a file
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    _write_file(p, data, 0o666)


def _write_last(path: Path, data: bytes) -> None:
    """Write a step's ``dump.json`` atomically (a temporary file beside it, renamed over it), mode 0o644 whatever
    the umask, without an fsync (only a power loss can lose it); a failure removes the temporary file."""
    p = os.fspath(path)
    tmp = os.path.join(os.path.dirname(p), f".dump.json.{os.getpid()}.tmp")
    try:
        _write_file(tmp, data, 0o644, chmod=True)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def _write_file(p: str, data: bytes | str, mode: int, chmod: bool = False) -> None:
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        fd = os.open(p, _O_NEW, mode)
    except FileNotFoundError:  # the step's folder (or its tensor folder) is new
        os.makedirs(os.path.dirname(p), exist_ok=True)
        fd = os.open(p, _O_NEW, mode)
    try:
        if chmod:
            os.fchmod(fd, mode)  # the umask may have taken bits off
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _link(src: Path, dst: Path) -> None:
    try:
        if dst.exists():
            dst.unlink()
        os.link(src, dst)
    except OSError:
        _write_plain(dst, src.read_bytes())


def _asc(rec, order: int, src: str | None) -> dict[str, Any]:
    """A node's ``ascendify`` entry: what msprobe's layout has no place for."""
    return {"kind": rec.kind, "module_path": rec.module_path, "api": rec.api, "class_name": rec.class_name,
            "order": order, "call_index": rec.call_index, "source": src, "autocast": rec.autocast}  # fmt: skip


def _fast_entries():
    """``fastrec.entries`` where the C++ recorder is loaded and orjson can take its text, else None."""
    if _orjson is None or not hasattr(_orjson, "Fragment"):
        return None
    from ascendify.precision import fastrec

    return fastrec.entries()


_FLAT_KEYS = tuple(str(i) for i in range(64))
_FLAT_LISTS = [list(_FLAT_KEYS[:n]) for n in range(len(_FLAT_KEYS) + 1)]  # [], ["0"], ... ["0", ..., "63"]


def _is_positional(key: str) -> bool:
    return key[:1].isdigit()  # "0", "1.0"; keyword names never start with a digit


def _dense(items: list) -> list:
    """Backward grads arrive in any order and some never arrive: sort by key, fill holes with None."""
    by_key = {}
    for it in items:
        by_key[it[0]] = it
    if not by_key:
        return []
    tops = [k for k in by_key if "." not in k and k.isdigit()]
    n = max((int(k) for k in tops), default=-1) + 1
    out = []
    for i in range(n):
        out.append(by_key.get(str(i), (str(i), ScalarArg("NoneType", None, str(i)), None)))
    out += [by_key[k] for k in sorted(by_key) if not (k.isdigit() and "." not in k)]
    return out


def _nest(items: list, conv) -> list:
    """Rebuild nesting from keys "0", "1.0", "1.1" -> [v0, [v10, v11]]."""
    if len(items) <= len(_FLAT_KEYS) and all(it[0] == k for it, k in zip(items, _FLAT_KEYS, strict=False)):
        return [conv(it) for it in items]  # most calls: keys "0", "1", ... in order, nothing nested
    out: list = []
    for it in items:
        parts = it[0].split(".")
        if not parts[0].isdigit():
            continue
        cur = out
        for p in parts[:-1]:
            i = int(p)
            while len(cur) <= i:
                cur.append([])
            if not isinstance(cur[i], list):
                cur[i] = [cur[i]]
            cur = cur[i]
        i = int(parts[-1])
        while len(cur) < i:
            cur.append(None)
        if len(cur) == i:
            cur.append(conv(it))
        else:
            cur[i] = conv(it)
    return out


# ------------------------------------------------------------------------------------------------ reading


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DumpError(path, f"cannot be read ({e.strerror or e})") from None
    if not raw.strip():
        raise DumpError(path, "is empty")
    if _orjson is not None:
        try:
            return _orjson.loads(raw)  # a third faster on a large dump.json
        except _orjson.JSONDecodeError:
            pass  # msprobe's bare NaN / Infinity (not JSON), or a damaged file: json says which
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise DumpError(path, f"is not valid JSON (truncated or damaged?): {e.msg} at line {e.lineno}") from None


def list_steps_ranks(root: str | os.PathLike[str]) -> list[tuple[int, int]]:
    root = Path(root)
    if not root.is_dir():
        raise DumpError(root, "no such dump folder")
    out = []
    for sd in root.iterdir():
        m = _STEP_RE.match(sd.name)
        if not (m and sd.is_dir()):
            continue
        for rd in sd.iterdir():
            r = _rank_of(rd.name)
            if r is not None and (rd / "dump.json").is_file():
                out.append((int(m.group(1)), r))
    return sorted(out)


def _rank_of(name: str) -> int | None:
    m = _RANK_RE.match(name)
    if not m:
        return None
    if m.group(2) is not None:
        return 0  # proc{pid}: a run without torch.distributed
    return int(m.group(1)) if m.group(1) else 0


def resolve(path: str | os.PathLike[str], step: int | None = None, rank: int | None = None) -> tuple[Path, int, int]:
    """The ``dump.json`` for ``path`` (root, step folder, rank folder or the file), with its step and rank."""
    p = Path(os.path.normpath(path))
    if not p.exists():
        raise DumpError(p, "no such file or folder")
    if p.is_file():
        if p.name != "dump.json":
            raise DumpError(p, "not a dump: expected a dump folder or its dump.json")
        return p, _step_of(p.parent.parent.name), _rank_of(p.parent.name) or 0
    if (p / "dump.json").is_file():
        return p / "dump.json", _step_of(p.parent.name), _rank_of(p.name) or 0
    if _STEP_RE.match(p.name):
        ranks = sorted((r, d) for d in p.iterdir() if d.is_dir() and (r := _rank_of(d.name)) is not None)
        if not ranks:
            raise DumpError(p, "a step folder with no rank folder (rank0/, rank/ or proc<pid>/) in it")
        return _pick_rank(p, ranks, rank), _step_of(p.name), (rank if rank is not None else ranks[0][0])
    pairs = list_steps_ranks(p)
    if not pairs:
        if any(_STEP_RE.match(d.name) for d in p.iterdir()):
            raise DumpError(p, "step folders hold no rank folder with a dump.json (an interrupted dump?)")
        raise DumpError(p, "not a dump: no dump.json and no step<N>/rank<R>/dump.json under it")
    steps = sorted({s for s, _ in pairs})
    if step is None:
        step = steps[0]
    elif step not in steps:
        raise DumpError(p, f"no step {step} (steps present: {', '.join(map(str, steps))})")
    sd = p / f"step{step}"
    ranks = sorted((r, d) for d in sd.iterdir() if d.is_dir() and (r := _rank_of(d.name)) is not None)
    return _pick_rank(sd, ranks, rank), step, (rank if rank is not None else ranks[0][0])


def _pick_rank(step_dir: Path, ranks: list[tuple[int, Path]], rank: int | None) -> Path:
    if rank is None:
        rank = ranks[0][0]
    for r, d in ranks:
        if r == rank:
            f = d / "dump.json"
            if not f.is_file():
                raise DumpError(d, "no dump.json in this rank folder (an interrupted dump?)")
            return f
    have = ", ".join(str(r) for r, _ in ranks)
    raise DumpError(step_dir, f"no rank {rank} (ranks present: {have})")


def _step_of(name: str) -> int:
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else 0


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None if v is None else float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.replace("Infinity", "inf"))
        except ValueError:
            return None
    return None


_STATS = ("Max", "Min", "Mean", "Norm")


def _stat(d: dict[str, Any], name: str, where: str) -> float | None:
    """A statistic of a tensor entry: a number, null, or a non-finite one written as a string ("NaN", "inf")."""
    v = d.get(name)
    x = _num(v)
    if x is None and v is not None:
        raise ValueError(f"{where}: {name} is {v!r}, not a number")
    return x


def _tensor(d: dict[str, Any], key: str, where: str | None = None) -> TensorStats:
    """One tensor entry, checked: a damaged or edited entry is an error that says what is wrong (a dump that does
    not say what its tensors hold cannot be compared, and must not be read as another model or a random draw)."""
    where = where or f"tensor {key}"
    missing = [k for k in ("dtype", "shape") if k not in d]
    if missing:
        raise ValueError(f"{where}: a tensor without {' and '.join(missing)}")
    if not isinstance(d["shape"], list) or not all(isinstance(x, int) and x >= 0 for x in d["shape"]):
        raise ValueError(f"{where}: shape is {d['shape']!r}, not a list of sizes")
    absent = [k for k in _STATS if k not in d]
    if absent and "md5" not in d and not d.get("data_name"):
        raise ValueError(f"{where}: no {', '.join(absent)} (a statistics dump has Max, Min, Mean and Norm for "
                         "every tensor)")
    mx, mn = _stat(d, "Max", where), _stat(d, "Min", where)
    counts = []
    for k in ("nan_count", "inf_count"):
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"{where}: {k} is {v!r}, not a count")
        counts.append(v or 0)
    ref = d.get("data_name")
    return TensorStats(
        dtype=str(d.get("dtype")),
        shape=tuple(d["shape"]),
        max=mx,
        min=mn,
        mean=_stat(d, "Mean", where),
        norm=_stat(d, "Norm", where),
        nan_count=counts[0],
        inf_count=counts[1],
        fingerprint=tuple(_num(x) or 0.0 for x in d.get("fingerprint") or ()),
        data_ref=f"dump_tensor_data/{ref}" if ref and ref != "-1" else None,
        md5=d.get("md5"),
        key=d.get("key") or key,
        requires_grad=d.get("requires_grad"),
        device=d.get("device"),
    )


def _is_tensor(d: Any) -> bool:
    return isinstance(d, dict) and ("dtype" in d and "shape" in d) and d.get("type") != "torch.Size"


_NON_FINITE = ("NaN", "Infinity", "-Infinity")


def _looks_like_tensor(d: Any) -> bool:
    """A tensor entry that lost its ``dtype`` or ``shape``: typed ``torch.Tensor``, or statistics without a
    scalar's ``value``."""
    return isinstance(d, dict) and (d.get("type") == "torch.Tensor" or ("value" not in d and any(k in d for k in _STATS)))


def _values(v: Any, key: str, out: list, scalars: dict | None, where: str = "") -> None:
    if _is_tensor(v) or _looks_like_tensor(v):
        out.append(_tensor(v, key, f"{where} {key or '0'}".strip()))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _values(x, f"{key}.{i}" if key else str(i), out, scalars, where)
    elif isinstance(v, dict) and "type" in v:
        value = v.get("value")
        if isinstance(value, str) and value in _NON_FINITE and v.get("type") != "str":
            value = _num(value)  # a non-finite float (numpy.float64 too), written as "NaN" / "Infinity" / "-Infinity"
        s = ScalarArg(str(v.get("type")), value, key)
        out.append(s)
        if scalars is not None:
            scalars[key] = s.value
    else:
        s = ScalarArg("NoneType" if v is None else type(v).__name__, v, key)
        out.append(s)
        if scalars is not None:
            scalars[key] = v


_NAME_API = re.compile(r"^(?P<prefix>[A-Za-z_]+)\.(?P<api>.+)\.(?P<idx>\d+)\.(?P<dir>forward|backward)$")
_NAME_MODULE = re.compile(r"^Module\.(?P<body>.+)\.(?P<dir>forward|backward)\.(?P<idx>\d+)$")
_NAME_GRAD = re.compile(r"^Module\.(?P<body>.+)\.parameters_grad(?:\.(?P<idx>\d+))?$")
_API_PREFIX = {"Functional": "torch.nn.functional", "Torch": "torch", "Tensor": "Tensor", "NPU": "torch_npu",
               "Distributed": "torch.distributed", "Aten": "torch.ops.aten", "VF": "torch._VF"}  # fmt: skip


# torch.nn.init functions: no torch.* function has these names, so ``Torch.normal_`` (our node name for
# ``torch.nn.init.normal_``, read without our keys) is the init function
_INIT_NAMES = frozenset(
    "uniform_ normal_ constant_ ones_ zeros_ eye_ dirac_ xavier_uniform_ xavier_normal_ kaiming_uniform_ "
    "kaiming_normal_ trunc_normal_ orthogonal_ sparse_".split()
)


def _parse_name(name: str) -> dict[str, Any] | None:
    m = _NAME_MODULE.match(name)
    if m:
        parts = m.group("body").split(".")
        cls = parts[-1]
        path = ".".join(parts[:-1])
        return {"kind": "module", "module_path": path, "class_name": cls, "direction": m.group("dir"),
                "call_index": int(m.group("idx")), "api": None}  # fmt: skip
    m = _NAME_API.match(name)
    if m:
        prefix, api = m.group("prefix"), m.group("api")
        dotted = f"{_API_PREFIX.get(prefix, prefix)}.{api}"
        if prefix == "Torch" and api in _INIT_NAMES:
            dotted = f"torch.nn.init.{api}"
        return {"kind": "api", "module_path": None, "class_name": None, "direction": m.group("dir"),
                "call_index": int(m.group("idx")), "api": dotted}  # fmt: skip
    return None


_STACK_LINE = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in")
_INTERNAL = ("/torch/", "/msprobe/", "/ascendify/precision/", "/ascendify/emulator/", "/contextlib.py", "<frozen")


def _stack_sources(path: Path) -> dict[str, str]:
    """node name -> "file:line" of the first frame outside torch/msprobe in stack.json (both of its formats)."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}  # the stacks are decoration: a damaged stack.json costs the source lines only
    out: dict[str, str] = {}

    def first(lines: list) -> str | None:
        for line in lines or []:
            m = _STACK_LINE.search(str(line))
            if m and not any(s in m.group("file") for s in _INTERNAL):
                return f"{m.group('file')}:{m.group('line')}"
        return None

    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, list) and len(v) == 2 and isinstance(v[0], list) and isinstance(v[1], list):
                src = first(v[1])
                for n in v[0]:
                    if src:
                        out[str(n)] = src
            elif isinstance(v, list):
                src = first(v)
                if src:
                    out[k] = src
    return out


def load_dump(path: str | os.PathLike[str], step: int | None = None, rank: int | None = None) -> Dump:
    f, step_n, rank_n = resolve(path, step, rank)
    doc = _read_json(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict) or "task" not in doc:
        raise DumpError(f, "not a dump.json: expected an object with 'task' and 'data' (msprobe's layout)")
    ours = doc.get("ascendify") if isinstance(doc.get("ascendify"), dict) else None
    if doc.get("framework") not in (None, "pytorch"):
        raise DumpError(f, f"a {doc.get('framework')} dump; only PyTorch dumps can be read")
    folder = f.parent
    construct = {}
    cpath = folder / "construct.json"
    if cpath.is_file():
        c = _read_json(cpath)
        if isinstance(c, dict):
            construct = c
    sources = {} if ours else _stack_sources(folder / "stack.json")
    nodes: list[Node] = []
    by_name: dict[str, Node] = {}
    pending_grads: list[tuple[str, dict]] = []
    for name, entry in doc["data"].items():
        if not isinstance(entry, dict):
            raise DumpError(f, f"entry {name!r} is not an object")
        g = _NAME_GRAD.match(name)
        if g:
            pending_grads.append((name, entry))
            continue
        info = _parse_name(name)
        if info is None:
            info = {"kind": "api", "module_path": None, "class_name": None, "direction": "forward",
                    "call_index": 0, "api": name}  # fmt: skip
        extra = entry.get("ascendify") if isinstance(entry.get("ascendify"), dict) else {}
        node = Node(
            name=name,
            kind=extra.get("kind", info["kind"]),
            direction=info["direction"],
            call_index=int(extra.get("call_index", info["call_index"])),
            order=len(nodes),
            module_path=extra.get("module_path", info["module_path"]),
            api=extra.get("api", info["api"]),
            class_name=extra.get("class_name", info["class_name"]),
            parent=construct.get(name),
            source=extra.get("source", sources.get(name)),
            autocast=extra.get("autocast"),
        )
        try:
            if info["direction"] == "forward":
                _values(entry.get("input_args", []), "", node.inputs, node.scalars, "input")
                for k, v in (entry.get("input_kwargs") or {}).items():
                    _values(v, k, node.inputs, node.scalars, "input")
            else:
                _values(entry.get("input", []), "", node.inputs, None, "input")
            outs: list = []
            _values(entry.get("output", []), "", outs, None, "output")
            node.outputs = [x for x in outs if isinstance(x, TensorStats)]
            for p, v in (entry.get("parameters") or {}).items():
                if _is_tensor(v) or _looks_like_tensor(v):
                    node.params[p] = _tensor(v, p, f"parameter {p}")
        except (TypeError, ValueError, AttributeError) as e:
            raise DumpError(f, f"entry {name!r} is malformed: {e}") from None
        nodes.append(node)
        by_name[name] = node
    if not ours:
        _infer_api_module_paths(nodes, by_name)
    for name, entry in pending_grads:
        g = _NAME_GRAD.match(name)
        assert g is not None
        idx = g.group("idx") or "0"
        target = by_name.get(f"Module.{g.group('body')}.backward.{idx}")
        if target is None:
            info = _parse_name(f"Module.{g.group('body')}.backward.{idx}") or {}
            target = Node(name=f"Module.{g.group('body')}.backward.{idx}", kind="module", direction="backward",
                          call_index=int(idx), order=len(nodes), module_path=info.get("module_path"),
                          class_name=info.get("class_name"))  # fmt: skip
            nodes.append(target)
            by_name[target.name] = target
        for p, v in entry.items():
            v = v[0] if isinstance(v, list) and v else v
            if _is_tensor(v) or _looks_like_tensor(v):
                try:
                    target.grads[p] = _tensor(v, p, f"gradient {p}")
                except ValueError as e:
                    raise DumpError(f, f"entry {name!r} is malformed: {e}") from None
    meta = dict(ours or {})
    meta.setdefault("task", doc.get("task"))
    meta["msprobe_level"] = doc.get("level")
    level = (ours or {}).get("level") or _LEVEL_FROM_MSPROBE.get(str(doc.get("level")), "mix")
    task = doc.get("task")
    mode = (ours or {}).get("mode") or ("tensors" if task == "tensor" else "stats")
    if not ours and any(t.md5 for n in nodes for t in n.outputs):
        mode = "checksum"
    return Dump(
        root=str(folder),
        step=int((ours or {}).get("step", step_n)),
        rank=int((ours or {}).get("rank", rank_n)),
        framework="ascendify" if ours else "msprobe",
        level=level,
        mode=mode,
        nodes=nodes,
        meta=meta,
    )


def _infer_api_module_paths(nodes: list[Node], by_name: dict[str, Node]) -> None:
    """msprobe dumps: an api node's module path is its parent module node's path (from construct.json)."""
    for n in nodes:
        if n.kind == "api" and n.module_path is None and n.parent:
            p = by_name.get(n.parent)
            if p is not None and p.kind == "module":
                n.module_path = p.module_path
