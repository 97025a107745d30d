"""A ``torch_npu`` package that exists only while the emulator is enabled.

:func:`install` puts a finder at the END of ``sys.meta_path``: a real torch_npu (found by the normal finders
first) always wins, and :func:`ascendify.emulator.enable` already refuses to run where one is installed. The
shim provides what torch_npu code needs to import and run on the emulated device:

- ``torch_npu`` itself (``torch_npu.npu`` is ``torch.npu``; ``__version__`` says it is the emulator);
- ``torch_npu.contrib.transfer_to_npu``: CUDA code to ``npu`` at runtime through ``ascendify.auto``, found as a
  provider (:data:`PROVIDERS_GROUP`), not imported;
- ``torch_npu.optim.NpuFused*``: the matching ``torch.optim`` optimizers (same update rule);
- ``torch_npu.utils`` and ``torch_npu.distributed`` names that make sense on the CPU, and the utility layer
  tools and checkpoints touch (``get_npu_format``, ``Format``, ``torch_npu.utils.storage._rebuild_npu_tensor``:
  :mod:`ascendify.emulator.api.tooling`);
- the fused operators that :mod:`ascendify.emulator.fused` emulates (``npu_fusion_attention``, ``npu_rms_norm``...);
- ``torch_npu.profiler`` and ``torch_npu.npu.mstx`` (:mod:`ascendify.emulator.api.profiler`): the Ascend
  PyTorch Profiler's API, writing its output folder from torch's profiler over the host ops.

Any other torch_npu name (other custom ``npu_*`` ops, the profiler's raw-data analysis, CANN queries) raises
:class:`~ascendify.emulator.errors.NotEmulatedError` (an ``ImportError`` for a submodule) that names it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

import torch

from ascendify.core import knowledge
from ascendify.emulator import fused
from ascendify.emulator.api import companions, tooling
from ascendify.emulator.errors import NotEmulatedError

_PROVIDED = ("torch_npu", "torch_npu.npu", "torch_npu.contrib", "torch_npu.contrib.transfer_to_npu",
             "torch_npu.optim", "torch_npu.utils", "torch_npu.utils.storage", "torch_npu.utils.serialization",
             "torch_npu.distributed", "torch_npu.profiler", "torch_npu.utils.collect_env")


def _known(dotted: str) -> bool:
    return knowledge.npu_name_exists(dotted)


def _npu_ops() -> frozenset[str]:
    """torch_npu's own operators (``torch_npu.npu_fusion_attention``...): importable, refused when called."""
    ops = knowledge.load("torch_npu_api")["torch_npu_ops"]
    return frozenset(ops.get("public", [])) | frozenset(ops.get("all", []))


def _not_emulated_op(dotted: str):
    """A stand-in for a torch_npu operator: ``from torch_npu import npu_x`` works, as on an NPU (libraries such as
    transformers import them when they see an NPU), and calling it raises :class:`NotEmulatedError`."""

    def op(*args, **kwargs):
        raise NotEmulatedError(
            f"{dotted} is a torch_npu custom operator; ascendify's emulated npu device does not emulate it "
            "(it runs on an Ascend NPU only): guard the call, or use the plain PyTorch equivalent"
        )

    op.__name__ = op.__qualname__ = dotted.rpartition(".")[2]
    op.__module__ = dotted.rpartition(".")[0]
    return op


def _missing(module: str, name: str):
    dotted = f"{module}.{name}"
    if module == "torch_npu" and (op := fused.lookup(name)) is not None:
        return op
    if module == "torch_npu" and name in _npu_ops():
        return _not_emulated_op(dotted)
    if _known(dotted):
        raise NotEmulatedError(
            f"{dotted} exists in torch_npu but is not emulated by ascendify's emulated npu device "
            "(custom NPU ops, CANN and profiler APIs need real hardware); guard it, or run on an Ascend NPU"
        )
    raise AttributeError(f"module '{module}' has no attribute '{name}'")


