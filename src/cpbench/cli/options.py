"""Options, parsers and consoles shared by the cpbench commands (typer/rich live only in cli*)."""

from __future__ import annotations

import codecs
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cpbench.domain.limits import LIMITS, MAX_TOKENS, check_ints  # list options' bounds, cpbench.grid's too
from cpbench.kernels.backends import registry
from cpbench.kernels.backends.registry import CHOICES as BACKEND_CHOICES  # for --help texts
from cpbench.errors import CpbenchInputError

# What a console without the character shows instead (the rest becomes "?")
ASCII_FOR = str.maketrans({"→": "->", "←": "<-", "×": "x", "≈": "~", "µ": "u", "—": "-", "–": "-", "…": "...",
                           "≥": ">=", "≤": "<=", "±": "+-", "·": "-", "━": "-", "─": "-", "│": "|", "┃": "|",
                           "•": "*", "≠": "!=", "Δ": "delta "})


def _spell_in_ascii(e: UnicodeError) -> tuple[str, int]:
    """Codec error handler ``cpbench-ascii``: a character the console's encoding lacks is spelled in ASCII
    (``->`` for ``→``), or ``?``."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    text = e.object[e.start:e.end].translate(ASCII_FOR)
    return "".join(c if ord(c) < 128 else "?" for c in text), e.end


codecs.register_error("cpbench-ascii", _spell_in_ascii)


def degrade_console() -> None:
    """Let stdout and stderr write any text whatever their encoding (LANG=C, latin-1,
    PYTHONIOENCODING=ascii): characters they lack are spelled in ASCII instead of raising."""
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if enc not in ("utf8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="cpbench-ascii")
            except (ValueError, OSError):
                pass


def _null_stream():
    """One text stream onto os.devnull, opened on first use (for a standard stream the process lacks)."""
    global _NULL
    if _NULL is None:
        _NULL = open(os.devnull, "w", encoding="utf-8")
    return _NULL


_NULL = None


class PipeSafe:
    """A text stream that writes to ``sys.stdout`` (or ``sys.stderr``) as it is *now* (tests swap them) and,
    once the reader has gone (``cpbench sweep | head -1``: BrokenPipeError), drops what follows instead of
    failing: the run goes on and writes its directory, and the exit code keeps its meaning. The file
    descriptor is pointed at /dev/null so the interpreter's last flush does not fail either."""

    def __init__(self, name: str) -> None:
        self.name, self.broken = name, False

    @property
    def stream(self):
        """The stream as it is now (``cli.app.entry`` replaces one the process was started without)."""
        return getattr(sys, self.name) or _null_stream()

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self.closed_by_reader()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self.closed_by_reader()

    def closed_by_reader(self) -> None:
        """Stop writing; send anything still buffered for this descriptor to /dev/null."""
        self.broken = True
        silence(self.stream)

    def isatty(self) -> bool:
        return not self.broken and self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def __getattr__(self, name):  # encoding, errors, ...
        return getattr(self.stream, name)


