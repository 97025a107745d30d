"""Generated code reads as a person would write it: before/after pairs (LibCST-codemod style), including the
cases that must not change."""

from __future__ import annotations

import textwrap

import pytest

from ascendify.migrate import Options, migrate_source
from ascendify.migrate.layout import wrap_line, wrap_long_lines
from ascendify.migrate.portable import device_type_block

NPU = Options(target="npu")
PORTABLE = Options(target="portable")
DT = device_type_block()


def convert(src: str, options=PORTABLE) -> str:
    out, _ = migrate_source(textwrap.dedent(src).lstrip("\n"), options)
    again, _ = migrate_source(out, options)
    assert again == out  # idempotent
    return out


def check(before: str, after: str, options=PORTABLE) -> None:
    assert convert(before, options) == textwrap.dedent(after).lstrip("\n")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("if not x.is_cuda:\n    x = x.to(dev)\n", "if x.is_cpu:\n    x = x.to(dev)\n"),
        ("ok = x.is_cuda and y\n", "ok = not x.is_cpu and y\n"),
        ("use(x.is_cuda, flag=y.is_cuda)\n", "use(not x.is_cpu, flag=not y.is_cpu)\n"),
        ("same = x.is_cuda == y\n", "same = (not x.is_cpu) == y\n"),
        ("n = int(x.is_cuda) + 1\n", "n = int(not x.is_cpu) + 1\n"),
        ("s = f'{x.is_cuda}'\n", "s = f'{not x.is_cpu}'\n"),
    ],
)
def test_is_cuda_reads_without_double_negation_or_extra_parentheses(before, after):
    check(before, after)
    assert "not (not" not in convert(before)


@pytest.mark.parametrize("options", [NPU, PORTABLE], ids=["npu", "portable"])
def test_a_user_attribute_named_is_cuda_is_renamed_nowhere(options):
    src = """
    class Batch:
        def __init__(self, data):
            self.data = data
            self.is_cuda = False

        def pinned(self):
            return self.is_cuda and self.data.is_cuda
    """
    out, res = migrate_source(textwrap.dedent(src).lstrip("\n"), options)
    assert out == textwrap.dedent(src).lstrip("\n")
    assert {(f.rule, f.severity) for f in res.findings if f.api == ".is_cuda"} == {("ASC102", "manual")}
    # an is_cuda method of one's own counts too; a local variable called is_cuda does not
    assert "is_npu" not in convert("class T:\n    def is_cuda(self):\n        return False\n\nok = t.is_cuda\n", options)
    assert "x.is_npu" in convert("is_cuda = x.is_cuda\n", NPU)


def test_the_helper_class_comes_with_two_blank_lines_around_it_never_three():
    before = """
    import torch


    def timed(f):
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return f()
    """
    out = convert(before)
    assert "\n\n\n\n" not in out
    assert "        pass\n\n\ndef timed(f):\n" in out  # the helper's end, two blank lines, the user's code
    assert out.startswith('import torch\n\n\nclass HostEvent:\n    """ascendify: ')
    one_blank = convert("import torch\nx = 1\n\ns = torch.cuda.Event(enable_timing=True)\n")
    assert "        pass\n\n\nx = 1\n" in one_blank


def test_the_device_type_definition_fits_79_columns():
    assert max(len(line) for line in DT.splitlines()) <= 79
    assert convert("import torch\nx = torch.zeros(2, device='cuda')\n").startswith("import torch\n" + DT)


def test_a_longer_line_is_broken_inside_its_brackets_like_a_person_would():
    before = """
    import torch


    def report(device):
        \"\"\"The peak memory of the device in MiB; on the CPU there is none, so this is 0.\"\"\"
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        return peak
    """
    check(before, """
    import torch


    def report(device):
        \"\"\"The peak memory of the device in MiB; on the CPU there is none, so this is 0.\"\"\"
        peak = (torch.accelerator.max_memory_allocated(device)
                if torch.accelerator.is_available() else 0) / 2**20
        return peak
    """)


def test_lines_of_the_original_and_unchanged_files_are_never_rewrapped():
    src = "import torch\nx = 1  # " + "a long comment " * 8 + "\n"
    out, res = migrate_source(src.encode(), PORTABLE)
    assert out == src.encode() and res.status == "unchanged"
    long_original = "y = [" + ", ".join(["1"] * 40) + "]\n"
    assert wrap_long_lines(long_original + "z = 2\n", long_original, limit=60) == long_original + "z = 2\n"


@pytest.mark.parametrize(
    ("line", "limit", "pieces"),
    [
        ("x = f(aaaa, bbbb, cccc)", 15, ["x = f(aaaa,", "      bbbb,", "      cccc)"]),
        ("x = g(f(aaaa, bbbb), cccc)", 20, ["x = g(f(aaaa, bbbb),", "      cccc)"]),  # outermost bracket first
        ("v = (a.b() if ok() else 0) / 2", 25, ["v = (a.b()", "     if ok() else 0) / 2"]),  # `if` before `else`
        ('s = f("a, b, c, d, e, f, g")', 15, None),  # never inside a string
        ("r = h(a)  # note, with, commas", 12, None),  # nor in a comment
        ("m = k(lambda aa, bb: aa + bb)", 20, None),  # nor between a lambda's parameters
        ("a, b = cc(1), dd(2)", 10, None),  # nothing fits (wrap_long_lines adds brackets: below)
        ("    more, args)", 10, None),  # a bracket opened on an earlier line: its column is unknown
    ],
)
def test_wrap_line(line, limit, pieces):
    assert wrap_line(line, limit) == pieces
    if pieces:
        assert max(map(len, pieces)) <= limit
        compile("\n".join(pieces), "<wrapped>", "exec")


def test_a_tuple_on_the_right_of_an_assignment_gets_brackets_to_break_inside():
    original = "x = 1  # " + "-" * 50 + "\n"
    new = original + "start, end = make_event(timing=True), make_event(timing=True)  # two events\n"
    out = wrap_long_lines(new, original, limit=60)
    assert out == original + (
        "start, end = (make_event(timing=True),\n"
        "              make_event(timing=True))  # two events\n")
    compile(out, "<wrapped>", "exec")
    for line in ("total += a, b", "f(a=1, b=2)", "s = 'x = 1, 2'"):  # no top-level `=` with a tuple after it
        assert wrap_long_lines(line + "\n", "", limit=5) == line + "\n"
