"""Which batches SGLang runs with zigzag CP: the eligibility rule, by name or number (no torch).

SGLang versions differ:

* ``pr`` (default): SGLang PR #33137's ``ZigzagCPStrategy.can_apply`` (``layers/cp/zigzag.py``; also
  ``can_cp_split`` in ``layers/utils/cp_utils.py``): every request's extend length >= ``2 * cp_size`` (so each
  of the ``2 * cp_size`` zigzag blocks holds a token);
* ``upstream``: later upstream code, every extend length >= ``max(128, 2 * cp_size)``;
* a number ``N``: every extend length >= ``max(N, 2 * cp_size)`` (forks with their own threshold; the
  ``2 * cp_size`` floor is zigzag's own).

Optionally a total-token minimum (``--cp-min-tokens``, forks): the batch's extend tokens together must
reach it. ``cp_size == 1`` is no CP at all: SGLang builds no CP strategy and runs a plain prefill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cpbench.errors import CpbenchInputError

RULE_NAMES = ("pr", "upstream")
UPSTREAM_FLOOR = 128  # tokens: upstream's minimum extend length per request
NO_CP = "no CP (cp_size 1): SGLang builds no CP strategy and runs a plain prefill"


@dataclass(frozen=True)
class CpRule:
    """An eligibility rule: ``min_extend`` is ``"pr"``, ``"upstream"`` or a number of tokens (as text),
    ``min_tokens`` the total extend tokens a batch needs (0: none)."""

    min_extend: str = "pr"
    min_tokens: int = 0

    def need(self, cp_size: int) -> int:
        """The minimum extend length per request at ``cp_size``, tokens."""
        floor = 2 * cp_size
        if self.min_extend == "pr":
            return floor
        if self.min_extend == "upstream":
            return max(UPSTREAM_FLOOR, floor)
        return max(int(self.min_extend), floor)

    def formula(self) -> str:
        """The per-request minimum as a formula: ``2*cp_size``, ``max(128, 2*cp_size)``, ``max(N, 2*cp_size)``."""
        return {"pr": "2*cp_size", "upstream": f"max({UPSTREAM_FLOOR}, 2*cp_size)"}.get(
            self.min_extend, f"max({self.min_extend}, 2*cp_size)")

    def describe(self, cp_size: int | None = None) -> str:
        """E.g. ``"rule upstream: every extend >= max(128, 2*cp_size)"`` (with the number at ``cp_size``)."""
        what = self.formula()
        at = f" = {self.need(cp_size)}" if cp_size is not None else ""
        tokens = f", and >= {self.min_tokens} extend tokens per batch" if self.min_tokens else ""
        return f"rule {self.min_extend}: every extend >= {what}{at}{tokens}"

    def check(self, extend_lens: Sequence[int], cp_size: int) -> tuple[bool, str]:
        """``(eligible, reason)``; ``cp_size == 1`` is ``(True, NO_CP)``: nothing to refuse, no CP either
        (callers that print eligibility show it as "no CP")."""
        if cp_size == 1:
            return True, NO_CP
        need = self.need(cp_size)
        for s, n in enumerate(extend_lens):
            if n < need:
                return False, (f"request {s} has {n} extend tokens < {self.formula()} = {need} "
                               f"(rule {self.min_extend}); SGLang runs this batch without CP")
        total = sum(extend_lens)
        if total < self.min_tokens:
            return False, (f"the batch has {total} extend tokens < --cp-min-tokens {self.min_tokens}; "
                           "SGLang runs this batch without CP")
        return True, ""


MAX_TOKENS = 2**31 - 1  # the bound of --cp-min-extend and --cp-min-tokens (the largest int32)


def parse_rule(min_extend: str | int | None = None, min_tokens: int | None = None) -> CpRule:
    """The rule of ``--cp-min-extend`` (``pr``, ``upstream`` or a number >= 1; default ``pr``) and
    ``--cp-min-tokens`` (>= 0; default 0).

    Raises:
        CpbenchInputError: another name, a number outside [1, MAX_TOKENS], a token minimum outside
            [0, MAX_TOKENS].
    """
    text = "pr" if min_extend is None else str(min_extend).strip()
    if text not in RULE_NAMES:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_TOKENS:
            raise CpbenchInputError(f"--cp-min-extend must be pr (2*cp_size, SGLang PR #33137), upstream "
                                    f"(max({UPSTREAM_FLOOR}, 2*cp_size)) or a number of tokens in [1, {MAX_TOKENS}], "
                                    f"got {text!r}")
        text = str(n)
    tokens = 0 if min_tokens is None else min_tokens
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS:
        raise CpbenchInputError(f"--cp-min-tokens must be a number of tokens in [0, {MAX_TOKENS}] (0: none), "
                                f"got {min_tokens!r}")
    return CpRule(text, tokens)


DEFAULT_RULE = CpRule()
