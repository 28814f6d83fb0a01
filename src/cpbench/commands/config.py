"""What a sweep measures and how: :class:`SweepConfig`, checked whole when it is built.

The CLI only turns text into these fields; a SweepConfig built from Python (``cpbench.sweep``, a notebook)
is held to the same rules and fails with the same one-line :class:`~cpbench.errors.CpbenchInputError`.
Adding a sweep option touches three places: a field here (with its check in :meth:`SweepConfig.check`), its
flag in ``cli/sweep.py``, and the code that uses it (docs/design.md §0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from cpbench.domain.cells import Batch, CellSpec, plan_cells
from cpbench.domain.eligibility import CpRule, parse_rule
from cpbench.domain.geometry import FUSED_ORDERS
from cpbench.domain.layer_rest import check_ep, check_layer_rest_us, missing_rest_fields
from cpbench.domain.limits import MAX_CP_SIZE, MAX_TOKENS
from cpbench.domain.models import ModelSpec
from cpbench.domain.modes import MODES, TIMINGS, DType, Mode, Timing
from cpbench.errors import CpbenchInputError
from cpbench.kernels.backends import get_backend
from cpbench.results.policy import TimingPolicy

MAX_PASSES = 10
GATHERS = ("none", "packed", "separate")
LIST_OPTIONS = ("--cp", "--extend-len", "--prefix-len", "--ranks", "--graph-buckets")  # (cli/options.int_list)


@dataclass(frozen=True)
class SweepConfig:
    """What to measure and how, never changed after it is built. Lengths in tokens, budget in ms.

    The cells are ``cp_sizes`` x ``batches``, the one way to name them (domain.cells); ``cells_from``
    records the options the batches came from (``bs_list``, ``extend_len_list``, ``extend_lens``, ``prefix``,
    ``lengths``, ``trace``, ``prefix_hit``) for the manifest, and is never read to plan cells.

    Text is accepted where an enum is typed (``modes=("fused",)``, ``dtype="fp32"``) and stored as the enum.

    Raises:
        CpbenchInputError: a field out of range or options that do not fit together, with the option to
            change (:meth:`check`).
    """

    model: ModelSpec
    cp_sizes: tuple[int, ...]
    batches: tuple[Batch, ...]
    backends: tuple[str, ...]  # measured on the same cells, in this order (registry names, ``auto`` resolved)
    device: torch.device
    cells_from: tuple[tuple[str, object], ...] = ()  # (option, value) pairs; see ``commands.manifest.config_dict``
    ranks: tuple[int, ...] | None = None  # None: every rank
    modes: tuple[Mode, ...] = MODES
    timings: tuple[Timing, ...] = (Timing.EAGER,)
    budget_ms: float = 200.0
    rel_ci: float | None = 0.01  # stop sampling a variant once its median's 95 % CI is this narrow (None: never)
    warmup: int = 3
    dtype: DType = DType.BF16
    seed: int = 0
    check: bool = True
    context_len: int | None = None
    profile: bool = True
    nvtx: bool = False  # NVTX ranges (cell, layer, call) around timed eager forwards
    gather: str = "none"  # per-layer K|V all-gather of a torchrun launch: packed | separate | none
    fused_order: str = "prev-next"  # segment order of the fused batch (geometry.FUSED_ORDERS)
    tp_size: int = 1  # attention TP: ``model`` holds one GPU's heads (domain.tp.split_heads)
    # SGLang's max_prefill_tokens: a batch with more extend tokens than this is not run (status skipped);
    # 0 = no cap
    max_prefill_tokens: int = 0
    # which batches SGLang runs with CP (domain.eligibility): pr | upstream | a number; a total-token minimum
    cp_min_extend: str = "pr"
    cp_min_tokens: int = 0
    # a separate sliding-window KV pool (SGLang SWAKVPool): window layers' own page table, duplicated too
    swa_pool: bool = False
    # the breakable forward (timing breakable, studies/breakable): expert parallelism (None: cp_size x
    # tp_size), µs of GPU work per layer instead of the model's (None: the model's), token buckets (): exact
    ep: int | None = None
    layer_rest_us: float | None = None
    graph_buckets: tuple[int, ...] = ()
    # timing passes over every cell (measure/passes.py): the interval covers the drift between them
    passes: int = 1
    # breakable timing: "kinds" estimates the forward from one layer of each kind (studies/breakable
    # time_layer_kinds), "all" times all num_layers layers; a torchrun launch times the whole forward either way
    forward_layers: str = "kinds"

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the normalised values are set once, here
        for name, option in (("cp_sizes", "--cp"), ("batches", "batches"), ("backends", "--backend"),
                             ("modes", "--mode"), ("timings", "--timing"), ("graph_buckets", "--graph-buckets")):
            value = getattr(self, name)
            if isinstance(value, str):  # "a,b": the CLI's spelling of a list
                value = tuple(v.strip() for v in value.split(",") if v.strip())
            if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
                _bad(f"{option} must be a list or tuple, got {value!r}")
            set_(self, name, tuple(value))
        for name, option in (("check", "--check"), ("profile", "--profile"), ("nvtx", "--nvtx"), ("swa_pool", "--swa-pool")):
            if not isinstance(getattr(self, name), bool):
                _bad(f"{option} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.device, torch.device):
            from cpbench.measure.env import resolve_device

            set_(self, "device", resolve_device(None if self.device is None else str(self.device)))
        both = [m for x in self.modes for m in (MODES if str(x) == "both" else (x,))]  # "both": the pair
        set_(self, "modes", tuple(dict.fromkeys(Mode.parse(str(m), "--mode") for m in both)))
        set_(self, "timings", tuple(Timing.parse(str(t), "--timing") for t in self.timings))
        set_(self, "dtype", DType.parse(str(self.dtype), "--dtype"))
        set_(self, "graph_buckets", tuple(self.graph_buckets))
        if self.ranks is not None:
            set_(self, "ranks", tuple(self.ranks))
        rule = parse_rule(self.cp_min_extend, self.cp_min_tokens)  # None: the defaults, as the CLI passes them
        set_(self, "cp_min_extend", rule.min_extend)
        set_(self, "cp_min_tokens", rule.min_tokens)
        set_(self, "_rule", rule)
        self.check_fields()

    @property
    def cp_rule(self) -> CpRule:
        """The CP eligibility rule of ``cp_min_extend`` / ``cp_min_tokens``, parsed once."""
        return self._rule  # type: ignore[attr-defined]

    @property
    def backend(self) -> str:
        """The backends comma-joined, as the manifest and ``--backend`` spell them."""
        return ",".join(self.backends)

    def cells(self) -> list[CellSpec]:
        """Every cell of the sweep: cp_size order, then the batches' order (domain.cells.plan_cells)."""
        return plan_cells(self.cp_sizes, self.batches)

    def timing_policy(self, pass_no: int = 1) -> TimingPolicy:
        """How pass ``pass_no`` times a variant: this config's warm-up (one after pass 1: the cell ran
        already), budget, precision stop and passes, with the sample floors of results/policy.py."""
        return TimingPolicy(warmup=self.warmup if pass_no == 1 else min(self.warmup, 1), budget_ms=self.budget_ms,
                            rel_ci=self.rel_ci, passes=self.passes)

    def replace(self, **changes) -> "SweepConfig":
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)

    def check_fields(self) -> None:
        """Raise CpbenchInputError for the first field out of range or options that do not fit together,
        naming the option (``--budget-ms``) a CLI user would change."""
        if not isinstance(self.model, ModelSpec):
            _bad(f"model must be a ModelSpec (cpbench.domain.models.get_preset), got {type(self.model).__name__}")
        _ints(self.cp_sizes, "--cp", 1, MAX_CP_SIZE)
        if not self.batches:
            _bad("no batch to measure: give --bs and --extend-len, --extend-lens, --lengths or --trace")
        for b in self.batches:
            if not isinstance(b, Batch) or not b.extend_lens or len(b.extend_lens) != len(b.prefix_lens):
                _bad(f"a batch must be a cpbench.domain.cells.Batch with one prefix per request, got {b!r}")
            _ints(b.extend_lens, "--extend-len", 1, MAX_TOKENS, " extend tokens per request")
            _ints(b.prefix_lens, "--prefix-len", 0, MAX_TOKENS, " cached tokens per request")
        if not self.backends:
            _bad("--backend: no backend given: name one (cpbench doctor lists them)")
        for name in self.backends:
            get_backend(name)  # an unknown name: CpbenchInputError naming the known ones
        if self.ranks is not None:
            _ints(self.ranks, "--ranks", 0, MAX_CP_SIZE - 1)
            if not self.ranks or max(self.ranks) >= min(self.cp_sizes):
                _bad(f"--ranks {list(self.ranks)} must name ranks in [0, cp_size) for cp_size {min(self.cp_sizes)} "
                     "(None: every rank)")
        if not self.modes:
            _bad("--mode: no mode given: use two-call, fused or both")
        if not self.timings:
            _bad("--timing: no timing given: use eager, graph or breakable")
        if Timing.GRAPH in self.timings and self.device.type != "cuda":
            _bad("--timing graph (or both) needs a CUDA device: graph timing replays a CUDA graph; use --timing "
                 "eager (or breakable, whose segments run eagerly there) on CPU")
        if not (isinstance(self.budget_ms, (int, float)) and not isinstance(self.budget_ms, bool)
                and math.isfinite(self.budget_ms) and self.budget_ms > 0):
            _bad(f"--budget-ms must be a finite number of ms > 0, got {_num(self.budget_ms)}")
        if self.rel_ci is not None and not (isinstance(self.rel_ci, (int, float)) and not isinstance(self.rel_ci, bool)
                                            and 0 < self.rel_ci < 1):  # NaN fails too
            _bad(f"--rel-ci must be a fraction in [0, 1), e.g. 0.01 for 1 %, got {self.rel_ci!r}")
        _ints((self.warmup,), "--warmup", 0, note=" untimed forwards")
        _ints((self.seed,), "--seed", 0, 2**63 - 1)
        _ints((self.tp_size,), "--tp", 1, MAX_CP_SIZE)
        _ints((self.max_prefill_tokens,), "--max-prefill-tokens", 0, note=" (0: no cap)")
        _ints((self.passes,), "--passes", 1, MAX_PASSES)
        if self.gather not in GATHERS:
            _bad(f"--gather {self.gather!r}: use one of {', '.join(GATHERS)}")
        if self.fused_order not in FUSED_ORDERS:
            _bad(f"unknown --fused-order {self.fused_order!r}: use one of {', '.join(FUSED_ORDERS)}")
        longest = max(max(e + p for e, p in zip(b.extend_lens, b.prefix_lens)) for b in self.batches)
        if self.context_len is not None:
            _ints((self.context_len,), "--context-len", 1)
        if self.context_len is not None and self.context_len < longest:
            _bad(f"--context-len {self.context_len} is shorter than the longest sequence ({longest} tokens with "
                 "prefix): raise it or drop it")
        if self.swa_pool and self.model.sliding_window is None:
            _bad(f"--swa-pool needs a model with sliding-window layers; {self.model.name} has none (gpt-oss "
                 "presets have them, or give --window)")
        if Timing.BREAKABLE not in self.timings and (self.ep is not None or self.layer_rest_us is not None
                                                      or self.graph_buckets):
            _bad("--ep, --layer-rest-us and --graph-buckets size the breakable forward: add --timing breakable "
                 "(e.g. --timing eager,graph,breakable)")
        check_layer_rest_us(self.layer_rest_us)
        if self.ep is not None and self.layer_rest_us is not None:
            _bad("--ep sizes the model's MoE, which --layer-rest-us replaces: give one of them")
        if self.ep is not None or (Timing.BREAKABLE in self.timings and self.layer_rest_us is None):
            check_ep(self.model, self.ep, self.cp_sizes, self.tp_size)  # None: checks the default cp_size x tp
        if Timing.BREAKABLE in self.timings and self.layer_rest_us is None and missing_rest_fields(self.model):
            _bad(f"--timing breakable: {missing_rest_fields(self.model)}, so the rest of its layers cannot be "
                 "built: give a config.json with the MLP sizes, or --layer-rest-us N")
        _ints(self.graph_buckets, "--graph-buckets", 1, MAX_TOKENS, " tokens")
        if self.forward_layers not in FORWARD_LAYERS:
            _bad(f"--forward-layers: {self.forward_layers!r} is not one of {', '.join(FORWARD_LAYERS)}")


