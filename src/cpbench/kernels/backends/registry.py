"""The one list of attention backends: name -> :class:`BackendSpec`, and what derives from it.

The list is what :func:`cpbench.kernels.backends.plugins.discover` loads, on first use: cpbench's own
declarations (``kernels/backends/builtin.py``), then those of the ``cpbench.backends`` entry points of installed
plugins (docs/backends.md), one code path for both. A plugin left out (it fails to import, breaks the rules or
takes a taken name) is named in one :class:`~cpbench.errors.CpbenchWarning` line when a backend is first looked
up (:func:`get_spec`); :func:`left_out` lists them. ``--backend pkg.mod:Class`` names a backend that is not
registered (:func:`get_spec` builds its spec from the class).

Derived here: :func:`get_backend` (imports the implementing class lazily), :func:`resolve_auto`
(``--backend auto``), :func:`kernel_patterns` / :func:`known_attention_patterns` (attention-kernel
name substrings, for ``Prepared.kernel_patterns`` and the nsys cross-check), :func:`names_with_mode`. The CLI's
``--backend`` choices, ``cpbench columns`` and ``cpbench doctor``'s backend list are :data:`BACKEND_NAMES`
(module attributes read on use: :data:`BACKENDS`, :data:`BACKEND_NAMES`, :data:`CHOICES`).

This module imports neither torch nor any backend implementation, so the CLI can build its choices
and tests can resolve ``auto`` without a GPU. A torch device given to :func:`resolve_auto` is read
through ``sys.modules["torch"]`` (it exists once a device does).

Adding a backend: one :class:`BackendSpec` in ``builtin.SPECS`` (ordered from the most portable to the most
specialised; ``auto`` prefers the latter), or in a plugin's entry point, and a class with ``name``,
``supports(device, model, dtype)`` and ``prepare(work, mode)``; ``cpbench check-backend NAME`` checks it.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings

from cpbench.errors import CpbenchInputError, CpbenchWarning, one_line
from cpbench.kernels.backends.plugins import OWN_DIST, Discovery, LeftOut, class_spec, discover
from cpbench.kernels.backends.spec import BackendSpec, Capability

AUTO = "auto"
_CLASS_SPECS: dict[str, BackendSpec] = {}  # "pkg.mod:Class" -> its spec, built once
_announced: list[bool] = [False]  # the left-out plugins were warned about (once per discovery)


@functools.cache
def _discovery() -> Discovery:
    return discover()


def backends() -> dict[str, BackendSpec]:
    """Every registered backend by name, cpbench's own first (the same dict on every call until :func:`reload`)."""
    return _discovery().specs


def left_out() -> list[LeftOut]:
    """The plugin declarations the registry did not take, each with its reason."""
    return list(_discovery().left_out)


def reload() -> None:
    """Read the declarations again (after a plugin was installed or sys.path changed; tests)."""
    _discovery.cache_clear()
    _CLASS_SPECS.clear()
    _announced[0] = False


def __getattr__(name: str):
    if name == "BACKENDS":
        return backends()
    if name == "BACKEND_NAMES":  # every concrete backend (no "auto")
        return tuple(backends())
    if name == "CHOICES":  # what --backend accepts by name
        return (AUTO, *backends())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _announce() -> None:
    """Warn once, a line each, of the plugins left out (a command that looks a backend up shows them)."""
    if not _announced[0]:
        _announced[0] = True
        for lo in _discovery().left_out:
            warnings.warn(lo.line, CpbenchWarning, stacklevel=3)


def get_spec(name: str) -> BackendSpec:
    """The spec of backend ``name`` (not ``auto``): a registered name, or ``"pkg.mod:Class"`` for a backend named by
    its class (the module is imported; :func:`~cpbench.kernels.backends.plugins.class_spec`).

    Raises:
        CpbenchInputError: an unknown name (naming the known ones), a plugin that was left out (with its
            reason), or a ``module:Class`` that cannot be imported or found.
    """
    _announce()
    specs = backends()
    if name in specs:
        return specs[name]
    if isinstance(name, str) and ":" in name:
        if name not in _CLASS_SPECS:
            _CLASS_SPECS[name] = class_spec(name)
        return _CLASS_SPECS[name]
    lo = next((x for x in _discovery().left_out if name in x.names), None)
    if lo is not None:
        raise CpbenchInputError(f"backend {name!r} was left out: {lo.reason} (backend plugin {lo.what})")
    raise CpbenchInputError(f"unknown backend {name!r}: use one of {', '.join((AUTO, *specs))}, or "
                            "pkg.module:ClassName for a class that is not registered")