def _module(name: str, doc: str, attrs: dict | None = None, package: bool = False) -> types.ModuleType:
    m = types.ModuleType(name, doc)
    m.__ascendify_shim__ = True
    if package:
        m.__path__ = []
    m.__dict__.update(attrs or {})

    def __getattr__(attr, _name=name):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _missing(_name, attr)

    m.__getattr__ = __getattr__
    return m


# ------------------------------------------------------------------------------------------ contents
def _optim() -> dict:
    """torch_npu's fused optimizers: the torch optimizer of the same name with torch_npu's signature
    (:mod:`ascendify.emulator.fused.optim`)."""
    from ascendify.emulator.fused.optim import OPTIMIZERS

    return dict(OPTIMIZERS)


def _get_cann_version(module="CANN"):
    """The emulated CANN's release (the ``cann_version`` setting, whose HCCL rules the emulator follows) for
    ``module="CANN"``; a component's own version (``"RUNTIME"``, ``"FWK"``...) is not known here. MindSpeed calls
    this at import time."""
    from ascendify.emulator import runtime

    if str(module).upper() == "CANN":
        return runtime.settings.cann_version
    raise NotEmulatedError(
        f"torch_npu.utils.get_cann_version(module={module!r}) is not emulated: the emulated npu device knows its "
        "CANN release (ASCENDIFY_EMULATE_CANN), not the versions of CANN's components"
    )


def _process_group_hccl():
    from ascendify.emulator.distributed.hccl import EmulatedHcclProcessGroup

    return EmulatedHcclProcessGroup


def _is_hccl_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and "hccl" in dist.Backend.backend_list


#: the entry point group through which other packages provide a shim module's contents (``name = module:function``,
#: the function returns the module's attributes); ascendify.auto provides ``torch_npu.contrib.transfer_to_npu``
PROVIDERS_GROUP = "ascendify.torch_npu_shim"