FORWARD_LAYERS = ("kinds", "all")  # --forward-layers


def device_defaults(device: torch.device, simulated: bool = True) -> dict:
    """The fields a sweep takes from its device when not given (the CLI's and ``cpbench.grid``'s defaults):
    on CUDA breakable (the prefill forward, one layer per kind), graph and eager timing, 3 warm-up forwards and two
    passes (one under torchrun, whose ranks time together); elsewhere breakable (the rest of the layer left out,
    ``layer_rest_us`` 0: callers drop it when they set the timings) and eager timing, a functional check, 1
    warm-up forward, one pass."""
    cuda = device.type == "cuda"
    if cuda:
        return dict(timings=(Timing.BREAKABLE, Timing.GRAPH, Timing.EAGER), warmup=3, passes=2 if simulated else 1)
    # the default CPU breakable forward leaves the rest of the layer out (a model-sized layer on 2 cores takes
    # minutes); with timings given, a CPU breakable forward runs the model's layer unless --layer-rest-us says
    return dict(timings=(Timing.BREAKABLE, Timing.EAGER), warmup=1, passes=1, layer_rest_us=0.0)


def _bad(message: str) -> None:
    raise CpbenchInputError(message)


def _num(v) -> str:
    """A number as an option's message shows it (``-1``, ``inf``, ``0.5``); anything else as its repr."""
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)


def _ints(values, option: str, lo: int, hi: int | None = None, note: str = "") -> None:
    """Raise CpbenchInputError unless every value is an int >= ``lo`` (and <= ``hi`` when given). A tuple of
    values is a list option and is worded as the CLI words its lists (``--cp values must be >= 1, got 0``)."""
    many = isinstance(values, tuple) and option in LIST_OPTIONS
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            _bad(f"{option} must be {'integers' if many else 'an integer'}{note}, got {v!r}")
        if many and (v < lo or (hi is not None and v > hi)):
            _bad(f"{option} values must be {f'>= {lo}' if v < lo else f'<= {hi}'}, got {v}")
        if v < lo or (hi is not None and v > hi):
            bound = f"an integer in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            _bad(f"{option} must be {bound}{note}, got {_num(v)}")
