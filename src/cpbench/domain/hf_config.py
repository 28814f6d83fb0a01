"""Attention shapes from a local Hugging Face ``config.json``: which layers use a sliding window, and
which attention variants cpbench refuses because it does not model them.

Which layers slide, as Hugging Face transformers' config classes derive it (SGLang loads models through
the same config classes). The first rule that applies decides:

1. ``layer_types``: one entry per layer, ``sliding_attention`` or ``full_attention`` (GPT-OSS, Gemma-2/3,
   Cohere2 and Qwen2/3 configs written by recent transformers). It wins over every other key.
2. a period ``N`` (``sliding_window_pattern``, or ``_sliding_window_pattern`` as transformers keeps it
   internally): layer ``i`` is full when ``i % N == N - 1`` (transformers: ``(i + 1) % N == 0``),
   windowed otherwise. Without the key, ``model_type`` gemma3 / gemma3_text use transformers' default
   6, cohere2 4, and gemma2 / gpt_oss 2 (even layers windowed, odd layers full).
3. ``use_sliding_window`` (Qwen2, Qwen2-MoE, Qwen3): false makes every layer full whatever
   ``sliding_window`` says; true windows the layers ``i >= max_window_layers`` (the first
   ``max_window_layers`` stay full; the key is required, transformers' default of 28 is not assumed).
4. ``sliding_window`` alone (Mistral, Mixtral, Phi-3, Starcoder2): every layer windowed, as transformers
   applies it; ``--window 0`` makes every layer full.
5. no ``sliding_window`` (absent or null): every layer full.

A window of ``w`` tokens is ``window_left = w - 1`` (SGLang's get_attention_sliding_window_size). The rule
applied is returned in ``ModelSpec.window_rule`` (the sweep prints it and the manifest records it).

Refused (one line naming the key): multi-head latent attention (``kv_lora_rank``, ``q_lora_rank``,
``qk_rope_head_dim``, ``qk_nope_head_dim``; DeepSeek-V2/V3), a value head size other than the query/key
head size (``v_head_dim``), attention logit soft-capping (``attn_logit_softcapping``), chunked local
attention (``attention_chunk_size``), bidirectional attention (``use_bidirectional_attention``), hybrid
attention/state-space layer plans (``hybrid_override_pattern``, ``layers_block_type``, ``attn_type_list``,
``attn_layer_period``), any other ``layer_types`` entry, and contradictions between the keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from cpbench.domain.models import ModelSpec, checked
from cpbench.domain.jsonfile import read_json
from cpbench.errors import CpbenchInputError

REFUSED_KEYS = (
    ("kv_lora_rank", "multi-head latent attention (DeepSeek-V2/V3 style)"),
    ("q_lora_rank", "multi-head latent attention (DeepSeek-V2/V3 style)"),
    ("qk_rope_head_dim", "multi-head latent attention (split rope/nope query-key heads)"),
    ("qk_nope_head_dim", "multi-head latent attention (split rope/nope query-key heads)"),
    ("attn_logit_softcapping", "attention logit soft-capping"),
    ("attention_chunk_size", "chunked local attention"),
    ("use_bidirectional_attention", "bidirectional (non-causal) attention"),
    ("hybrid_override_pattern", "a hybrid attention / state-space layer plan"),
    ("layers_block_type", "a hybrid attention / state-space layer plan"),
    ("attn_type_list", "a hybrid linear / softmax attention layer plan"),
    ("attn_layer_period", "a hybrid attention / state-space layer plan"),
)
DEFAULT_PERIOD = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4, "gemma2": 2, "gpt_oss": 2}
LAYER_TYPES = ("sliding_attention", "full_attention")


def _load(p: Path) -> dict:
    cfg = read_json(p, "model config")
    if not isinstance(cfg, dict):
        raise CpbenchInputError(f"model config {str(p)!r} is not a JSON object")
    cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg
    if not isinstance(cfg, dict):
        raise CpbenchInputError(f"model config {str(p)!r}: text_config is not a JSON object")
    return cfg


def _pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def refuse_unmodelled(cfg: dict, where: str, head_dim: int | None) -> None:
    """Raise CpbenchInputError naming the first key of an attention variant cpbench does not model
    (:data:`REFUSED_KEYS` set to anything but null/false/0, or ``v_head_dim`` != ``head_dim`` when the
    query/key head size ``head_dim`` is known)."""
    for key, what in REFUSED_KEYS:
        if cfg.get(key) not in (None, False, 0):
            raise CpbenchInputError(f"{where}: {key} = {json.dumps(cfg[key])[:40]} means {what}, which cpbench "
                                    "does not model (it measures causal softmax attention with GQA heads)")
    v = cfg.get("v_head_dim")
    if v is not None and head_dim is not None and v != head_dim:
        raise CpbenchInputError(f"{where}: v_head_dim {v} differs from the query/key head_dim {head_dim}; cpbench "
                                "models one head size for q, k and v")


def _period(cfg: dict, where: str) -> tuple[int | None, str]:
    """The layer period N and where it came from ('' when no period applies)."""
    given = {k: cfg[k] for k in ("sliding_window_pattern", "_sliding_window_pattern") if cfg.get(k) is not None}
    if len(set(map(json.dumps, given.values()))) > 1:
        raise CpbenchInputError(f"{where}: sliding_window_pattern and _sliding_window_pattern disagree "
                                f"({given}): keep one")
    for key, n in given.items():
        if not _pos_int(n):
            raise CpbenchInputError(f"{where}: {key} must be a positive integer, got {json.dumps(n)[:40]}")
        return n, key
    mt = cfg.get("model_type")
    if mt in DEFAULT_PERIOD:
        return DEFAULT_PERIOD[mt], f"model_type {mt} (transformers' default period)"
    return None, ""


def rule_of(cfg: dict, types: list[str], window: int | None, where: str) -> tuple:
    """The rule that made ``types`` (:func:`layer_types_of`), as data a different ``--layers`` re-applies
    (:func:`cpbench.domain.models.layers_by_rule`): ``("period", N, window_left)``, ``("leading_full", K,
    window_left)``, ``("uniform", window_left)``, or for an explicit ``layer_types`` list its shortest unit that
    repeats at least twice (``("pattern", unit)``), or ``("explicit", len)`` when none does (another count is
    refused)."""
    wl = window - 1 if window is not None else -1
    if cfg.get("layer_types") is not None:
        n = len(types)
        p = next(p for p in range(1, n + 1) if all(types[i] == types[i % p] for i in range(n)))
        if 2 * p > n and n > 1:  # no unit seen twice: what further layers would be is not in the list
            return ("explicit", n)
        unit = tuple(wl if t == "sliding_attention" else -1 for t in types[:p])
        return ("pattern", unit)
    period, _ = _period(cfg, where)
    use = cfg.get("use_sliding_window")
    if period is not None and use is None:
        return ("period", period, wl)
    if use:
        return ("leading_full", cfg["max_window_layers"], wl)
    return ("uniform", wl if (use is None and window is not None) else -1)


def layer_types_of(cfg: dict, layers: int, window: int | None, where: str) -> tuple[list[str], str]:
    """Each layer's type (``sliding_attention`` / ``full_attention``) and the rule that gave it (see the
    module docstring). Raises CpbenchInputError for what cpbench cannot tell."""
    types = cfg.get("layer_types")
    use = cfg.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        raise CpbenchInputError(f"{where}: use_sliding_window must be true or false, got {json.dumps(use)[:40]}")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise CpbenchInputError(f"{where}: layer_types must list {layers} layer types")
        other = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if other:
            raise CpbenchInputError(f"{where}: layer_types holds {', '.join(other)}, which cpbench does not "
                                    "model (only sliding_attention and full_attention)")
        if use is False and "sliding_attention" in types:
            raise CpbenchInputError(f"{where}: layer_types has sliding_attention layers but use_sliding_window is "
                                    "false; cpbench cannot tell which is meant: fix one of them")
        return types, "layer_types"
    period, source = _period(cfg, where)
    if period is not None and use is None:
        types = ["full_attention" if i % period == period - 1 else "sliding_attention" for i in range(layers)]
        return types, f"period {period} from {source} (layer i full when i % {period} == {period - 1})"
    if use is not None:
        if not use:
            return ["full_attention"] * layers, "use_sliding_window false (Qwen2 rule; sliding_window not used)"
        first = cfg.get("max_window_layers")
        if not (isinstance(first, int) and not isinstance(first, bool) and first >= 0):
            raise CpbenchInputError(f"{where}: use_sliding_window is true but max_window_layers (the number of "
                                    "leading full layers) is missing or not an integer >= 0: add it")
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
        return types, f"use_sliding_window true, max_window_layers {first} (Qwen2 rule: layers >= {first} windowed)"
    if window is not None:
        return (["sliding_attention"] * layers, "sliding_window without use_sliding_window or a layer pattern "
                "(Mistral rule, as transformers applies it): every layer windowed; --window 0 makes every layer full")
    return ["full_attention"] * layers, "no sliding_window"


def from_hf_config(path: str | Path) -> ModelSpec:
    """Read attention shapes from a local Hugging Face ``config.json`` (never downloads).

    Reads num_hidden_layers, num_attention_heads, num_key_value_heads (default: = heads), head_dim (default:
    hidden_size // heads, said in ``window_rule``), sliding_window and the layer conventions of the module
    docstring (window layers get ``window_left = sliding_window - 1``). Sinks: ``model_type == "gpt_oss"``.
    A ``text_config`` object is read when the top level has no num_hidden_layers (multimodal configs).

    Raises:
        CpbenchInputError: unreadable file, invalid JSON, a required field missing or invalid, an attention
            variant cpbench does not model (the key named), or layer keys that contradict each other.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    cfg = _load(p)
    where = f"model config {str(p)!r}"

    def need(key: str) -> int:
        v = cfg.get(key)
        if not _pos_int(v):
            raise CpbenchInputError(f"{where} lacks a positive integer {key!r}")
        return v

    layers, heads = need("num_hidden_layers"), need("num_attention_heads")
    kv_heads = need("num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    head_dim = need("head_dim") if cfg.get("head_dim") is not None else None
    hidden = cfg.get("hidden_size")
    refuse_unmodelled(cfg, where, head_dim if head_dim is not None else
                      hidden // heads if _pos_int(hidden) and hidden % heads == 0 else None)
    derived = ""
    if head_dim is None:
        if need("hidden_size") % heads:
            raise CpbenchInputError(f"{where}: hidden_size is not a multiple of num_attention_heads and head_dim "
                                    "is missing: add head_dim")
        head_dim = cfg["hidden_size"] // heads
        derived = f"; head_dim {head_dim} = hidden_size / num_attention_heads (no head_dim key)"
    window = cfg.get("sliding_window")
    if window is not None and not _pos_int(window):
        raise CpbenchInputError(f"{where}: sliding_window must be a positive integer or null")
    types, rule = layer_types_of(cfg, layers, window, where)
    layer_rule = rule_of(cfg, types, window, where)
    n_slide = types.count("sliding_attention")
    if n_slide and window is None:
        raise CpbenchInputError(f"{where} has sliding layers ({rule}) but no sliding_window: add sliding_window")
    wl = tuple(window - 1 if t == "sliding_attention" else -1 for t in types)
    counts = (f"{n_slide} of {layers} layers windowed (sliding_window {window} -> window_left {window - 1})"
              if n_slide else f"all {layers} layers full")
    name = cfg.get("_name_or_path") or cfg.get("model_type") or p.parent.name or "config"
    spec = ModelSpec(str(name), layers, heads, int(kv_heads), int(head_dim), wl, cfg.get("model_type") == "gpt_oss",
                     64, window_rule=f"{rule}; {counts}{derived}", layer_rule=layer_rule, **mlp_fields(cfg, where))
    return checked(spec)


def mlp_fields(cfg: dict, where: str) -> dict:
    """The rest-of-layer fields of a config (:class:`ModelSpec`): ``hidden_size``; a MoE's experts
    (``num_local_experts`` or ``num_experts``), ``num_experts_per_tok`` and one expert's width
    (``moe_intermediate_size``, else ``intermediate_size``: gpt-oss names it so); or a dense MLP's
    ``intermediate_size``; ``attention_bias``; MXFP4 experts named in ``weights_note`` (``quantization_config``).
    Experts may be named ``num_local_experts``, ``num_experts`` or ``n_routed_experts`` (DeepSeek). A field
    absent leaves 0 (the model then has no rest-of-layer work to time; ``--timing breakable`` says which).
    Raises CpbenchInputError for a present field that is not a positive integer."""
    out: dict = {}
    for key in ("hidden_size", "intermediate_size", "moe_intermediate_size", "num_local_experts", "num_experts",
                "n_routed_experts", "num_experts_per_tok"):
        v = cfg.get(key)
        if v is not None and not _pos_int(v):
            raise CpbenchInputError(f"{where}: {key} must be a positive integer, got {v!r}")
    out["hidden_size"] = cfg.get("hidden_size") or 0
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if experts:  # a missing top-k is named by --timing breakable only (spec.layer_rest.missing_rest_fields)
        out.update(num_experts=experts, num_experts_per_tok=cfg.get("num_experts_per_tok") or 0,
                   moe_intermediate_size=cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    else:
        out["intermediate_size"] = cfg.get("intermediate_size") or 0
    out["attention_bias"] = bool(cfg.get("attention_bias", False))
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and str(quant.get("quant_method", "")).lower() == "mxfp4":
        out["weights_note"] = "MXFP4 experts" if experts else "MXFP4 weights"
    return out
