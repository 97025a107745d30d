"""What a migration rule is, and the registry of rules (in the style of ruff: one small documented unit each).

A rule has a stable ID (``ASC101``), a kebab-case name, a one-line summary, a doc with fixed headings
(*What it does*, *Why*, *Example*, *Use instead*, *Fix safety*), a safety grade, the targets it applies to,
the syntax hooks it listens on, and before/after examples that the test suite executes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

SAFE = "safe"  # applied by default
UNSAFE = "unsafe"  # applied only with --unsafe; reported otherwise
REPORT_ONLY = "report-only"  # never rewrites: lists the site with a reason and a tip

NPU = "npu"
PORTABLE = "portable"
TARGETS = (NPU, PORTABLE)

# Hooks: which nodes the engine hands a rule.
HOOKS = (
    "import",  # ast.Import / ast.ImportFrom
    "chain",  # outermost dotted name resolved through imports (torch.cuda.synchronize, th.backends.cudnn.x)
    "call",  # every ast.Call
    "attribute",  # every ast.Attribute in load context (x.is_cuda)
    "device_value",  # an expression used as a device (see dataflow.py)
    "backend_value",  # an expression used as a distributed backend
    "compare",  # ast.Compare
    "string",  # every str constant
    "module",  # once per file, after everything else
)


@dataclass(frozen=True)
class Example:
    """``before`` converted for ``target`` must give ``after`` (``after=None``: must not change)."""

    before: str
    after: str | None
    target: str = NPU
    unsafe: bool = False
    note: str = ""
    fires: bool = True  # False: the example shows the rule NOT acting (another rule changes the code)

    @property
    def src(self) -> str:
        return textwrap.dedent(self.before).lstrip("\n")

    @property
    def expected(self) -> str:
        return self.src if self.after is None else textwrap.dedent(self.after).lstrip("\n")


@dataclass
class Rule:
    id: str
    name: str
    summary: str
    safety: str
    targets: tuple[str, ...]
    hooks: tuple[str, ...]
    check: Callable
    doc: str = ""
    examples: list[Example] = field(default_factory=list)
    emits_npu: tuple[str, ...] = ()  # every torch_npu name the rule can write (checked by a test)
    category: str = "cuda"  # cuda | api | advice
    # the rule can only act on a file whose text holds one of these substrings, in any case (empty: any file);
    # the engine does not run it on the others (a cheap prefilter: most files never mention flash_attn)
    tokens: tuple[str, ...] = ()

    def explain(self) -> str:
        head = f"{self.id} {self.name}: {self.summary}\n"
        meta = f"Safety: {self.safety}. Targets: {', '.join(self.targets)}.\n"
        body = textwrap.dedent(self.doc).strip()
        ex = []
        for e in self.examples[:4]:
            if e.after is None:
                ex.append(f"Unchanged ({e.target}):\n" + textwrap.indent(e.src.rstrip(), "    "))
            else:
                ex.append(
                    f"--to {e.target}{' --unsafe' if e.unsafe else ''}:\n"
                    + textwrap.indent(e.src.rstrip(), "    ")
                    + "\n  becomes\n"
                    + textwrap.indent(e.expected.rstrip(), "    ")
                )
        examples = ("\n\n## Examples\n\n" + "\n\n".join(ex)) if ex else ""
        return head + meta + "\n" + body + examples + "\n"


REGISTRY: dict[str, Rule] = {}

#: a rule's family is the first digit of its number (ASC103: "1"); its module is named ``<family>.py`` or
#: ``<family>_<topic>.py``
FAMILIES = {
    "0": "general",
    "1": "devices",
    "2": "cuda_api",
    "3": "distributed",
    "4": "backends",
    "5": "profiling",
    "6": "kernels",
    "8": "advice",
    "9": "api_support",
}


def family(rule_id: str) -> str:
    """The family of ``rule_id`` (``"ASC612"`` -> ``"kernels"``)."""
    return FAMILIES[rule_id.removeprefix("ASC")[:1]]


def rule(
    id: str,
    name: str,
    summary: str,
    *,
    safety: str = SAFE,
    targets: tuple[str, ...] = TARGETS,
    hooks: tuple[str, ...],
    doc: str,
    examples: list[Example] | tuple[Example, ...] = (),
    emits_npu: tuple[str, ...] = (),
    category: str = "cuda",
    tokens: tuple[str, ...] = (),
):
    """Register the decorated ``check(ctx, node)`` as rule ``id``."""

    def deco(fn: Callable) -> Callable:
        if id in REGISTRY:
            raise ValueError(f"duplicate rule id {id}")
        for h in hooks:
            if h not in HOOKS:
                raise ValueError(f"{id}: unknown hook {h}")
        REGISTRY[id] = Rule(
            id, name, summary, safety, tuple(targets), tuple(hooks), fn, doc, list(examples), emits_npu, category,
            tuple(t.lower() for t in tokens)
        )
        return fn

    return deco
