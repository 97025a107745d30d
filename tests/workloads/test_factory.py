"""ascendify.workloads.factory: the one FILE.py:FACTORY parser and loader (train, bench, compare, port)."""

import doctest
import textwrap

import pytest

torch = pytest.importorskip("torch")

from ascendify.workloads import factory  # noqa: E402
from ascendify.workloads.factory import FactoryError  # noqa: E402


def test_docstring_examples():
    result = doctest.testmod(factory)
    assert result.attempted > 0 and result.failed == 0


def test_what_is_a_spec_is_decided_once():
    assert factory.is_spec("a/b/models.py:make") and factory.is_spec("m.py:GPT(n=2, s='x.py:y')")
    for text in ("resnet18", "netG", "Generator", "4x16:int64:64", "models.py", "models.py:", ":make", "", None):
        assert not factory.is_spec(text), text
    s = factory.parse_spec("m.py:GPT(n=2, s='x.py:y')")
    assert (s.file, s.expr, s.name) == ("m.py", "GPT(n=2, s='x.py:y')", "GPT")
    with pytest.raises(FactoryError, match="expected FILE.py:NAME") as e:
        factory.parse_spec("models.py")
    assert e.value.usage


@pytest.fixture
def project(tmp_path):
    (tmp_path / "helpers.py").write_text("WIDTH = 3\n")
    (tmp_path / "models.py").write_text(textwrap.dedent("""\
        import torch.nn as nn
        from helpers import WIDTH

        def make(num_classes=2):
            return nn.Linear(WIDTH, num_classes)

        def broken():
            raise RuntimeError('factory broke')

        def loss(out, y):
            return out.sum()

        model = nn.Linear(WIDTH, 1)
        number = 42
        """))
    return tmp_path


def test_load_names_calls_and_expressions(project):
    m = factory.load_model("models.py:make", root=project, kwargs={"num_classes": 5, "image_size": 9})
    assert isinstance(m, torch.nn.Linear) and m.out_features == 5  # only the keywords make() accepts
    assert factory.load_model("models.py:make(num_classes=7)", root=project).out_features == 7
    inst = factory.load_model("models.py:model", root=project)
    assert inst is factory.load_model(f"{project / 'models.py'}:model")  # one module per file, imported once
    assert factory.load_function("models.py:loss", root=project).__name__ == "loss"


@pytest.mark.parametrize(("spec", "message"), [
    ("models.py:broken", "models.py:broken: broken() raised RuntimeError: factory broke (at {p}/models.py:8)"),
    ("models.py:nope", "models.py:nope: {p}/models.py defines no callable 'nope'"),
    ("models.py:number", "models.py:number: number holds int, expected a torch.nn.Module or a callable"),
    ("models.py:loss", "models.py:loss: loss() raised TypeError"),
    ("missing.py:make", "{p}/missing.py: no such file"),
])
def test_every_failure_says_file_factory_exception_and_line(project, spec, message):
    with pytest.raises(FactoryError) as e:
        factory.load_model(spec, root=project)
    assert str(e.value).startswith(message.format(p=project)), str(e.value)
    assert not e.value.usage


def test_an_import_that_fails_names_the_line(tmp_path):
    (tmp_path / "bad.py").write_text("x = 1\nraise ImportError('no such thing')\n")
    with pytest.raises(FactoryError) as e:
        factory.load(f"{tmp_path / 'bad.py'}:x")
    assert str(e.value) == (f"{tmp_path / 'bad.py'}:x: importing {tmp_path / 'bad.py'} failed: ImportError: no such "
                            f"thing (at {tmp_path / 'bad.py'}:2)")


def test_precheck_imports_nothing_and_refuses_a_script(project):
    (project / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2)\nprint('training')\n")
    factory.precheck("models.py:make(num_classes=3)", root=project)
    with pytest.raises(FactoryError, match="runs the program .top-level code at line 3"):
        factory.precheck("train.py:model", root=project)
    with pytest.raises(FactoryError, match="defines no 'Nope' at its top level"):
        factory.precheck("models.py:Nope()", root=project)
    with pytest.raises(FactoryError, match="elsewhere.py is not in"):
        factory.precheck("elsewhere.py:make", root=project)