def _from_provider(module: str) -> tuple[dict | None, str]:
    """The attributes an installed provider gives ``module``, or None (and why) when none is installed."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=PROVIDERS_GROUP, name=module):
        try:
            provide = ep.load()
        except ImportError as e:
            return None, f"provider {ep.value} cannot be imported ({e})"
        return dict(provide()), ep.value
    return None, f"no provider installed (entry point group {PROVIDERS_GROUP})"


def _transfer_to_npu() -> dict:
    """What ``from torch_npu.contrib import transfer_to_npu`` does under emulation: redirect CUDA to npu.

    The redirection is ascendify.auto's, found as a provider (the emulator does not import auto, which imports
    it); without one, the documented minimum: CUDA probes answer False."""
    attrs, why = _from_provider("torch_npu.contrib.transfer_to_npu")
    if attrs is None:
        from ascendify.emulator import runtime

        runtime.patches.set(torch.cuda, "is_available", lambda: False)
        attrs = {"__ascendify_redirection__": f"minimal: torch.cuda.is_available() -> False; {why}"}
    attrs.setdefault("is_available", torch.npu.is_available)
    return attrs


def _dtype_codes() -> dict:
    """torch_npu's dtype constants (``torch_npu.float8_e8m0fnu`` 293, ``torch_npu.hifloat8`` 290...: ACL's data
    type numbers plus 256), which its quantisation operators take as ``dst_type`` / ``scale_dtype``."""
    from ascendify.emulator.fused._dtypes import NPU_CODES

    return dict(NPU_CODES)


def _build(name: str) -> types.ModuleType:
    release = torch.__version__.split("+", 1)[0]
    if name == "torch_npu":
        return _module(name, "torch_npu, emulated by ascendify (no CANN, no NPU: see ascendify.emulator).", {
            "__version__": f"{release}+ascendify.emulated",
            # a real package has one; tools derive paths from it (DeepSpeed's NPU op builder: its lib folder)
            "__file__": __file__,
            "npu": torch.npu,
            # torch_npu._C._distributed_c10d.ProcessGroupHCCL(.Options): MindSpeed/Megatron build group options
            "_C": types.SimpleNamespace(_distributed_c10d=types.SimpleNamespace(
                ProcessGroupHCCL=_process_group_hccl())),
            "get_npu_format": tooling.get_npu_format,
            "Format": tooling.Format,
            **_dtype_codes(),
        }, package=True)
    if name == "torch_npu.npu":
        return torch.npu
    if name == "torch_npu.contrib":
        return _module(name, "torch_npu.contrib, emulated: only transfer_to_npu.", package=True)
    if name == "torch_npu.contrib.transfer_to_npu":
        return _module(name, "transfer_to_npu under emulation: CUDA calls go to the emulated npu.",
                       _transfer_to_npu())
    if name == "torch_npu.optim":
        return _module(name, "torch_npu.optim, emulated: NpuFused* map to torch.optim.", _optim(), package=True)
    if name == "torch_npu.utils":
        return _module(name, "torch_npu.utils, emulated.", {"get_cann_version": _get_cann_version}, package=True)
    if name == "torch_npu.utils.collect_env":  # MindSpeed imports get_cann_version from here at import time
        return _module(name, "torch_npu.utils.collect_env, emulated: get_cann_version (no CANN: it raises).",
                       {"get_cann_version": _get_cann_version})
    if name == "torch_npu.utils.storage":
        return _module(name, "torch_npu.utils.storage, emulated: the checkpoint rebuild function.",
                       tooling.storage_attrs())
    if name == "torch_npu.utils.serialization":
        return _module(name, "torch_npu.utils.serialization, emulated: torch's load/save, RE_MAP_CPU.",
                       tooling.serialization_attrs())
    if name == "torch_npu.distributed":
        return _module(name, "torch_npu.distributed, emulated (the hccl backend runs gloo on host memory).", {
            "is_hccl_available": _is_hccl_available,
            "is_available": lambda: torch.distributed.is_available(),
        }, package=True)
    if name == "torch_npu.profiler":
        from ascendify.emulator.api import profiler

        return _module(name, "torch_npu.profiler, emulated: torch's profiler over the host ops, written in the Ascend "
                       "PyTorch Profiler's layout (ascendify.emulator.api.profiler).", profiler.module_attrs(),
                       package=True)
    raise AssertionError(name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name in companions.PROVIDED:
            return companions.build(spec.name)
        return _build(spec.name)

    def exec_module(self, module):
        parent, _, leaf = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], leaf, module)
        for sub in _LOADED_WITH.get(module.__name__, ()):
            importlib.import_module(sub)


# what ``import torch_npu`` imports along, as the real package does (msprobe reads
# ``torch_npu.utils.storage._rebuild_npu_tensor`` after a bare ``import torch_npu``)
_LOADED_WITH = {"torch_npu": ("torch_npu.utils", "torch_npu.profiler"),
                "torch_npu.utils": ("torch_npu.utils.storage", "torch_npu.utils.serialization")}


class Finder(importlib.abc.MetaPathFinder):
    """Finds the shim's ``torch_npu`` modules (last in ``sys.meta_path``: a real install wins)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in companions.PROVIDED:  # pyACL, torchair: torch_npu's companions (an installed one wins)
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package="." not in fullname)
        if fullname != "torch_npu" and not fullname.startswith("torch_npu."):
            return None
        if fullname.startswith("torch_npu.npu."):
            sub = sys.modules.get("torch.npu." + fullname[len("torch_npu.npu."):])
            if sub is not None:
                return importlib.machinery.ModuleSpec(fullname, _AliasLoader(sub))
        if fullname in _PROVIDED:
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=fullname != "torch_npu.npu")
        if _known(fullname):
            raise ImportError(
                f"{fullname} exists in torch_npu but is not emulated by ascendify's emulated npu device",
                name=fullname,
            )
        return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        return None


_finder: list[Finder] = []


def install() -> None:
    fused.register_torch_ops()
    if not _finder:
        _finder.append(Finder())
        sys.meta_path.append(_finder[0])
