"""The engine on single sources: name resolution, lossless edits, encodings, line endings, idempotence."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascendify.migrate import Options, migrate_source
from ascendify.migrate.source import DecodeError, SourceFile

NPU = Options(target="npu")
PORTABLE = Options(target="portable")


def convert(src, options=NPU):
    return migrate_source(src, options)[0]


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("import torch as th\nth.cuda.synchronize()\n", "th.npu.synchronize()"),
        ("import torch\nfrom torch import cuda\ncuda.empty_cache()\n", "torch.npu.empty_cache()"),
        ("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n", 'with autocast("npu"):'),
        ("import torch.cuda.amp as A\nwith A.autocast():\n    pass\n", 'with A.autocast("npu"):'),
        ("from torch.cuda import amp\nwith amp.autocast():\n    pass\n", 'from torch import amp\n'),
        ("import torch\nx = torch.zeros(3, device='cuda:1')\n", "device='npu:1'"),
    ],
)
def test_names_resolve_through_imports(src, expected):
    assert expected in convert(src)


def test_unimported_names_are_not_touched():
    src = "class cuda:\n    @staticmethod\n    def synchronize():\n        pass\n\ncuda.synchronize()\nth.cuda.x()\n"
    assert convert(src) == src


def test_file_without_changes_is_byte_identical():
    data = b'# coding: utf-8\r\nimport torch  # the "cuda" word\r\nprint("cuda:0 is busy")\r\n'
    out, result = migrate_source(data, NPU)
    assert out is data or out == data
    assert result.status == "unchanged"


def test_crlf_and_comments_are_preserved():
    data = b"import torch\r\n\r\n# move it\r\nx = x.cuda()  # to the GPU\r\ny = 1\r\n"
    out, _ = migrate_source(data, NPU)
    assert out == b"import torch\r\nimport torch_npu\r\n\r\n# move it\r\nx = x.npu()  # to the GPU\r\ny = 1\r\n"


def test_pep263_encoding_is_kept():
    src = '# -*- coding: latin-1 -*-\nimport torch\nname = "café"\nx = x.cuda()\n'
    data = src.encode("latin-1")
    out, result = migrate_source(data, NPU)
    assert result.status == "changed"
    assert out.decode("latin-1").endswith('name = "café"\nx = x.npu()\n')
    with pytest.raises(UnicodeDecodeError):
        out.decode("utf-8")


def test_utf8_bom_is_kept_and_columns_count_characters():
    src = '# ünïcödé\nimport torch\nmsg = "déjà"; x = torch.ones(2, device="cuda")\n'
    out, _ = migrate_source(b"\xef\xbb\xbf" + src.encode(), NPU)
    assert out.startswith(b"\xef\xbb\xbf")
    assert 'msg = "déjà"; x = torch.ones(2, device="npu")' in out.decode("utf-8-sig")


def test_undecodable_bytes_raise_decode_error():
    with pytest.raises(DecodeError):
        SourceFile.from_bytes(b"x = '\xff\xfe'\n")


def test_import_torch_npu_is_added_once_after_torch_and_never_twice():
    src = '"""Doc."""\nfrom __future__ import annotations\n\nimport os\nimport torch\n\nx = x.cuda()\ny = y.cuda()\n'
    out = convert(src)
    assert out.count("import torch_npu") == 1
    assert "import torch\nimport torch_npu\n" in out
    assert convert(out) == out


def test_import_added_after_docstring_when_torch_is_not_imported():
    out = convert('"""Doc."""\nx = x.cuda()\n')
    assert out == '"""Doc."""\nimport torch_npu\nx = x.npu()\n'


def test_strings_are_only_rewritten_in_device_positions():
    src = (
        "import torch\n"
        'ckpt = torch.load("ckpt_cuda.pt", map_location="cuda")\n'
        'print("cuda")\n'
        'label = "cuda"\n'
        'dev = "cuda"\n'
        "x = torch.ones(1).to(dev)\n"
    )
    out = convert(src)
    assert 'torch.load("ckpt_cuda.pt", map_location="npu")' in out
    assert 'print("cuda")' in out and 'label = "cuda"' in out
    assert 'dev = "npu"' in out


def test_fstring_inner_call_uses_the_other_quote_in_portable():
    src = 'import torch\nprint(f"on {torch.cuda.get_device_name(0)}")\n'
    out = convert(src, PORTABLE)
    compile(out, "x", "exec")
    assert "'cpu'" in out


def test_portable_output_has_no_torch_cuda_calls_left_for_the_mapped_names():
    src = "import torch\nn = torch.cuda.device_count()\nok = torch.cuda.is_available()\ntorch.cuda.empty_cache()\n"
    out = convert(src, PORTABLE)
    assert "torch.cuda" not in out
    assert "torch.accelerator.device_count()" in out


def test_second_run_changes_nothing_on_both_targets(tmp_path):
    src = (
        "import torch\nimport torch.distributed as dist\n"
        'def f(device="cuda", backend="nccl"):\n'
        "    dist.init_process_group(backend)\n"
        "    with torch.cuda.amp.autocast():\n"
        "        x = torch.zeros(1, device=device).cuda()\n"
        "    torch.cuda.synchronize()\n"
        "    return x.is_cuda\n"
    )
    for opts in (NPU, PORTABLE):
        once = convert(src, opts)
        assert once != src
        assert convert(once, opts) == once


def test_migration_path_does_not_import_torch():
    code = (
        "import sys\n"
        "from ascendify.migrate import migrate_source, Options\n"
        "from ascendify.migrate import files, render, runner\n"
        "from ascendify.commands import migrate\n"
        "migrate_source('import torch\\nx.cuda()\\n', Options(target='portable'))\n"
        "migrate_source('import torch\\nx.cuda()\\n', Options(target='npu'))\n"
        "print('torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_findings_carry_lines_and_before_after():
    src = "import torch\n\nx = x.cuda()\n"
    _, result = migrate_source(src, NPU)
    [row] = [f for f in result.findings if f.rule == "ASC101"]
    assert (row.line, row.before, row.after) == (3, "x = x.cuda()", "x = x.npu()")


def test_cli_migrate_does_not_import_torch(tmp_path):
    from pathlib import Path

    fixtures = Path(__file__).resolve().parent / "fixtures"
    code = (
        "import sys\n"
        "from ascendify import cli\n"
        f"rc = cli.main(['migrate', {str(fixtures)!r}, '-o', {str(tmp_path / 'o')!r}, '-q', '--jobs', '2'])\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["0", "False"]


def test_module_doctests():
    import doctest

    from ascendify import migrate
    from ascendify.migrate import imports, native, source

    for mod in (migrate, imports, native, source):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def test_host_event_helper_is_defined_once_reused_later_and_never_shadows_a_user_name():
    src = "import torch\na = torch.cuda.Event(enable_timing=True)\nb = torch.cuda.Event(enable_timing=True)\n"
    once = convert(src, PORTABLE)
    assert once.count("class HostEvent:") == 1 and once.count("else HostEvent()") == 2
    # events added after a first run reuse the helper that run defined
    later = convert(once + "c = torch.cuda.Event(enable_timing=True)\n", PORTABLE)
    assert later.count("class HostEvent:") == 1 and later.count("else HostEvent()") == 3
    # a file with its own HostEvent keeps it: the timing event is listed, not converted to a wrong class
    own = "import torch\nclass HostEvent:\n    pass\ne = torch.cuda.Event(enable_timing=True)\n"
    out, result = migrate_source(own, PORTABLE)
    assert "torch.cuda.Event(enable_timing=True)" in out and out.count("class HostEvent") == 1
    assert any(f.rule == "ASC203" and f.kind == "report" for f in result.findings)
    # events without timing need no helper
    plain = convert("import torch\ne = torch.cuda.Event()\n", PORTABLE)
    assert "HostEvent" not in plain and "else torch.cpu.Event()" in plain


def test_portable_helper_runs_on_this_cpu():
    import torch

    from ascendify.migrate import portable

    ns = {}
    exec(portable.helper_source(portable.HOST_EVENT), ns)
    start, end = ns["HostEvent"](enable_timing=True), ns["HostEvent"]()
    start.record()
    torch.ones(64, 64).sum()
    end.record(torch.cpu.current_stream())
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0


@pytest.mark.parametrize(("target", "test"), [("npu", 'device.endswith("cuda")'),
                                              ("portable", 'device.endswith("cuda")'),
                                              ("portable", 'device.type == "cuda:0"')])
def test_a_device_test_no_rule_converts_keeps_its_line_whole(target, test):
    """`"cuda" if <test> else "cpu"`: rewriting the value but not a test that still asks for "cuda" would choose
    the CPU on the accelerator. The line is left as it is, and both parts are listed for a person."""
    src = f'import torch\ndevice_type = "cuda" if {test} else "cpu"\nx = x.to("cuda")\n'
    out, result = migrate_source(src, Options(target=target))
    assert f'\ndevice_type = "cuda" if {test} else "cpu"\n' in out
    [row] = [f for f in result.findings if f.line == 2 and f.rule == "ASC103"]
    assert (row.kind, row.severity) == ("report", "manual") and "half-rewritten" in row.message
    assert "x.to(" in out and 'x.to("cuda")' not in out  # the rest of the file is converted as usual
