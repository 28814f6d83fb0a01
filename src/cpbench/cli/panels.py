"""``cpbench sweep --help`` in panels, and the config file that holds the options a first run does not need.

The help lists a command's options in titled sections (click's plain help: ``Command.format_options`` in
cli/app.py reads :data:`PANELS`), the options a first run needs first. Any option can also come from a TOML file
(``--config FILE``: its keys are the options' long names, with ``-`` or ``_``) or from ``--set name=value``
(repeatable); what the command line gives wins over ``--set``, which wins over the file. Both become click's
``default_map``, so every option keeps its own checks and messages.
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from cpbench.errors import CpbenchInputError

# command -> (panel title, parameter names): the order and grouping of its --help. A parameter in no panel is
# listed last, under "Other options".
PANELS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "sweep": (
        ("First run", ("cp", "bs", "extend_len", "model", "backend", "mode", "timing", "device", "out", "config",
                       "set_")),
        ("Workload: lengths, prefixes, mixes", ("extend_lens", "seq", "seq_lens", "prefix", "prefix_hit", "lengths",
                                                "trace", "batches", "max_prefill_tokens", "cp_min_extend",
                                                "cp_min_tokens", "ranks", "context_len", "seed")),
        ("Model shape", ("model_config", "layers", "heads", "kv_heads", "head_dim", "window", "sinks", "page_size",
                         "tp", "dtype")),
        ("Breakable forward (--timing breakable)", ("forward_layers", "ep", "layer_rest_us", "graph_buckets")),
        ("Timing", ("passes", "budget_ms", "rel_ci", "warmup", "cpu_affinity")),
        ("Fused call and page tables", ("fused_order", "swa_pool")),
        ("Real ranks (--launch torchrun)", ("launch", "nproc_per_node", "gather", "dist_backend", "dist_timeout")),
        ("Checks, output, resuming", ("check", "allow_mismatch", "keep_going", "profile", "report", "nvtx",
                                      "resume")),
    ),
}
CONFIG_OPTIONS = ("--config", "--set")  # read before click parses (they fill the defaults of the others)


def defaults_from(args: list[str], params: dict[str, object], command: str) -> dict[str, object]:
    """The ``default_map`` that ``--config FILE`` and ``--set name=value`` in ``args`` give (empty without them).

    Args:
        args: the command line after the command's name.
        params: ``parameter name -> its click parameter`` (names as click has them: ``extend_len``).
    Returns:
        ``parameter name -> value``: TOML values as they are, a list joined with commas (``bs = [1, 4, 16]`` is
        ``--bs 1,4,16``), ``--set`` values as text for click to convert.
    Raises:
        CpbenchInputError: the file is missing or not TOML, a key or a ``--set`` names no option of ``command``
            (the closest names in the message), a ``--set`` lacks ``=``, or a value is a table.
    """
    files, sets = [], []
    for i, a in enumerate(args):
        for opt, into in (("--config", files), ("--set", sets)):
            if a == opt and i + 1 < len(args):
                into.append(args[i + 1])
            elif a.startswith(opt + "="):
                into.append(a.split("=", 1)[1])
    out: dict[str, object] = {}
    for f in files:
        path = Path(f)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise CpbenchInputError(f"--config {f}: cannot read it ({e.strerror or e}): give a TOML file") from None
        except tomllib.TOMLDecodeError as e:
            raise CpbenchInputError(f"--config {f}: not TOML ({e}): write one option per line, e.g. bs = [1, 4]") \
                from None
        for key, value in data.items():
            out[_name(key, params, command, f"--config {f}")] = _value(key, value, f"--config {f}")
    for s in sets:
        if "=" not in s:
            raise CpbenchInputError(f"--set {s}: write name=value, e.g. --set budget-ms=400")
        key, value = s.split("=", 1)
        out[_name(key.strip(), params, command, f"--set {s}")] = value.strip()
    return out


def _name(key: str, params: dict[str, object], command: str, where: str) -> str:
    name = key.lstrip("-").replace("-", "_")
    if name in ("config", "set", "set_") or name not in params:
        known = sorted(n.replace("_", "-") for n in params if n not in ("config", "set_"))
        close = difflib.get_close_matches(key.lstrip("-").replace("_", "-"), known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise CpbenchInputError(f"{where}: {key!r} is not an option of cpbench {command}{hint}: "
                                f"`cpbench {command} --help` lists them")
    return name


def _value(key: str, value: object, where: str) -> object:
    if isinstance(value, dict):
        raise CpbenchInputError(f"{where}: {key} is a table; give each option as name = value at the top level")
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value
