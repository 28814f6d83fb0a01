"""Model attention shapes per CP rank (attention TP 1): presets, overrides and local HF config.json
(read by :mod:`cpbench.domain.hf_config`).

Presets are docs/design.md §2. ``window_left`` follows FlashInfer/SGLang: a sliding window of ``w`` tokens
is ``window_left = w - 1`` (SGLang get_attention_sliding_window_size); ``-1`` means full attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cpbench.errors import CpbenchInputError

SUPPORTED_PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ModelSpec:
    """Attention shape of one model on one CP rank.

    Attributes:
        name: preset or config name.
        num_layers: attention layers per forward.
        num_q_heads / num_kv_heads / head_dim: per rank (attention TP 1).
        window_left_per_layer: tuple of length ``num_layers``; ``-1`` = full attention layer.
        has_sinks: per-head fp32 sink logits in every layer (GPT-OSS).
        page_size: default KV page size in tokens (GPT-OSS runs with 64 in SGLang's TRT-LLM backend).
        window_rule: for a model read from a config.json, which rule decided the windowed layers (one
            line, see :mod:`cpbench.domain.hf_config`); empty for a preset.
        layer_rule: that rule as data, re-applied at another layer count (:func:`layers_by_rule`); empty for
            a preset (its pattern is tiled).
        hidden_size: the residual stream width (HF ``hidden_size``); 0 when unknown (no rest-of-layer work).
        intermediate_size: a dense MLP's width (whole model, before any split); 0 for a MoE model.
        num_experts / num_experts_per_tok / moe_intermediate_size: a MoE's experts (HF
            ``num_local_experts`` or ``num_experts``), top-k, and one expert's width; 0 for a dense model.
        attention_bias: the QKV and O projections carry a bias (gpt-oss).
        weights_note: a checkpoint format torch cannot run here, e.g. ``"MXFP4 experts"`` (the stand-in
            runs the activation dtype; the report says what that means); empty otherwise.
    """

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    window_left_per_layer: tuple[int, ...]
    has_sinks: bool
    page_size: int = 64
    window_rule: str = ""
    layer_rule: tuple = ()
    hidden_size: int = 0
    intermediate_size: int = 0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    attention_bias: bool = False
    weights_note: str = ""

    @property
    def is_moe(self) -> bool:
        """True when the MLP is a mixture of experts (``num_experts > 0``)."""
        return self.num_experts > 0

    @property
    def sliding_window(self) -> int | None:
        """Window size in tokens of the sliding layers (``window_left + 1``), None if all are full."""
        w = [x for x in self.window_left_per_layer if x >= 0]
        return w[0] + 1 if w else None

    @property
    def layer_kinds(self) -> list[int]:
        """Distinct ``window_left`` values in first-seen layer order (e.g. ``[127, -1]``)."""
        return list(dict.fromkeys(self.window_left_per_layer))

    def last_layer(self, window_left: int) -> int:
        """Index of the last layer with this ``window_left`` (whose output a forward leaves behind)."""
        return max(i for i, w in enumerate(self.window_left_per_layer) if w == window_left)



def _alternating(num_layers: int, window_left: int) -> tuple[int, ...]:
    # GPT-OSS layer_types: sliding_attention, full_attention, sliding_attention, ...
    return tuple(window_left if i % 2 == 0 else -1 for i in range(num_layers))


# the rest of each layer, from each model's config.json (hidden_size, MLP / MoE sizes, attention bias)
_GPT_OSS_MLP = dict(hidden_size=2880, moe_intermediate_size=2880, num_experts_per_tok=4, attention_bias=True,
                    weights_note="MXFP4 experts")
PRESETS: dict[str, ModelSpec] = {
    "gpt-oss-120b": ModelSpec("gpt-oss-120b", 36, 64, 8, 64, _alternating(36, 127), True, 64,
                              num_experts=128, **_GPT_OSS_MLP),
    "gpt-oss-20b": ModelSpec("gpt-oss-20b", 24, 64, 8, 64, _alternating(24, 127), True, 64,
                             num_experts=32, **_GPT_OSS_MLP),
    "qwen3-30b-a3b": ModelSpec("qwen3-30b-a3b", 48, 32, 4, 128, (-1,) * 48, False, 64, hidden_size=2048,
                               num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768),
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 32, 32, 8, 128, (-1,) * 32, False, 64, hidden_size=4096,
                              intermediate_size=14336),
}


def get_preset(name: str) -> ModelSpec:
    """Look up a preset by name. Raises CpbenchInputError for an unknown name, listing the presets."""
    try:
        return PRESETS[name]
    except KeyError:
        raise CpbenchInputError(
            f"unknown model {name!r}: use one of {', '.join(PRESETS)} or --model-config PATH") from None


def check_page_size(page_size: int) -> int:
    """Return ``page_size`` if it is a power of two in 1..256, else raise CpbenchInputError."""
    if page_size not in SUPPORTED_PAGE_SIZES:
        raise CpbenchInputError(
            f"page size {page_size} is not a power of two in 1..256: use e.g. 16, 32 or 64")
    return page_size


SHAPE_FIELDS = ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "window_left_per_layer", "has_sinks")


def shape_tag(spec: ModelSpec) -> str:
    """The attention shape in a name: ``L36-q64-kv8-d64-w128x18-sinks`` (layers, q heads, kv heads, head_dim,
    sliding window x windowed layers or ``full``, sinks)."""
    wl = spec.window_left_per_layer
    slide = [w for w in wl if w >= 0]
    win = f"w{slide[0] + 1}x{len(slide)}" if slide else "full"
    return (f"L{spec.num_layers}-q{spec.num_q_heads}-kv{spec.num_kv_heads}-d{spec.head_dim}-{win}"
            + ("-sinks" if spec.has_sinks else ""))


def shape_difference(a: dict, b: dict) -> str:
    """How two models (``dataclasses.asdict`` of ModelSpec, as a manifest records them) differ in shape,
    e.g. ``"num_q_heads 4 vs 32"``; "" when the shapes match (fields missing from either are skipped)."""
    diffs = []
    for f in SHAPE_FIELDS:
        if f in a and f in b:
            x, y = a[f], b[f]
            if f == "window_left_per_layer":
                x, y = tuple(x or ()), tuple(y or ())
                if x != y:
                    diffs.append("the windowed layers")
                continue
            if x != y:
                diffs.append(f"{f} {x} vs {y}")
    return ", ".join(diffs)


def with_overrides(spec: ModelSpec, *, layers: int | None = None, heads: int | None = None,
                   kv_heads: int | None = None, head_dim: int | None = None, window: int | None = None,
                   sinks: bool | None = None, page_size: int | None = None) -> ModelSpec:
    """Apply CLI overrides. ``window`` is the sliding window in tokens (0 = make every layer full);
    a model without sliding layers gets GPT-OSS's alternating pattern when a window is given.
    A new layer count applies a config's own rule (``layer_rule``: Gemma-3's period, Qwen2's leading full
    layers, ...; :func:`layers_by_rule`) and tiles a preset's pattern (alternating or uniform).

    Raises:
        CpbenchInputError: non-positive or absurdly large sizes, q heads not a multiple of kv heads, bad
            page size.
    """
    for flag, value, top in (("--layers", layers, 1024), ("--heads", heads, 4096), ("--kv-heads", kv_heads, 4096),
                             ("--head-dim", head_dim, 4096), ("--window", window, 2**31 - 1)):
        if value is not None and value > top:
            raise CpbenchInputError(f"{flag} must be <= {top}, got {value}")
        if value is not None and value < 1 and flag != "--window":
            raise CpbenchInputError(f"{flag} must be >= 1, got {value}")
    out = spec
    if layers is not None:
        if layers < 1:
            raise CpbenchInputError(f"--layers must be >= 1, got {layers}")
        pattern = spec.window_left_per_layer
        wl = (pattern if layers == spec.num_layers else layers_by_rule(spec.layer_rule, layers) if spec.layer_rule
              else tuple(pattern[i % len(pattern)] for i in range(layers)))
        out = replace(out, num_layers=layers, window_left_per_layer=wl)
    if heads is not None:
        out = replace(out, num_q_heads=heads)
    if kv_heads is not None:
        out = replace(out, num_kv_heads=kv_heads)
    if head_dim is not None:
        out = replace(out, head_dim=head_dim)
    if window is not None:
        if window < 0:
            raise CpbenchInputError(f"--window must be >= 0 tokens (0 = full attention), got {window}")
        if window == 0:
            wl = (-1,) * out.num_layers
        elif any(x >= 0 for x in out.window_left_per_layer):
            wl = tuple(window - 1 if x >= 0 else -1 for x in out.window_left_per_layer)
        else:
            wl = _alternating(out.num_layers, window - 1)
        out = replace(out, window_left_per_layer=wl)
    if sinks is not None:
        out = replace(out, has_sinks=sinks)
    if out.window_rule and out.window_left_per_layer != spec.window_left_per_layer:
        kinds = out.layer_kinds
        out = replace(out, window_rule=f"{spec.window_rule}; after --layers/--window: "
                      f"{sum(x >= 0 for x in out.window_left_per_layer)} of {out.num_layers} layers windowed"
                      + (f" (window_left {max(kinds)})" if max(kinds) >= 0 else ""))
    if page_size is not None:
        out = replace(out, page_size=check_page_size(page_size))
    return checked(replace(out, name=spec.name + _override_tag(spec, out)))


def layers_by_rule(rule, n: int) -> tuple[int, ...]:
    """``window_left`` of each of ``n`` layers by a config's rule (``ModelSpec.layer_rule``, from
    :func:`cpbench.domain.hf_config.rule_of`): a period N (layer i full when ``i % N == N - 1``), K leading full
    layers (Qwen2's ``max_window_layers``), a repeating ``layer_types`` unit, or every layer alike.

    Raises:
        CpbenchInputError: an explicit ``layer_types`` list without a repeating unit asked for another count
            (what its extra layers would be is not in the config).
    """
    kind = rule[0]
    if kind == "period":
        p, wl = rule[1], rule[2]
        return tuple(-1 if i % p == p - 1 else wl for i in range(n))
    if kind == "leading_full":
        k, wl = rule[1], rule[2]
        return tuple(-1 if i < k else wl for i in range(n))
    if kind == "pattern":
        unit = tuple(rule[1])
        return tuple(unit[i % len(unit)] for i in range(n))
    if kind == "uniform":
        return (rule[1],) * n
    raise CpbenchInputError(f"--layers {n}: the config's layer_types lists {rule[1]} layers with no repeating "
                            f"pattern, so which of {n} layers slide is not in it: use --layers {rule[1]}, or edit "
                            "layer_types to the count you want")


def _override_tag(spec: ModelSpec, out: ModelSpec) -> str:
    """``+layers4+heads8+kv2+hd16+window4096+nosinks+page16``: what differs from ``spec``, so results of an
    overridden model never share a name (and a compare row key) with the preset's."""
    tag = ""
    for short, key in (("layers", "num_layers"), ("heads", "num_q_heads"), ("kv", "num_kv_heads"),
                       ("hd", "head_dim")):
        if getattr(out, key) != getattr(spec, key):
            tag += f"+{short}{getattr(out, key)}"
    if out.sliding_window != spec.sliding_window:
        tag += f"+window{out.sliding_window}" if out.sliding_window else "+full"
    if out.has_sinks != spec.has_sinks:
        tag += "+sinks" if out.has_sinks else "+nosinks"
    if out.page_size != spec.page_size:
        tag += f"+page{out.page_size}"
    return tag


MAX_SIZES = {"num_layers": 1024, "num_q_heads": 4096, "num_kv_heads": 4096, "head_dim": 4096}


def checked(spec: ModelSpec) -> ModelSpec:
    """``spec`` if its layer and head counts and head_dim are in ``[1, MAX_SIZES[key]]`` (the bounds the
    CLI overrides use) and q heads are a multiple of kv heads (GQA), else CpbenchInputError."""
    for key, top in MAX_SIZES.items():
        if not 1 <= getattr(spec, key) <= top:
            raise CpbenchInputError(f"{key} must be in [1, {top}], got {getattr(spec, key)}: no model cpbench "
                                    "can measure has that size")
    if spec.num_q_heads % spec.num_kv_heads:
        raise CpbenchInputError(
            f"q heads ({spec.num_q_heads}) must be a multiple of kv heads ({spec.num_kv_heads}) for GQA")
    return spec
