"""What a backend declares without being imported: :class:`BackendSpec`, and :func:`spec_problem`, the check
every declaration passes before the registry takes it (cpbench's own and a plugin's alike; docs/backends.md).

No torch here: a plugin's declaration module imports this one, and the CLI reads every declaration to build
its ``--backend`` choices before any backend is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cpbench.domain.modes import ALL_MODES, MODES

Capability = tuple[int, int]  # CUDA compute capability (major, minor), e.g. (9, 0) for H100/H200

NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")  # a declared name: --backend, results rows, file names
IMPL = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")  # "module:Class"


@dataclass(frozen=True)
class BackendSpec:
    """What cpbench knows about a backend without importing it.

    Attributes:
        name: CLI/results name (``--backend``), as in SGLang's ``--attention-backend`` where it exists: lower-case
            letters, digits, ``.``, ``_``, ``-``; not ``auto``.
        impl: ``"module:Class"`` implementing it; called as ``Class(*impl_args)``.
        impl_args: positional arguments of the class (``("fa2",)`` for FlashInferBackend).
        kernel_patterns: lower-case substrings of its attention kernels' demangled names; empty when
            attention is many generic kernels (the torch reference counts attention *calls*).
        cpu: runs without CUDA.
        cuda_min: lowest compute capability it runs on, or None (no CUDA support).
        cuda_majors: when set, only these major versions (``(10,)`` = 10.x); checked after ``cuda_min``.
        cuda_exact: when set, only these exact capabilities (``((9, 0),)`` = Hopper sm_90).
        description: one line for ``cpbench doctor`` and ``--help``.
        auto: ``--backend auto`` may pick it (False for an analysis backend such as flex). ``auto`` picks only
            among cpbench's own backends: a plugin runs when named.
        modes: the modes it has a call for: ``two-call`` and ``fused`` always, ``cp-native`` where it has one
            (a sweep records a mode it lacks as ``unsupported``).
        dist, version: the distribution that declared it and its version (``cpbench`` for its own); set by the
            registry when it loads the declaration (what a declaration sets here is replaced).
        origin: where the declaration was read: the entry point's ``module:object``, or ``module:Class`` for a
            backend named by its class (set by the registry).
    """

    name: str
    impl: str
    kernel_patterns: tuple[str, ...]
    description: str
    impl_args: tuple = ()
    cpu: bool = False
    cuda_min: Capability | None = (8, 0)
    cuda_majors: tuple[int, ...] = ()
    cuda_exact: tuple[Capability, ...] = ()
    auto: bool = True
    modes: tuple[str, ...] = tuple(m.value for m in MODES)
    dist: str = ""
    version: str = ""
    origin: str = ""

    def runs_on(self, capability: Capability | None) -> bool:
        """True when this backend can run on compute ``capability`` (None: no CUDA, i.e. CPU)."""
        if capability is None:
            return self.cpu
        cc = tuple(capability)
        if self.cuda_min is None or cc < tuple(self.cuda_min):
            return False
        if self.cuda_majors and cc[0] not in self.cuda_majors:
            return False
        return not self.cuda_exact or cc in self.cuda_exact

    @property
    def capability_text(self) -> str:
        """Where it runs, for messages: ``"9.0"``, ``"10.x"``, ``">= 8.0"``, ``"cpu, cuda any"``."""
        if self.cuda_min is None:
            return "cpu" if self.cpu else "nowhere"
        if tuple(self.cuda_min) == (0, 0) and not (self.cuda_exact or self.cuda_majors):
            cuda = "any"
        elif self.cuda_exact:
            cuda = "/".join(f"{a}.{b}" for a, b in self.cuda_exact)
        elif self.cuda_majors:
            cuda = "/".join(f"{m}.x" for m in self.cuda_majors)
        else:
            cuda = f">= {self.cuda_min[0]}.{self.cuda_min[1]}"
        return f"cpu, cuda {cuda}" if self.cpu else cuda

    @property
    def source_text(self) -> str:
        """Who declared it, for messages and ``cpbench doctor``: ``"cpbench 0.1.0"``, ``"my-plugin 1.2"``, or
        ``"no installed distribution"``."""
        return f"{self.dist} {self.version}".strip() if self.dist else "no installed distribution"


def _capability(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value)


def spec_problem(spec, declared: bool = True) -> str | None:
    """What is wrong with ``spec`` as a declaration, in a few words, or None. ``declared``: a name from an entry
    point (held to :data:`NAME`); False for a backend named by its ``module:Class``, whose name is that text."""
    if not isinstance(spec, BackendSpec):
        return f"declares a {type(spec).__name__}, not a cpbench BackendSpec"
    if not isinstance(spec.name, str) or (declared and (not NAME.match(spec.name) or spec.name == "auto")):
        return (f"name {spec.name!r} is not a backend name (lower-case letters, digits, '.', '_', '-'; "
                "not 'auto')")
    if not isinstance(spec.impl, str) or not IMPL.match(spec.impl):
        return f"impl {spec.impl!r} is not 'module:Class'"
    if not isinstance(spec.kernel_patterns, tuple) or not all(
            isinstance(p, str) and p and p == p.lower() for p in spec.kernel_patterns):
        return f"kernel_patterns {spec.kernel_patterns!r} is not a tuple of non-empty lower-case strings"
    modes = spec.modes if isinstance(spec.modes, tuple) else ()
    if not {str(m) for m in MODES} <= {str(m) for m in modes} or not {str(m) for m in modes} <= set(ALL_MODES):
        return (f"modes {spec.modes!r} must be a tuple holding two-call and fused, and cp-native where the backend "
                "has that call")
    if not isinstance(spec.impl_args, tuple):
        return f"impl_args {spec.impl_args!r} is not a tuple"
    if not isinstance(spec.cpu, bool) or not isinstance(spec.auto, bool):
        return "cpu and auto must be True or False"
    if spec.cuda_min is not None and not _capability(spec.cuda_min):
        return f"cuda_min {spec.cuda_min!r} is not None or a (major, minor) tuple of ints"
    if not isinstance(spec.cuda_majors, tuple) or not all(isinstance(m, int) for m in spec.cuda_majors):
        return f"cuda_majors {spec.cuda_majors!r} is not a tuple of ints"
    if not isinstance(spec.cuda_exact, tuple) or not all(_capability(c) for c in spec.cuda_exact):
        return f"cuda_exact {spec.cuda_exact!r} is not a tuple of (major, minor) tuples"
    if not spec.cpu and spec.cuda_min is None:
        return "it runs nowhere: set cpu=True, cuda_min, or both"
    if not isinstance(spec.description, str) or not spec.description.strip():
        return "description is empty: one line for cpbench doctor"
    return None


__all__ = ["BackendSpec", "Capability", "spec_problem"]
