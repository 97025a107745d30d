"""A large generated file: the work grows with its size, not its square (issue 26, item 5: a 5 MB file took
hours in the all-pairs overlap checks), and the run shows progress while it converts it.

The work is counted, not timed: the Python calls one conversion makes (``sys.setprofile``), for a file and
for one four times as long. Linear work gives ~4x the calls; the all-pairs checks gave ~16x.
"""

from __future__ import annotations

import sys

import pytest

from ascendify.migrate import Options, files, migrate_source

# statements of real CUDA code, some of whose rewrites hold others (holes), some listed for a person
BLOCK = """\
x{i} = torch.zeros(8, device="cuda")
y{i} = x{i}.cuda(non_blocking=True)
torch.cuda.synchronize()
if torch.cuda.is_available():
    torch.cuda.empty_cache()
z{i} = torch.randn(4, 4).to("cuda") @ torch.ones(4, 4, device=torch.device("cuda:0"))
mem{i} = torch.cuda.max_memory_allocated() / 2**20
with torch.cuda.amp.autocast():
    w{i} = model(x{i}.cuda())
print(torch.cuda.get_device_name(torch.cuda.current_device()), y{i}.is_cuda)
d{i} = torch.device("cuda", rank)
total{i} = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
if not y{i}.is_cuda:
    y{i} = y{i}.to(d{i})
dev{i} = "cuda" if torch.cuda.is_available() else "cpu"
cfg{i} = {{"device": "cuda"}}
"""


def generated(blocks: int) -> str:
    head = "import torch\nimport torch.distributed as dist\nrank = 0\nmodel = torch.nn.Linear(8, 8).cuda()\n" \
           'dist.init_process_group("nccl")\n'
    return head + "".join(BLOCK.format(i=i) for i in range(blocks))


def calls(blocks: int, target: str) -> int:
    text = generated(blocks)
    n = 0

    def count(frame, event, arg):
        nonlocal n
        if event == "call":
            n += 1

    sys.setprofile(count)
    try:
        _, result = migrate_source(text, Options(target=target))
    finally:
        sys.setprofile(None)
    assert result.status == "changed" and sum(f.kind == "change" for f in result.findings) > 10 * blocks
    return n


@pytest.mark.parametrize("target", ["npu", "portable"])
def test_the_work_grows_linearly_with_the_file(target):
    small, large = calls(25, target), calls(100, target)
    assert large / small < 5.5, (small, large)


def test_a_large_file_reports_progress_while_it_is_converted(tmp_path, monkeypatch):
    path = tmp_path / "big.py"
    path.write_text(generated(40))
    monkeypatch.setattr(files, "BIG_FILE", 1000)  # "large" for this test
    seen: list[tuple[float, float]] = []
    task = files.Task(str(path), "big.py", None, "check", Options())
    (res, _), = files.run_tasks([task], 1, lambda done, total: seen.append((done, total)))
    assert res.status == "changed"
    total = path.stat().st_size
    assert all(t == total for _, t in seen) and seen[-1][0] == total
    steps = [d for d, _ in seen]
    assert steps == sorted(steps) and len([d for d in steps if 0 < d < total]) >= 5


def test_the_terminal_shows_a_bar_while_a_large_file_is_converted(tmp_path, monkeypatch, capsys):
    from ascendify import cli

    path = tmp_path / "big.py"
    path.write_text(generated(40))
    monkeypatch.setattr(files, "BIG_FILE", 1000)
    monkeypatch.setenv("FORCE_COLOR", "1")  # a terminal, for rich
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["migrate", str(path), "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "migrating big.py" in out and "100%" in out
