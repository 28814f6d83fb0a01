"""What profiling needs from one rank's forward, as a Protocol (no torch, nothing from the layers).

``cpbench.kernels.backends.base.Prepared`` satisfies it; profiles never import it (import rule:
``cpbench.profiles`` imports nothing from ``cpbench.domain`` up to ``cpbench.commands``; the import-linter contracts in
pyproject.toml check it).
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

Call = Callable[[], None]


class ForwardLike(Protocol):
    """One rank's forward, ready to launch.

    Attributes:
        layers: per layer, ``[(call_name, closure), ...]``; call names are ``prev``/``next``
            (two-call) or ``combined`` (fused); closures take no argument and only launch work.
        kernel_patterns: lower-case substrings naming the backend's attention kernels (empty for
            the torch reference, whose attention is counted by calls).
    """

    @property
    def layers(self) -> Sequence[Sequence[tuple[str, Call]]]: ...

    @property
    def kernel_patterns(self) -> tuple[str, ...]: ...

    @property
    def calls_per_layer(self) -> int: ...


__all__ = ["Call", "ForwardLike"]
