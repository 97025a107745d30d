"""The Ascend rank-table launch convention, checked against the process group the emulated ``hccl`` makes.

On Ascend clusters a job is often described by a rank table (``RANK_TABLE_FILE``, the ``hccl.json`` that
MindCluster/Ascend Operator writes): ``server_list`` with, per server, its ``device`` entries (``device_id`` on
that server, ``rank_id`` in the job). The launch scripts start one process per device with ``RANK_ID``,
``RANK_SIZE`` and ``DEVICE_ID`` and call ``init_process_group("hccl", rank=RANK_ID, world_size=RANK_SIZE)``;
torch_npu then builds the global HCCL communicator from the table (``HcclCommInitClusterInfoConfig``), where
the process group's rank must be the table's ``rank_id`` and its size the table's number of ranks.

Under emulation the table maps to the process group thus: world size = the number of ``rank_id`` s, rank =
``rank_id``, the rank's device = ``device_id`` (``DEVICE_ID``, else ``LOCAL_RANK``, else the current device,
must match), ranks per server = that server's devices. :func:`check_group` runs when the default ``hccl``
group is created; a table that does not match the group fails then, with what differs (on hardware the
mismatch shows later, "at the first communication", per torch_npu's RANK_TABLE_FILE documentation). A
``RANK_TABLE_FILE`` path that does not exist is ignored, as torch_npu does.

>>> t = parse({"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
...     {"server_id": "node0", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]}]})
>>> t.world_size, t.device_of(1), t.server_of(1), t.ranks_on("node0")
(2, 1, 'node0', [0, 1])
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


class RankTableError(RuntimeError):
    """The rank table is malformed or does not match the process group."""


@dataclass(frozen=True)
class Entry:
    rank: int
    device: int
    server: str


@dataclass(frozen=True)
class RankTable:
    entries: tuple[Entry, ...]
    path: str = ""

    @property
    def world_size(self) -> int:
        return len(self.entries)

    def _entry(self, rank: int) -> Entry:
        for e in self.entries:
            if e.rank == rank:
                return e
        raise RankTableError(f"rank {rank} is not in the rank table {self.path or ''} "
                             f"(rank_ids 0..{self.world_size - 1})")

    def device_of(self, rank: int) -> int:
        return self._entry(rank).device

    def server_of(self, rank: int) -> str:
        return self._entry(rank).server

    def ranks_on(self, server: str) -> list[int]:
        return sorted(e.rank for e in self.entries if e.server == server)


def parse(doc: dict, path: str = "") -> RankTable:
    """Validate a rank table (``version`` 1.0 / 1.2 layout: ``server_list`` -> ``device`` -> ``rank_id``)."""
    where = f"rank table {path}" if path else "rank table"
    if doc.get("status", "completed") != "completed":
        raise RankTableError(f"{where}: status is {doc.get('status')!r}, not 'completed' (the table is not ready)")
    servers = doc.get("server_list")
    if not isinstance(servers, list) or not servers:
        raise RankTableError(f"{where}: no 'server_list'")
    if "server_count" in doc and str(doc["server_count"]) != str(len(servers)):
        raise RankTableError(f"{where}: server_count is {doc['server_count']} but server_list has {len(servers)}")
    entries: list[Entry] = []
    for i, srv in enumerate(servers):
        sid = str(srv.get("server_id", f"server{i}"))
        devices = srv.get("device")
        if not isinstance(devices, list) or not devices:
            raise RankTableError(f"{where}: server {sid} has no 'device' list")
        seen_dev: set[int] = set()
        for d in devices:
            try:
                e = Entry(int(d["rank_id"]), int(d["device_id"]), sid)
            except (KeyError, TypeError, ValueError):
                raise RankTableError(f"{where}: server {sid}: each device needs integer 'device_id' and "
                                     f"'rank_id' (got {d!r})") from None
            if e.device in seen_dev:
                raise RankTableError(f"{where}: server {sid} lists device_id {e.device} twice")
            seen_dev.add(e.device)
            entries.append(e)
    ranks = sorted(e.rank for e in entries)
    if ranks != list(range(len(ranks))):
        raise RankTableError(f"{where}: rank_ids must be 0..{len(ranks) - 1}, each once (got {ranks})")
    return RankTable(tuple(sorted(entries, key=lambda e: e.rank)), path)


def load(path: str) -> RankTable:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as exc:
        raise RankTableError(f"rank table {path}: not JSON ({exc})") from None
    return parse(doc, path)


def from_env() -> RankTable | None:
    """The table named by ``RANK_TABLE_FILE``, or None (unset, or a path that does not exist: ignored)."""
    path = os.environ.get("RANK_TABLE_FILE", "").strip()
    if not path or not os.path.isfile(path):
        return None
    return load(path)


def _own_device() -> int | None:
    for var in ("DEVICE_ID", "LOCAL_RANK"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    from ascendify.emulator import runtime

    return None if runtime.settings.single_device else runtime.current_device[0]


def check_group(rank: int, world_size: int) -> RankTable | None:
    """At the creation of the default ``hccl`` group: the rank table (if any) must describe this group."""
    table = from_env()
    if table is None:
        return None
    if table.world_size != world_size:
        raise RankTableError(
            f"hccl: mismatched world_size: the rank table {table.path} has {table.world_size} ranks, "
            f"init_process_group got world_size={world_size} (RANK_SIZE should be {table.world_size})")
    if "RANK_ID" in os.environ and os.environ["RANK_ID"].strip() != str(rank):
        raise RankTableError(f"hccl: RANK_ID={os.environ['RANK_ID']} but this process joined as rank {rank}: "
                             "pass rank=int(os.environ['RANK_ID']) to init_process_group")
    from ascendify.emulator.distributed import hccl_rules

    hccl_rules.check_ranks_per_node(len(table.ranks_on(table.server_of(rank))))  # the NPUs of this server
    want = table.device_of(rank)
    own = _own_device()
    if own is not None and own != want:
        raise RankTableError(
            f"hccl: rank {rank} runs on device {own}, but the rank table {table.path} puts rank {rank} on "
            f"device_id {want} of server {table.server_of(rank)} (set DEVICE_ID / torch.npu.set_device)")
    return table
