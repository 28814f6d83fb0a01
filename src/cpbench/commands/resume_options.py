"""How a ``--resume`` refusal names what differs: the option a user gives for each manifest config key
that must stay fixed (:data:`~cpbench.results.schema.FIXED_ON_RESUME`, plus ``launch`` and ``world_size``),
never the internal field name."""

from __future__ import annotations

# config key -> the option as a user types it (a key whose value is shown after it)
FLAGS = {"launch": "--launch", "world_size": "--nproc-per-node", "backend": "--backend", "dtype": "--dtype",
         "seed": "--seed", "gather": "--gather", "fused_order": "--fused-order", "tp_size": "--tp",
         "prefix": "--prefix", "context_len": "--context-len", "prefix_hit": "--prefix-hit",
         "cp_min_extend": "--cp-min-extend", "cp_min_tokens": "--cp-min-tokens", "ep": "--ep",
         "layer_rest_us": "--layer-rest-us", "graph_buckets": "--graph-buckets", "passes": "--passes",
         "cp_sizes": "--cp", "bs_list": "--bs", "extend_len_list": "--extend-len", "extend_lens": "--extend-lens",
         "timings": "--timing", "modes": "--mode"}
# the options a sweep's planned request batches (config key ``batches``) come from
BATCH_OPTIONS = "--bs/--seq/--extend-lens/--lengths/--trace/--batches/--prefix-hit"
MODEL_OPTIONS = "--model/--model-config, --layers/--heads/--kv-heads/--head-dim/--window/--sinks/--page-size"
UNSET = {"context_len": "(default: the longest sequence)", "prefix_hit": "(none)", "ep": "(default: cp_size x tp)",
         "layer_rest_us": "(the model's own layer)", "extend_lens": "(none: a --bs x --extend-len grid)"}


def _short(value) -> str:
    """``value`` as an option's text (a list comma-joined, as typed), at most 80 characters."""
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _batches(value) -> str:
    if not isinstance(value, list):
        return "a --bs x --seq grid" if value is None else _short(value)
    n = len(value)
    requests = sum(len(b[0]) for b in value if isinstance(b, list) and b and isinstance(b[0], list))
    return f"{n} batch{'' if n == 1 else 'es'} of {requests} request{'' if requests == 1 else 's'} in all"


def _model(value, other) -> str:
    if not isinstance(value, dict):
        return f"model {_short(value)}"
    name = value.get("name")
    if isinstance(other, dict) and name == other.get("name"):  # same name, other shape (an edited config.json)
        field = next((k for k in value if k != "name" and value[k] != other.get(k)), None)
        if field is not None:
            return f"model {name} ({field} {_short(value[field])})"
    return f"model {_short(name)}"


def phrase(key: str, value, other=None) -> str:
    """What a sweep was (or would be) measured with for config ``key`` at ``value``, named by the option a
    user gives, e.g. ``--dtype bf16``, ``--no-check``, ``model llama-3.1-8b+layers2``; ``other`` is the
    value it is compared with (to tell two models of one name apart)."""
    if key == "check":
        return "--check" if value else "--no-check"
    if key == "swa_pool":
        return "--swa-pool" if value else "no --swa-pool"
    if key == "model":
        return _model(value, other)
    if key == "batches":
        return _batches(value)
    if key in FLAGS:
        shown = UNSET.get(key, "(none)") if value is None else _short(value)
        return f"{FLAGS[key]} {shown}"
    return f"{key} {_short(value)}"


def difference(key: str, old, new) -> str:
    """The middle of a ``--resume`` refusal for config ``key``: what the run was measured with and what
    this sweep would use, plus the options to look at where one value stands for several."""
    was, now = phrase(key, old, new), phrase(key, new, old)
    if key == "batches":
        return (f"was measured with other request batches ({was}; this sweep plans {now}), which come from "
                f"{BATCH_OPTIONS}")
    if key == "model":
        return f"was measured with {was}, not {now} (set by {MODEL_OPTIONS})"
    return f"was measured with {was}, not {now}"
