"""Launching as users do on Ascend, under the emulator: two torchrun agents (``--nnodes 2``, c10d rendezvous)
with a rank table, the rank-table convention without torchrun (RANK_ID/RANK_SIZE/DEVICE_ID), and bad input
(a rank that fails, a port in use, a rendezvous that never completes, mismatched world sizes, a wrong table)."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from ascendify.emulator.distributed import hccl, ranktable

WORKER = Path(__file__).resolve().parent / "multinode_worker.py"

# Multi-process tests are expensive on the 2-core CI machine: these launches are few and small (the whole file
# takes about 15 s), and every one runs in CI.
slow_dist = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", ASCENDIFY_EMULATE="npu",
               HCCL_CONNECT_TIMEOUT="60")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE", "DEVICE_ID"):
        env.pop(k, None)
    env.update(extra)
    return env


def _table(path: Path, servers: list[list[tuple[int, int]]]) -> Path:
    """A rank table: per server, (device_id, rank_id) pairs."""
    doc = {"status": "completed", "version": "1.0", "server_count": str(len(servers)), "server_list": [
        {"server_id": f"10.0.0.{i + 1}", "device": [
            {"device_id": str(d), "device_ip": f"192.168.{i}.{d}", "rank_id": str(r)} for d, r in devs]}
        for i, devs in enumerate(servers)]}
    path.write_text(json.dumps(doc))
    return path


def _results(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_two_torchrun_agents_with_a_rank_table_reach_one_group(tmp_path):
    """``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d`` started twice (two "servers"), the job's
    rank table (two servers, device 0 each) in RANK_TABLE_FILE: one hccl group of 2."""
    table = _table(tmp_path / "hccl.json", [[(0, 0)], [(0, 1)]])
    port = _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "h16",
           str(WORKER), str(tmp_path), "torchrun"]
    env = _env(RANK_TABLE_FILE=str(table))
    agents = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    logs = [a.communicate(timeout=240)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n".join(x[-2000:] for x in logs)
    res = _results(tmp_path, 2)
    assert sorted(r["group_rank"] for r in res) == ["0", "1"]  # one rank per agent ("node")
    for r in res:
        assert (r["world"], r["backend"], r["device"], r["sum"]) == (2, "hccl", "npu:0", [3.0, 3.0])


@slow_dist
def test_rank_table_convention_without_torchrun(tmp_path):
    """One server, two devices: processes started with RANK_ID, RANK_SIZE, DEVICE_ID, as Ascend scripts do."""
    table = _table(tmp_path / "rank_table.json", [[(0, 0), (1, 1)]])
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), "ranktable"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=_env(RANK_TABLE_FILE=str(table), RANK_ID=str(r), RANK_SIZE="2",
                                       DEVICE_ID=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(2)]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(x[-2000:] for x in logs)
    res = _results(tmp_path, 2)
    assert [(r["rank"], r["world"], r["device"], r["sum"]) for r in res] == [
        (0, 2, "npu:0", [3.0, 3.0]), (1, 2, "npu:1", [3.0, 3.0])]


@slow_dist
def test_a_failing_rank_stops_the_job_quickly_and_leaves_no_process(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(_free_port()), str(WORKER), str(tmp_path), "fail"],
        env=_env(ASCENDIFY_EMULATE_FIDELITY="error"), capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "HCCL allreduce: Unsupported data type at::kDouble" in proc.stdout + proc.stderr
    assert elapsed < 60, elapsed
    for r in range(2):
        pid = int((tmp_path / f"pid{r}").read_text())
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), r


# --- bad input, in this process ----------------------------------------------------------------------------------


def test_a_port_already_in_use_is_named(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=f"MASTER_PORT {port} on 127.0.0.1 is already in use"):
            dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2)
        assert time.monotonic() - start < 10
    assert not dist.is_initialized()


def test_a_rendezvous_that_never_completes_fails_after_hccl_connect_timeout(monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "2")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rendezvous .* did not complete: not all 2 ranks arrived within "
                                           r"HCCL_CONNECT_TIMEOUT=2s"):
        dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=2,
                                timeout=datetime.timedelta(minutes=30))
    assert time.monotonic() - start < 10
    assert not dist.is_initialized()


def _both(fn0, fn1) -> list:
    errors: list = [None, None]

    def run(i, fn):
        try:
            fn()
        except RuntimeError as exc:
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate((fn0, fn1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_mismatched_world_sizes_are_reported_by_both_ranks(monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "20")
    store = dist.HashStore()
    start = time.monotonic()
    e0, e1 = _both(lambda: hccl._check_rendezvous(store, 0, 2, []), lambda: hccl._check_rendezvous(store, 1, 3, []))
    assert time.monotonic() - start < 10
    assert "mismatched world_size: rank 1 joined with world_size=3, this rank (0) with world_size=2" in str(e0)
    assert "mismatched world_size: rank 0 joined with world_size=2, this rank (1) with world_size=3" in str(e1)
    # a missing rank is named
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "0.5")
    with pytest.raises(RuntimeError, match=r"rank\(s\) 1 of 2 did not join"):
        hccl._check_rendezvous(dist.HashStore(), 0, 2, [])


def test_a_rank_table_that_does_not_match_the_group(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK_TABLE_FILE", str(_table(tmp_path / "t.json", [[(0, 0), (1, 1)]])))
    with pytest.raises(ranktable.RankTableError, match="rank table .* has 2 ranks, init_process_group got "
                                                       "world_size=1"):
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()
    monkeypatch.setenv("RANK_TABLE_FILE", str(_table(tmp_path / "one.json", [[(3, 0)]])))
    monkeypatch.setenv("DEVICE_ID", "0")
    with pytest.raises(ranktable.RankTableError, match="runs on device 0, but the rank table .* device_id 3"):
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    monkeypatch.setenv("DEVICE_ID", "3")
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    dist.destroy_process_group()
    monkeypatch.setenv("RANK_TABLE_FILE", str(tmp_path / "absent.json"))  # ignored, as torch_npu does
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    dist.destroy_process_group()


@pytest.mark.parametrize(("doc", "match"), [
    ({"status": "initializing", "server_list": []}, "not 'completed'"),
    ({"server_count": "2", "server_list": [{"device": [{"device_id": "0", "rank_id": "0"}]}]}, "server_count is 2"),
    ({"server_list": [{"device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "0", "rank_id": "1"}]}]},
     "device_id 0 twice"),
    ({"server_list": [{"device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "2"}]}]},
     r"rank_ids must be 0..1"),
])
def test_malformed_rank_tables(doc, match):
    with pytest.raises(ranktable.RankTableError, match=match):
        ranktable.parse(doc)


def test_a_rank_table_with_more_devices_on_a_server_than_it_has(tmp_path, monkeypatch, fresh_report):
    fresh_report.settings.fidelity = "error"
    monkeypatch.setenv("RANK_TABLE_FILE", str(_table(tmp_path / "t.json", [[(d, d) for d in range(9)]])))
    monkeypatch.setenv("DEVICE_ID", "0")
    with pytest.raises(RuntimeError, match="9 ranks on one server; an Atlas A2 server has at most 8"):
        ranktable.check_group(0, 9)
    fresh_report.settings.device_name = "Ascend910_9391"  # A3: 16 per server
    assert ranktable.check_group(0, 9).world_size == 9
