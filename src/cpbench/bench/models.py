"""Model attention shapes per CP rank (attention TP 1): presets, overrides and local HF config.json.

Presets are docs/design.md §2. ``window_left`` follows FlashInfer/SGLang: a sliding window of ``w`` tokens
is ``window_left = w - 1`` (SGLang get_attention_sliding_window_size); ``-1`` means full attention.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

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
    """

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    window_left_per_layer: tuple[int, ...]
    has_sinks: bool
    page_size: int = 64

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


PRESETS: dict[str, ModelSpec] = {
    "gpt-oss-120b": ModelSpec("gpt-oss-120b", 36, 64, 8, 64, _alternating(36, 127), True, 64),
    "gpt-oss-20b": ModelSpec("gpt-oss-20b", 24, 64, 8, 64, _alternating(24, 127), True, 64),
    "qwen3-30b-a3b": ModelSpec("qwen3-30b-a3b", 48, 32, 4, 128, (-1,) * 48, False, 64),
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 32, 32, 8, 128, (-1,) * 32, False, 64),
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


def from_hf_config(path: str | Path) -> ModelSpec:
    """Read attention shapes from a local Hugging Face ``config.json`` (never downloads).

    Reads num_hidden_layers, num_attention_heads, num_key_value_heads (default: = heads), head_dim
    (default: hidden_size // heads), sliding_window and layer_types ("sliding_attention" layers get
    ``window_left = sliding_window - 1``; without layer_types every layer slides if
    ``use_sliding_window`` is true and ``sliding_window`` is set). Sinks: ``model_type == "gpt_oss"``.

    Raises:
        CpbenchInputError: unreadable file, invalid JSON, or a required field missing/invalid.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text())
    except OSError as e:
        raise CpbenchInputError(f"cannot read model config {str(p)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CpbenchInputError(f"model config {str(p)!r} is not UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise CpbenchInputError(f"model config {str(p)!r} is not valid JSON (line {e.lineno})") from None
    if not isinstance(cfg, dict):
        raise CpbenchInputError(f"model config {str(p)!r} is not a JSON object")
    cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg
    if not isinstance(cfg, dict):
        raise CpbenchInputError(f"model config {str(p)!r}: text_config is not a JSON object")

    def need(key: str) -> int:
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CpbenchInputError(f"model config {str(p)!r} lacks a positive integer {key!r}")
        return v

    layers, heads = need("num_hidden_layers"), need("num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if need("hidden_size") % heads:
            raise CpbenchInputError(f"model config {str(p)!r}: hidden_size is not a multiple of "
                                    "num_attention_heads and head_dim is missing: add head_dim")
        head_dim = cfg["hidden_size"] // heads
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != layers):
        raise CpbenchInputError(f"model config {str(p)!r}: layer_types must list {layers} layer types")
    if types is not None and not set(types) <= {"sliding_attention", "full_attention"}:
        raise CpbenchInputError(f"model config {str(p)!r}: layer_types may hold only sliding_attention and "
                                f"full_attention, got {sorted(set(map(str, types)))}")
    if window is not None and not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
        raise CpbenchInputError(f"model config {str(p)!r}: sliding_window must be a positive integer or null")
    if types is None:
        slides = bool(window) and bool(cfg.get("use_sliding_window", False))
        types = ["sliding_attention" if slides else "full_attention"] * layers
    if any(t == "sliding_attention" for t in types) and not (isinstance(window, int) and window > 0):
        raise CpbenchInputError(f"model config {str(p)!r} has sliding layers but no sliding_window")
    wl = tuple(window - 1 if t == "sliding_attention" else -1 for t in types)
    name = cfg.get("_name_or_path") or cfg.get("model_type") or p.parent.name or "config"
    spec = ModelSpec(str(name), layers, heads, int(kv_heads), int(head_dim), wl,
                     cfg.get("model_type") == "gpt_oss", 64)
    return _checked(spec)


def with_overrides(spec: ModelSpec, *, layers: int | None = None, heads: int | None = None,
                   kv_heads: int | None = None, head_dim: int | None = None, window: int | None = None,
                   sinks: bool | None = None, page_size: int | None = None) -> ModelSpec:
    """Apply CLI overrides. ``window`` is the sliding window in tokens (0 = make every layer full);
    a model without sliding layers gets GPT-OSS's alternating pattern when a window is given.
    A new layer count keeps the pattern (alternating or uniform).

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
        out = replace(out, num_layers=layers,
                      window_left_per_layer=tuple(pattern[i % len(pattern)] for i in range(layers)))
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
    if page_size is not None:
        out = replace(out, page_size=check_page_size(page_size))
    return _checked(replace(out, name=spec.name + _override_tag(spec, out)))


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


def _checked(spec: ModelSpec) -> ModelSpec:
    for key in ("num_q_heads", "num_kv_heads", "head_dim"):
        if getattr(spec, key) < 1:
            raise CpbenchInputError(f"{key} must be >= 1, got {getattr(spec, key)}")
    if spec.num_q_heads % spec.num_kv_heads:
        raise CpbenchInputError(
            f"q heads ({spec.num_q_heads}) must be a multiple of kv heads ({spec.num_kv_heads}) for GQA")
    return spec
