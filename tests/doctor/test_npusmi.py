"""Parsing ``npu-smi info`` in the formats real hosts print (fixtures under fixtures/npu_smi)."""

from __future__ import annotations

from ascendify.doctor import npusmi

from .fakes import FIXTURES


def parse(name: str) -> dict:
    return npusmi.parse((FIXTURES / "npu_smi" / name).read_text())


def test_910b_idle_two_devices_hbm_and_no_processes():
    out = parse("910b3_idle.txt")
    assert out["version"] == "23.0.3"
    assert [(d["npu"], d["chip"], d["name"], d["health"]) for d in out["devices"]] == [
        (0, 0, "910B3", "OK"),
        (1, 0, "910B3", "OK"),
    ]
    d0 = out["devices"][0]
    assert (d0["bus_id"], d0["power_w"], d0["temp_c"]) == ("0000:C1:00.0", 95.8, 37.0)
    # the HBM pair, not the always-zero DDR pair before it
    assert (d0["memory_used_mb"], d0["memory_total_mb"]) == (3162, 65536)
    assert out["processes"] == []


def test_busy_910b4_process_table_and_health_warning():
    out = parse("910b4_busy.txt")
    assert [d["health"] for d in out["devices"]] == ["OK", "Warning"]
    assert out["devices"][0]["aicore_pct"] == 41.0
    assert out["processes"] == [{"npu": 0, "chip": 0, "pid": 41717, "name": "python", "memory_mb": 25731.0}]


def test_a3_two_chips_per_npu_with_phy_id():
    out = parse("a3_ascend910.txt")
    assert [(d["npu"], d["chip"]) for d in out["devices"]] == [(0, 0), (0, 1)]
    assert out["devices"][1]["power_w"] is None  # the second die prints '-'
    assert {d["name"] for d in out["devices"]} == {"Ascend910"}


def test_310p_chip_device_layout_single_memory_pair():
    out = parse("310p3.txt")
    assert [(d["npu"], d["chip"], d["name"]) for d in out["devices"]] == [(0, 0, "310P3"), (64, 0, "310P3")]
    assert [d["memory_total_mb"] for d in out["devices"]] == [21527, 21527]
    assert out["devices"][0]["power_w"] is None  # 'NA'


def test_garbage_and_error_text_give_empty_results():
    assert npusmi.parse("dcmi module initialize failed. ret is -8005\n") == {
        "version": None,
        "devices": [],
        "processes": [],
    }
    assert npusmi.parse("") == {"version": None, "devices": [], "processes": []}
