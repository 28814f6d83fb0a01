"""The rest of a layer on one CP rank, as integers (no torch): what a prefill layer does besides attention,
sized as SGLang runs it, and the token bucket its CUDA-graph segments are replayed at (docs/design.md §11).

Per layer, on the ``tokens`` rows of one rank (its padded local tokens, or the bucket they are padded to):

* before attention: input RMSNorm over ``hidden_size``; the QKV projection ``[tokens, H] x [H, (Hq + 2 Hkv) D]``
  (+ bias where the model has one); RoPE on the q and k parts;
* after attention: the O projection ``[tokens, Hq D] x [Hq D, H]`` (+ bias), the residual add and the
  post-attention RMSNorm; then
* a dense MLP: gate/up ``[tokens, H] x [H, 2 I/tp]`` and down ``[tokens, I/tp] x [I/tp, H]`` (each CP rank runs
  its own tokens through the MLP, its weights split like the attention heads, ``--tp``); or
* a MoE: the router ``[tokens, H] x [H, E]`` and top-k, then the experts as grouped GEMMs over the rank's
  ``E / ep`` local experts. The ``cp_size x tp`` ranks of a CP group hold ``cp_size`` distinct token sets of
  ``tokens`` rows each (attention TP ranks share theirs); their ``cp_size * tokens * top_k`` routed rows are
  spread evenly over the ``ep`` expert-parallel shards, and a shard's ``cp_size * tp / ep`` ranks split each
  expert's width (MoE TP). So a rank receives ``routed = cp_size * tokens * top_k / ep`` rows, each expert
  ``ceil(routed / local_experts)`` of them, at width ``moe_intermediate_size * ep / (cp_size * tp)``. At the
  default ``ep = cp_size * tp`` (the PR's launch: ``--tp 4 --ep 4 --attn-cp-size 4``) that is
  ``tokens * top_k / tp`` rows at the full expert width.

FLOPs count the GEMMs only (``2 m k n`` each); norms, RoPE, top-k and the SwiGLU are elementwise and left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cpbench.errors import CpbenchInputError
from cpbench.domain.models import ModelSpec
from cpbench.domain.modes import Timing

MAX_LAYER_REST_US = 1e6  # --layer-rest-us above a second per layer is a typo, not an engine's figure


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a layer: ``count`` products of ``[m, k] x [k, n]`` (a grouped GEMM: ``count`` experts)."""

    name: str
    m: int
    k: int
    n: int
    count: int = 1
    bias: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.count

    @property
    def weight_elems(self) -> int:
        return (self.k * self.n + (self.n if self.bias else 0)) * self.count


