"""The examples in the port modules' docstrings are tests too."""

import doctest

import pytest

from ascendify.port import checklist, jobs, observation, options, proof, runner
from ascendify.port.stages import base, compare, failures, fast, migrate, overflow, train


@pytest.mark.parametrize("module", [options, runner, observation, proof, checklist, jobs, base, train, compare,
                                    overflow, failures, migrate, fast], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