def silence(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null (after its reader closed the pipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, AttributeError):  # no real descriptor (captured in a test)
        pass


console = Console(file=PipeSafe("stdout"))
if not console.is_terminal and not os.environ.get("COLUMNS"):  # piped or captured: do not squeeze tables
    console.width = 160                                        # into 80 columns (COLUMNS, when set, wins)
err_console = Console(file=PipeSafe("stderr"))




def typed(*names: str) -> str:
    """Which of an option's names (``"--extend-len", "--seq"``) the command line used: the last one given,
    else the first (so a message names the option as the user typed it)."""
    found = names[0]
    for arg in sys.argv[1:]:
        name = arg.split("=", 1)[0]
        if name in names:
            found = name
    return found


# Options whose one value is a comma-separated list (int_list, choice_list, parse_cpu_list parse it), per command,
# by click parameter name (every name of the option: --ranks and --rank, --extend-len and --seq). A repeated one is
# refused with the list that gives every value at once; any other option (--out, --model, profile's one --backend,
# explain's one cell) is refused without it, as its values cannot be joined.
LIST_OPTIONS: dict[str, frozenset[str]] = {
    "sweep": frozenset({"cp", "bs", "extend_len", "seq", "extend_lens", "seq_lens", "ranks", "mode", "backend",
                        "timing", "graph_buckets", "cpu_affinity"}),
    "profile": frozenset({"cp", "bs", "extend_len", "seq", "extend_lens", "seq_lens", "ranks"}),
    "explain": frozenset({"extend_lens", "seq_lens"}),
    "geometry": frozenset({"extend", "prefix", "rank"}),
}


def refuse_repeated(params, args: list[str], command: str = "") -> None:
    """Refuse an option that takes one value given more than once in ``args`` (one command's arguments, before
    click parses them; ``params``: the command's click parameters; ``command``: its name). click would keep the
    last value silently (``--extend-len 64 --extend-len 32`` measured 32 alone). Every option that takes a value
    and is not declared multi-valued (``multiple``) is checked, under any of its names; flags may repeat; ``--``
    ends the options.

    Raises:
        CpbenchInputError: naming the option and every value given, and, for an option of ``command`` in
            :data:`LIST_OPTIONS`, the comma-separated list that gives several values at once.
    """
    takes_value = {name: p for p in params if getattr(p, "param_type_name", "") == "option" and not p.is_flag
                   and not p.count for name in p.opts + p.secondary_opts}  # (typer may vendor click: no isinstance)
    lists = LIST_OPTIONS.get(command, frozenset())
    given: dict[str, list[tuple[str, str]]] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        name, eq, value = args[i].partition("=")
        param = takes_value.get(name)
        if param is not None and not eq:  # ``--cp 2``: the next argument is the value, whatever it looks like
            if i + 1 >= len(args):
                break  # click says the value is missing
            value, i = args[i + 1], i + 1
        if param is not None and not param.multiple and param.nargs == 1:
            given.setdefault(param.name, []).append((name, value))
        i += 1
    for param_name, uses in given.items():
        if len(uses) > 1:
            first = uses[0][0]
            named = len({n for n, _ in uses}) > 1  # given under two of its names: say which
            values = ", then ".join(f"{n} {v}" if named else v for n, v in uses)
            times = "twice" if len(uses) == 2 else f"{len(uses)} times"
            tail = (f", several values as one comma-separated list: {first} {','.join(v for _, v in uses)}"
                    if param_name in lists else "")
            raise CpbenchInputError(f"{first} given {times} ({values}): only one would count; give it once{tail}")


def int_list(text: str, what: str, minimum: int = 1) -> list[int]:
    """Parse ``"1,4,16"`` into ints in ``[minimum, LIMITS[what]]`` (at most 65536 of them); raise
    CpbenchInputError naming the option."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise CpbenchInputError(f"{what} is empty: give a comma-separated list such as 1,4,16")
    try:
        vals = [int(t) for t in items]
    except ValueError:
        raise CpbenchInputError(f"{what} must be comma-separated integers, got {text!r}") from None
    return check_ints(vals, what, minimum, LIMITS.get(what, 2**31 - 1))


# ------------------------------------------------------------------------------------------------
# shared options
# ------------------------------------------------------------------------------------------------
# --backend choices: "auto" + the registry's names (members auto, torch, flashinfer_fa2, fa3, trtllm_gen, ...).
BackendName = Enum("BackendName", {n.replace("-", "_"): n for n in BACKEND_CHOICES}, type=str)


class DType(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Model preset (see `cpbench models`); default gpt-oss-120b.")]
DEFAULT_MODEL = "gpt-oss-120b"
ModelConfigOpt = Annotated[Optional[Path], typer.Option(
    "--model-config", help="Local Hugging Face config.json (or its folder) instead of a preset.")]
LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Override: attention layers.")]
HeadsOpt = Annotated[Optional[int], typer.Option("--heads", help="Override: q heads per rank.")]
KvHeadsOpt = Annotated[Optional[int], typer.Option("--kv-heads", help="Override: kv heads per rank.")]
ExtendLensOpt = Annotated[Optional[str], typer.Option(
    "--extend-lens", help="One explicit batch, one extend length per request (SGLang extend_lens), "
                                       "instead of --bs x --extend-len, e.g. 3000,5000.")]
# the options' names before the extend-length rename: still read, not shown in --help
SeqAliasOpt = Annotated[Optional[str], typer.Option("--seq", hidden=True, help="Old name of --extend-len.")]
SeqLensAliasOpt = Annotated[Optional[str], typer.Option("--seq-lens", hidden=True, help="Old name of --extend-lens.")]


def renamed(value, old_value, name: str, old_name: str):
    """The value of option ``name`` given under it or under its old name ``old_name`` (hidden from --help).
    Raises CpbenchInputError when both are given."""
    if value is not None and old_value is not None:
        raise CpbenchInputError(f"{old_name} is the old name of {name}: give {name} once")
    return value if value is not None else old_value


PrefixLenOpt = Annotated[int, typer.Option("--prefix-len", "--prefix", help="Cached prefix tokens of every request.")]
HeadDimOpt = Annotated[Optional[int], typer.Option("--head-dim", help="Override: head_dim.")]
WindowOpt = Annotated[Optional[int], typer.Option(
    "--window", help="Override: sliding window in tokens (window_left = window-1); 0 = all layers full.")]
SinksOpt = Annotated[Optional[bool], typer.Option("--sinks/--no-sinks", help="Override: fp32 per-head sinks.")]
PageSizeOpt = Annotated[Optional[int], typer.Option("--page-size", help="KV page size in tokens (default: the model's, 64).")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="cuda, cuda:N or cpu (default: cuda if present).")]


def resolve_model(model: str, model_config: Optional[Path], layers, heads, kv_heads, head_dim, window,
                  sinks, page_size):
    from cpbench.domain.hf_config import from_hf_config
    from cpbench.domain.models import get_preset, with_overrides

    from dataclasses import replace

    from cpbench.domain.models import shape_tag

    if model is not None and model_config:
        raise CpbenchInputError(f"--model {model} and --model-config name two models: give one of them")
    spec = from_hf_config(model_config) if model_config else get_preset(model or DEFAULT_MODEL)
    base = spec.name
    spec = with_overrides(spec, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                          window=window, sinks=sinks, page_size=page_size)
    if model_config:  # a config names no unique model (model_type alone is shared): its shape does
        spec = replace(spec, name=f"{base}:{shape_tag(spec)}")
    if spec.window_rule and os.environ.get("RANK", "0") == "0":  # which layers slide, as read from the config (also in the manifest's config.model)
        typer.echo(f"note: model config {str(model_config)!r}: {spec.window_rule}", err=True)
    return spec


def resolve_device(device: Optional[str]):
    """The torch device for ``--device`` (see cpbench.measure.env.resolve_device)."""
    from cpbench.measure.env import resolve_device as resolve

    return resolve(device)


def backend_metavar(allowed: tuple[str, ...] = BACKEND_CHOICES) -> str:
    """How ``--help`` shows a one-backend ``--backend``: ``<auto|torch|...>``."""
    return "<" + "|".join(allowed) + ">"


def one_backend(text: str, command: str, allowed: tuple[str, ...] = BACKEND_CHOICES) -> str:
    """The ``--backend`` of a command that runs one backend (profile, explain), checked: one known name, or a
    ``pkg.mod:Class`` (checked when it is looked up). ``allowed`` are the choices the message names (the command
    may narrow a known name further itself).

    Raises CpbenchInputError: a list (``a,b``), or a name no backend has."""
    name = text.strip()
    if name in registry.CHOICES or (":" in name and "," not in name):
        return name
    choices = ", ".join(allowed)
    if "," in name:
        raise CpbenchInputError(f"cpbench {command} takes one --backend, got {text!r}: use one of {choices} "
                                "(run it once per backend)")
    raise CpbenchInputError(f"unknown --backend {text!r}: use one of {choices}")


def backend_list(text: str) -> list[str]:
    """``--backend`` of a sweep: ``"a,b"`` into names, each one of the registry's choices or a ``pkg.mod:Class``
    (checked when it is looked up), duplicates dropped. Raises CpbenchInputError naming the choices."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    choices = registry.CHOICES  # as the registry reads them now (BACKEND_CHOICES: when --help was built)
    if not items:
        choice_list(text, choices, "--backend", both=False)  # raises: the option is empty
    for t in items:
        if t not in choices and ":" not in t:
            raise CpbenchInputError(f"unknown --backend {t!r}: use {', '.join(choices)}, a comma-separated "
                                    "list of them, or pkg.module:ClassName for a class that is not registered")
    return list(dict.fromkeys(items))


def choice_list(text: str, allowed: tuple[str, ...], what: str, both: bool = True) -> list[str]:
    """Parse ``"a,b"`` (or, with ``both``, ``"both"`` for every allowed value) into a list of allowed
    choices, duplicates dropped.

    Raises CpbenchInputError naming every valid choice."""
    if both and text.strip() == "both":
        return list(allowed)
    items = [t.strip() for t in text.split(",") if t.strip()]
    choices = f"{', '.join(allowed)}, a comma-separated list of them" + (", or both" if both else "")
    if not items:
        raise CpbenchInputError(f"{what} is empty: use {choices}")
    for t in items:
        if t not in allowed:
            raise CpbenchInputError(f"unknown {what} {t!r}: use {choices}")
    return list(dict.fromkeys(items))




CpMinExtendOpt = Annotated[str, typer.Option(
    "--cp-min-extend", help="Which batches SGLang runs with CP: pr (SGLang PR #33137: every extend >= 2*cp_size), "
                            "upstream (every extend >= max(128, 2*cp_size)) or a number N (>= max(N, 2*cp_size)).")]
CpMinTokensOpt = Annotated[int, typer.Option(
    "--cp-min-tokens", help="And a total-token minimum: a batch with fewer extend tokens runs without CP (forks; "
                            "0: none).")]
FusedOrderOpt = Annotated[str, typer.Option(
    "--fused-order", help="Segment order of the fused batch: prev-next (SGLang PR #33137), next-prev or "
                          "interleaved (prev/next per request); outputs are un-permuted and checked as usual.")]


def check_fused_order(text: str) -> str:
    """``--fused-order``'s value if it is one of geometry.FUSED_ORDERS; else CpbenchInputError."""
    from cpbench.domain.geometry import FUSED_ORDERS

    if text not in FUSED_ORDERS:
        raise CpbenchInputError(f"unknown --fused-order {text!r}: use one of {', '.join(FUSED_ORDERS)}")
    return text