@dataclass(frozen=True)
class RestShape:
    """The rest of one layer on one rank. Sizes per rank; ``tokens`` rows (tokens).

    Attributes:
        tokens: rows the graph segments process (the rank's padded tokens, or its bucket).
        hidden_size: H. qkv_out: ``(Hq + 2 Hkv) * D`` of this rank's heads. o_in: ``Hq * D``.
        attention_bias: the projections carry a bias.
        mlp_intermediate: a dense MLP's width on this rank (``intermediate_size / tp``); 0 for a MoE.
        num_experts / local_experts / top_k: the MoE's experts, those on this rank (``E / ep``), top-k.
        expert_intermediate: one local expert's width on this rank. routed_tokens: rows this rank's experts
            receive; rows_per_expert: ``ceil(routed_tokens / local_experts)`` (the even spread, padded).
    """

    tokens: int
    hidden_size: int
    qkv_out: int
    o_in: int
    attention_bias: bool
    head_dim: int = 64
    mlp_intermediate: int = 0
    num_experts: int = 0
    local_experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    routed_tokens: int = 0

    @property
    def is_moe(self) -> bool:
        return self.local_experts > 0

    @property
    def kv_width(self) -> int:
        """Columns of the QKV output that hold v (``Hkv * D``; q and k take the rest)."""
        return (self.qkv_out - self.o_in) // 2

    @property
    def rows_per_expert(self) -> int:
        return -(-self.routed_tokens // self.local_experts) if self.is_moe else 0

    def gemms(self) -> list[Gemm]:
        """The layer's GEMMs in launch order (before attention, then after)."""
        t, h = self.tokens, self.hidden_size
        out = [Gemm("qkv_proj", t, h, self.qkv_out, bias=self.attention_bias),
               Gemm("o_proj", t, self.o_in, h, bias=self.attention_bias)]
        if self.is_moe:
            n, i = self.rows_per_expert, self.expert_intermediate
            out += [Gemm("router", t, h, self.num_experts, bias=self.attention_bias),
                    Gemm("experts_gate_up", n, h, 2 * i, self.local_experts, bias=self.attention_bias),
                    Gemm("experts_down", n, i, h, self.local_experts, bias=self.attention_bias)]
        else:
            out += [Gemm("mlp_gate_up", t, h, 2 * self.mlp_intermediate),
                    Gemm("mlp_down", t, self.mlp_intermediate, h)]
        return out

    @property
    def flops(self) -> int:
        """GEMM FLOPs of one layer on this rank (FLOP)."""
        return sum(g.flops for g in self.gemms())

    def weight_bytes(self, elem_bytes: int) -> int:
        """Bytes of one layer's weights on this rank (GEMM weights and biases, two RMSNorm weights)."""
        return (sum(g.weight_elems for g in self.gemms()) + 2 * self.hidden_size) * elem_bytes

    def activation_bytes(self, elem_bytes: int) -> int:
        """Bytes of the largest set of activations one layer holds at once (an upper estimate: the hidden
        state, its norm, the QKV output, the attention stand-in, and the MLP's or experts' intermediates)."""
        t, h = self.tokens, self.hidden_size
        rows, width = ((self.rows_per_expert * self.local_experts, self.expert_intermediate) if self.is_moe
                       else (t, self.mlp_intermediate))
        return (3 * t * h + t * (self.qkv_out + self.o_in) + rows * (3 * width + 2 * h)
                + t * max(self.num_experts, 1) * 2) * elem_bytes


def default_ep(cp_size: int, tp_size: int) -> int:
    """``--ep`` when not given: every rank of the CP group is one expert shard (``cp_size * tp``)."""
    return cp_size * tp_size


def check_ep(model: ModelSpec, ep: int | None, cp_sizes, tp_size: int) -> None:
    """Refuse an ``--ep`` that makes no sense, in one line (CpbenchInputError): below 1, on a model without
    a MoE, not dividing the experts, or not dividing ``cp_size * tp`` of a swept cp_size. Without ``--ep``
    (None), the default ``cp_size * tp`` of every swept cp_size of a MoE model must divide the experts."""
    if ep is None:
        for cp in cp_sizes if model.is_moe else ():
            if model.num_experts % default_ep(cp, tp_size):
                raise CpbenchInputError(
                    f"the default --ep = cp_size x tp = {default_ep(cp, tp_size)} at cp_size {cp} does not divide "
                    f"the {model.num_experts} experts of {model.name}: pass --ep D, D dividing both")
        return
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise CpbenchInputError(f"--ep must be an integer >= 1, got {ep!r}")
    if not model.is_moe:
        raise CpbenchInputError(f"--ep {ep}: {model.name} has no MoE (a dense MLP): leave --ep out")
    if model.num_experts % ep:
        raise CpbenchInputError(f"--ep {ep} does not divide the {model.num_experts} expert"
                                f"{'s' if model.num_experts != 1 else ''} of {model.name}: pick a divisor of "
                                f"{model.num_experts}")
    for cp in cp_sizes:
        if (cp * tp_size) % ep:
            raise CpbenchInputError(f"--ep {ep} does not divide the {cp * tp_size} GPUs of cp_size {cp} x tp "
                                    f"{tp_size}: pick a divisor of {cp * tp_size}")


def check_layer_rest_us(us: float | None) -> None:
    """Refuse a ``--layer-rest-us`` that is negative, not finite or above a second, in one line."""
    if us is None:
        return
    if not (isinstance(us, (int, float)) and not isinstance(us, bool) and math.isfinite(us)
            and 0 <= us <= MAX_LAYER_REST_US):
        raise CpbenchInputError(f"--layer-rest-us must be a number of µs per layer in [0, {MAX_LAYER_REST_US:g}], "
                                f"got {us!r}")


def missing_rest_fields(model: ModelSpec) -> str:
    """Why ``model`` has no rest-of-layer work to build (a config without ``hidden_size`` or MLP sizes), or ""."""
    if model.hidden_size <= 0:
        return f"{model.name} has no hidden_size"
    if model.is_moe and model.num_experts_per_tok <= 0:
        return f"{model.name} has {model.num_experts} experts but no num_experts_per_tok"
    if model.is_moe and model.num_experts_per_tok > model.num_experts:
        return (f"{model.name} routes each token to num_experts_per_tok {model.num_experts_per_tok} of only "
                f"{model.num_experts} experts")
    if model.is_moe and model.moe_intermediate_size <= 0:
        return f"{model.name} has experts but no expert width (moe_intermediate_size or intermediate_size)"
    if not model.is_moe and model.intermediate_size <= 0:
        return f"{model.name} has no intermediate_size"
    return ""


def rest_shape(model: ModelSpec, tokens: int, cp_size: int, tp_size: int = 1, ep: int | None = None) -> RestShape:
    """The rest of one layer of ``model`` (whose heads are one GPU's, spec.tp) on a rank with ``tokens`` rows.

    Raises:
        CpbenchInputError: the model lacks the fields (:func:`missing_rest_fields`: use ``--layer-rest-us``),
            or ``ep`` does not divide the experts or ``cp_size * tp_size`` (:func:`check_ep`).
    """
    why = missing_rest_fields(model)
    if why:
        raise CpbenchInputError(f"{why}, so the rest of its layers cannot be built: give a config.json with the "
                                "MLP sizes, or --layer-rest-us N")
    hq, hkv, d = model.num_q_heads, model.num_kv_heads, model.head_dim
    base = dict(tokens=tokens, hidden_size=model.hidden_size, qkv_out=(hq + 2 * hkv) * d, o_in=hq * d,
                attention_bias=model.attention_bias, head_dim=d)
    if not model.is_moe:
        if model.intermediate_size % tp_size:
            raise CpbenchInputError(f"--tp {tp_size} does not divide the MLP width {model.intermediate_size}")
        return RestShape(**base, mlp_intermediate=model.intermediate_size // tp_size)
    ep = default_ep(cp_size, tp_size) if ep is None else ep
    check_ep(model, ep, (cp_size,), tp_size)
    moe_tp = cp_size * tp_size // ep
    if model.moe_intermediate_size % moe_tp:
        raise CpbenchInputError(f"--ep {ep} splits each expert's width {model.moe_intermediate_size} over {moe_tp} "
                                "GPUs, which does not divide it: raise --ep")
    return RestShape(**base, num_experts=model.num_experts, local_experts=model.num_experts // ep,
                     top_k=model.num_experts_per_tok, expert_intermediate=model.moe_intermediate_size // moe_tp,
                     routed_tokens=cp_size * tokens * model.num_experts_per_tok // ep)


def graph_bucket(tokens: int, buckets: tuple[int, ...]) -> tuple[int, str]:
    """The rows a rank's graph segments run at and how: ``(rows, "graph")`` with rows = the smallest bucket
    ``>= tokens`` (the exact count without buckets); ``(tokens, reason)`` when SGLang would run the forward
    eagerly: the tokens exceed the largest bucket, or the bucket is more than twice the tokens (SGLang
    #31487). The count is per rank: each rank replays its own graphs at its local (padded) token count."""
    if not buckets:
        return tokens, Timing.GRAPH.value
    fit = [b for b in buckets if b >= tokens]
    if not fit:
        return tokens, f"eager: {tokens} tokens > the largest bucket {buckets[-1]}"
    if fit[0] > 2 * tokens:
        return tokens, f"eager: bucket {fit[0]} > 2x {tokens} tokens"
    return fit[0], Timing.GRAPH.value