def protocol_problem(backend) -> str | None:
    """What a backend object lacks of the protocol (``name`` a str, ``supports`` and ``prepare`` callable), or
    None (``kernels/backends/base.Backend``; docs/backends.md)."""
    if not isinstance(getattr(backend, "name", None), str):
        return "it has no `name` str attribute"
    for method in ("supports", "prepare"):
        if not callable(getattr(backend, method, None)):
            return f"it has no `{method}` method"
    return None


def get_backend(name: str):
    """A new backend object for ``name`` (a registered name or ``pkg.mod:Class``; not ``auto``), its module
    imported now (torch, and flashinfer only when the backend itself imports it).

    Raises:
        CpbenchInputError: an unknown name (:func:`get_spec`), a class that cannot be imported or built, or an
            object that breaks the backend protocol (:func:`protocol_problem`), each naming the distribution.
    """
    spec = get_spec(name)
    module, cls = spec.impl.split(":")
    try:
        backend = getattr(importlib.import_module(module), cls)(*spec.impl_args)
    except Exception as e:
        raise CpbenchInputError(f"backend {name} ({spec.impl}, from {spec.source_text}) cannot be built: "
                                f"{one_line(e)}: reinstall or fix it (`cpbench check-backend {name}`)") from e
    why = protocol_problem(backend)
    if why is not None:
        raise CpbenchInputError(f"backend {name} ({spec.impl}, from {spec.source_text}) breaks the backend "
                                f"protocol: {why} (docs/backends.md)")
    return backend


def names_with_mode(mode: str) -> tuple[str, ...]:
    """The registered backends that have a call for ``mode`` (e.g. ``cp-native``: fa3, flex)."""
    return tuple(n for n, s in backends().items() if str(mode) in s.modes)


def kernel_patterns(name: str) -> tuple[str, ...]:
    """Attention-kernel name substrings (lower case) of backend ``name``; ``()`` for ``torch``."""
    return get_spec(name).kernel_patterns


def known_attention_patterns() -> tuple[str, ...]:
    """Every backend's attention-kernel patterns, in registry order, without duplicates."""
    return tuple(dict.fromkeys(p for s in backends().values() for p in s.kernel_patterns))


def capability_refusal(name: str, capability: Capability) -> str | None:
    """None when backend ``name`` runs on CUDA compute ``capability``, else a one-line reason naming
    where it runs and the backend ``auto`` would pick instead."""
    spec = get_spec(name)
    if spec.runs_on(capability):
        return None
    major, minor = capability
    return (f"{name} runs only on compute capability {spec.capability_text}; this GPU is {major}.{minor}: "
            f"use {resolve_auto(capability)} (or --backend auto)")


def device_capability(device) -> Capability | None:
    """Compute capability of ``device``: a ``(major, minor)`` tuple is returned as is; None, ``"cpu"``
    or a CPU torch.device give None; a CUDA torch.device (or ``"cuda[:N]"``, torch already imported)
    is asked through ``torch.cuda.get_device_capability``. Raises CpbenchInputError for anything else."""
    if device is None:
        return None
    if isinstance(device, tuple):
        return (int(device[0]), int(device[1]))
    kind = device.split(":")[0] if isinstance(device, str) else getattr(device, "type", None)
    if kind == "cpu":
        return None
    torch = sys.modules.get("torch")
    if kind == "cuda" and torch is not None:
        return tuple(torch.cuda.get_device_capability(torch.device(device)))
    raise CpbenchInputError(f"cannot tell the compute capability of device {device!r}: give cpu, cuda[:N] "
                            "or a (major, minor) tuple")


def resolve_auto(device) -> str:
    """The backend ``auto`` picks: the most specialised (last) of cpbench's own backends that runs on
    ``device`` (see :func:`device_capability` for what it may be): the TRT-LLM kernel family SGLang PR
    #33137 fuses where one runs (10.x -> trtllm-gen, 9.x and 12.x -> trtllm-fmha-v2), other >= 8.0 ->
    flashinfer-fa2, CPU (or CUDA below 8.0) -> torch. A plugin is never picked: it runs when named."""
    cc = device_capability(device)
    return next(n for n, s in reversed(backends().items()) if s.auto and s.dist == OWN_DIST and s.runs_on(cc))


__all__ = ["AUTO", "BACKENDS", "BACKEND_NAMES", "CHOICES", "BackendSpec", "Capability", "LeftOut", "backends",
           "capability_refusal", "device_capability", "get_backend", "get_spec", "kernel_patterns",
           "known_attention_patterns", "left_out", "names_with_mode", "protocol_problem", "reload", "resolve_auto"]
