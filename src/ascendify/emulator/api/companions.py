"""The packages that come with torch_npu on an Ascend machine and that frameworks import at import time, as far as
they make sense on the emulated npu device.

- ``acl`` (pyACL, CANN's Python runtime API): ``acl.get_soc_name()`` names the emulated chip;
  ``acl.rt.get_mem_info(attr)`` answers ``(free, total, 0)`` from the emulated device's memory (MindSpeed's adaptive
  recomputation asks it). Any other ``acl`` call raises :class:`NotEmulatedError`.
- ``torchair`` (torch_npu's GE graph-mode backend for ``torch.compile``): importable, with what a module needs to
  *define* a GE converter (``register_fx_node_ge_converter`` leaves the function as it is, ``torchair.ge``'s
  ``Tensor``/``TensorSpec``/``DataType`` are names), because MindSpeed's op builders import them at import time;
  compiling with it (``get_npu_backend``, ``CompilerConfig``...) raises :class:`NotEmulatedError`: there is no GE
  graph under emulation (``torch.compile``'s default backend runs on the emulated npu).

Like the ``torch_npu`` shim, these are found last on ``sys.meta_path`` (:mod:`ascendify.emulator.api.shim`): an
installed package of the same name wins.
"""

from __future__ import annotations

import types

from ascendify.emulator.errors import NotEmulatedError

PROVIDED = ("acl", "acl.rt", "torchair", "torchair.ge")


def _refuse(dotted: str, why: str):
    def refused(*args, **kwargs):
        raise NotEmulatedError(f"{dotted} is not emulated: {why}")

    refused.__name__ = refused.__qualname__ = dotted.rpartition(".")[2]
    return refused


def _module(name: str, doc: str, attrs: dict, why: str, package: bool = False) -> types.ModuleType:
    m = types.ModuleType(name, doc)
    m.__ascendify_shim__ = True
    if package:
        m.__path__ = []
    m.__dict__.update(attrs)

    def __getattr__(attr, _name=name):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _refuse(f"{_name}.{attr}", why)

    m.__getattr__ = __getattr__
    return m


_ACL_WHY = "pyACL talks to CANN's runtime, which the emulated npu device does not have"
_GE_WHY = ("torchair compiles to Ascend's GE graphs, which the emulated npu device does not have; torch.compile's "
           "default backend (inductor) runs on it")


def get_soc_name() -> str:
    from ascendify.emulator import runtime

    return runtime.settings.device_name


def get_mem_info(attr: int = 0) -> tuple[int, int, int]:
    """``(free, total, ret)`` of the current emulated device, ``ret`` 0 (ACL_SUCCESS); ``attr`` (the memory kind:
    HBM, DDR...) is one pool here."""
    import torch

    free, total = torch.npu.mem_get_info()
    return int(free), int(total), 0


class _Name:
    """A GE graph type's name (``torchair.ge.Tensor``): defining a converter with it is fine; nothing builds one."""

    def __init__(self, *args, **kwargs):
        raise NotEmulatedError(f"torchair.ge.{type(self).__name__} is not emulated: {_GE_WHY}")


def _register_fx_node_ge_converter(*args, **kwargs):
    """A GE converter is used only when torchair compiles a graph: the function is returned as it is."""
    def register(fn):
        return fn

    return register


def build(name: str) -> types.ModuleType:
    if name == "acl":  # pyACL is one extension module: acl.rt is an attribute, there after a bare import acl
        return _module(name, "pyACL, emulated: the chip's name and the device memory.",
                       {"get_soc_name": get_soc_name, "rt": build("acl.rt")}, _ACL_WHY, package=True)
    if name == "acl.rt":
        return _module(name, "pyACL runtime, emulated: get_mem_info.", {"get_mem_info": get_mem_info}, _ACL_WHY)
    if name == "torchair":
        return _module(name, "torchair, emulated: importable; GE graph mode is not.", {
            "register_fx_node_ge_converter": _register_fx_node_ge_converter, "ge": build("torchair.ge")}, _GE_WHY,
            package=True)
    if name == "torchair.ge":
        names = {n: type(n, (_Name,), {}) for n in ("Tensor", "TensorSpec", "DataType")}
        return _module(name, "torchair.ge, emulated: the type names a converter is written with.", names, _GE_WHY)
    raise AssertionError(name)
