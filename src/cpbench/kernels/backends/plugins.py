"""The one loader of backend declarations: cpbench's own (:data:`BUILTIN`) first, then every entry point of the
group :data:`GROUP` (``cpbench.backends``) an installed distribution declares, through the same code path
(:func:`discover`). And the spec of a backend named by its class, ``--backend pkg.mod:Class`` (:func:`class_spec`).

A declaration is an entry point whose object is a :class:`~cpbench.kernels.backends.spec.BackendSpec` or a
tuple or list of them (docs/backends.md). One that fails to import, breaks the declaration rules
(:func:`~cpbench.kernels.backends.spec.spec_problem`) or takes a name already taken is left out with its reason
(:class:`LeftOut`); the others load. Nothing here imports torch; a declaration module that does slows every
``cpbench`` command (``cpbench check-backend`` says so).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Callable

import cpbench
from cpbench.errors import CpbenchInputError, one_line
from cpbench.kernels.backends.spec import BackendSpec, spec_problem

GROUP = "cpbench.backends"
BUILTIN = "cpbench.kernels.backends.builtin:SPECS"
OWN_DIST = "cpbench"


@dataclass(frozen=True)
class LeftOut:
    """A declaration the registry did not take: ``what`` names it (entry point, distribution and version),
    ``names`` the backend names it would have given (the entry point's name when it did not load), ``reason``
    says why, in a few words."""

    what: str
    names: tuple[str, ...]
    reason: str

    @property
    def line(self) -> str:
        """One line for a warning: ``backend plugin <what> left out: <reason>``."""
        return f"backend plugin {self.what} left out: {self.reason}"


@dataclass
class Discovery:
    """What :func:`discover` found: ``specs`` by name (cpbench's own first, then the plugins' in the order of
    their distributions' and entry points' names) and the declarations ``left_out``."""

    specs: dict[str, BackendSpec] = field(default_factory=dict)
    left_out: list[LeftOut] = field(default_factory=list)


def _object(path: str):
    """The object at ``"module:attr"`` (imports the module)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def entry_points() -> list[metadata.EntryPoint]:
    """The ``cpbench.backends`` entry points of the installed distributions, sorted by distribution and name."""
    eps = metadata.entry_points(group=GROUP)
    return sorted(eps, key=lambda ep: (ep.dist.name if ep.dist else "", ep.name))


def discover(eps: list[metadata.EntryPoint] | None = None) -> Discovery:
    """Load cpbench's own declarations, then those of ``eps`` (default: :func:`entry_points`). Never raises for a
    plugin: what cannot be taken is in ``left_out``."""
    found = Discovery()
    _take(found, OWN_DIST, cpbench.__version__, BUILTIN, f"cpbench's own ({BUILTIN})", (), lambda: _object(BUILTIN))
    for ep in entry_points() if eps is None else eps:
        dist = ep.dist.name if ep.dist else ""
        version = ep.dist.version if ep.dist else ""
        what = f"{ep.name} = {ep.value} ({dist or 'no distribution'} {version})".replace(" )", ")")
        _take(found, dist, version, ep.value, what, (ep.name,), ep.load)
    return found


def _take(found: Discovery, dist: str, version: str, origin: str, what: str, names: tuple[str, ...],
          load: Callable[[], object]) -> None:
    """Load one declaration and add its specs to ``found`` (or its reason to ``found.left_out``)."""
    try:
        obj = load()
    except Exception as e:  # a plugin that cannot be imported is left out; the others still load
        found.left_out.append(LeftOut(what, names, f"cannot be imported ({one_line(e)}): reinstall it or fix "
                                                   "the entry point"))
        return
    specs = tuple(obj) if isinstance(obj, (tuple, list)) else (obj,)
    if not specs:
        found.left_out.append(LeftOut(what, names, "declares no BackendSpec"))
    for spec in specs:
        why = spec_problem(spec)
        name = getattr(spec, "name", None)
        if why is None and name in found.specs:
            why = f"name {name!r} is taken by {found.specs[name].source_text}: give the backend another name"
        if why is not None:
            found.left_out.append(LeftOut(what, (name,) if isinstance(name, str) else names,
                                          f"{why} (docs/backends.md)"))
            continue
        found.specs[name] = replace(spec, dist=dist, version=version, origin=origin)


def distribution_of(module: str) -> tuple[str, str]:
    """``(distribution, version)`` that installs the top-level package of ``module``; cpbench's own for
    ``cpbench.*`` (the version of the code imported); ``("", "")`` for a module of no installed distribution."""
    top = module.split(".")[0]
    if top == "cpbench":
        return OWN_DIST, cpbench.__version__
    dists = metadata.packages_distributions().get(top) or []
    if not dists:
        return "", ""
    try:
        return dists[0], metadata.version(dists[0])
    except metadata.PackageNotFoundError:
        return dists[0], ""


def class_spec(text: str) -> BackendSpec:
    """The spec of a backend named by its class, ``"pkg.mod:Class"`` (not registered): named by that text,
    runs anywhere (its ``supports()`` decides), ``auto`` never picks it; its kernel patterns and modes are the
    class's ``kernel_patterns`` and ``modes`` attributes where it has them (else none, and two-call and fused).
    Imports the module.

    Raises:
        CpbenchInputError: the text is not ``module:Class``, the module cannot be imported, it has no such
            class, or the class's attributes break the declaration rules.
    """
    module, _, cls_name = text.partition(":")
    probe = BackendSpec(text, text, (), "-", cpu=True)
    if spec_problem(probe, declared=False) is not None:
        raise CpbenchInputError(f"--backend {text!r} is neither a backend name nor 'module:Class': use a name "
                                "`cpbench doctor` lists, or pkg.module:ClassName")
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        raise CpbenchInputError(f"--backend {text}: cannot import {module} ({one_line(e)}): install its package "
                                "or put it on PYTHONPATH") from e
    cls = getattr(mod, cls_name, None)
    if cls is None:
        raise CpbenchInputError(f"--backend {text}: module {module} has no {cls_name}: check the class name")
    dist, version = distribution_of(module)
    modes = getattr(cls, "modes", BackendSpec.modes)
    spec = BackendSpec(text, text, tuple(getattr(cls, "kernel_patterns", ())),
                       f"{text} (named by its class, not registered)", cpu=True, cuda_min=(0, 0), auto=False,
                       modes=tuple(str(m) for m in modes) if isinstance(modes, (tuple, list)) else modes,
                       dist=dist, version=version, origin=text)
    why = spec_problem(spec, declared=False)
    if why is not None:
        raise CpbenchInputError(f"--backend {text}: the class's {why} (docs/backends.md)")
    return spec


__all__ = ["BUILTIN", "GROUP", "Discovery", "LeftOut", "class_spec", "discover", "distribution_of", "entry_points"]
