"""The results schema: every column of a results row, its type and unit, the key, and migrations.

One row per cell x rank x backend x mode x timing mode x launch (docs/design.md §5). This module is
the one place that knows the columns: the runner writes them, the store keys and migrates them,
report/ and compare read them. No torch, no pandas here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cpbench.domain.modes import ALL_MODES, MODES, TIMINGS, Status
from cpbench.results.policy import clock_drop_text

SCHEMA_VERSION = 3
LAUNCHES = ("simulated", "torchrun")
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)  # the values a row's status may hold
# kinds of device memory a mode's setup holds (setup_mem_<kind> columns, measure/memory.py), in chart order:
# Prepared.setup_mem keys, the K|V all-gather buffers of a torchrun layer, and what lies outside those
SETUP_PARTS = ("page_table", "swa_page_table", "metadata", "plan", "workspace", "outputs", "comm", "other")


@dataclass(frozen=True)
class Column:
    """One results column.

    Attributes:
        name: column name (SGLang/FlashInfer spelling where one exists).
        type: ``int | float | str | bool | list`` (the JSON type; NaN/None allowed for numbers).
        unit: unit or allowed values, e.g. ``"µs"``, ``"bytes"``, ``"tokens"``.
        doc: what it holds.
        role: ``"run"`` (one value per run: part of the row key, fixed on --resume), ``"cell"`` (part of
            the key, identifies the cell), ``"row"`` (part of the key, rank/mode within a cell),
            ``"value"`` (measured, stored) or ``"derived"`` (computed on read by results.derived, never stored).
        option: the sweep option (SweepConfig field) a ``"run"`` column comes from.
    """

    name: str
    type: str
    unit: str
    doc: str
    role: str = "value"
    option: str | None = None


# mem_reason of every row measured on a CPU: it names a CPU run whose manifest was lost (RunDir.load)
CPU_MEM_REASON = "not measured on CPU: the CPU allocator keeps no statistics"


def _c(name, type_, unit, doc, role="value", option=None) -> Column:
    return Column(name, type_, unit, doc, role, option)


_COLUMNS = [
    _c("schema_version", "int", "", "results format version", "value"),
    # -- run: identical for every row of a run directory (a resume must keep them) -----------------
    _c("model", "str", "", "preset or config name (overrides appended, e.g. llama-3.1-8b+window4096)", "run", "model"),
    _c("backend", "str", "torch | flashinfer-fa2 | flashinfer-fa3 | fa3 | trtllm-fmha-v2 | trtllm-gen | flex",
       "attention backend (fa3: FlashAttention-3; schema 1 and 2 named FlashInfer's fa2 and fa3, read under their "
       "new names)", "run", "backend"),
    _c("backend_dist", "str", "distribution", "the distribution that declared the backend: cpbench for its own, a "
       "plugin's for a plugin's (docs/backends.md), empty for a class named by --backend pkg.mod:Class that no "
       "installed distribution holds; rows written before the column read as cpbench (every backend was its own)"),
    _c("backend_version", "str", "version", "that distribution's version (empty: unknown, as in rows written "
       "before the column)"),
    _c("dtype", "str", "bf16 | fp16 | fp32", "q/k/v dtype", "run", "dtype"),
    _c("launch", "str", " | ".join(LAUNCHES), "ranks in one process one after another, or one process per rank",
       "run", "launch"),
    _c("world_size", "int", "processes", "processes in the launch (1 when simulated)", "run", "world_size"),
    _c("seed", "int", "", "seed of inputs and page-table permutation", "value", "seed"),
    _c("gather", "str", "packed | separate | none", "per-layer K|V all-gather (torchrun; none when simulated)",
       "run", "gather"),
    _c("fused_order", "str", "prev-next | next-prev | interleaved", "segment order of the fused call's batch "
       "(prev-next: SGLang PR #33137; two-call rows carry their run's value)", "run", "fused_order"),
    # -- cell -----------------------------------------------------------------------------------
    _c("timing", "str", " | ".join(TIMINGS), "eager launches, CUDA-graph replay of the attention forward, or the "
       "breakable prefill forward (each layer's other work replayed from graph segments, attention eager)", "cell"),
    _c("cp_size", "int", "ranks", "CP group size", "cell"),
    _c("bs", "int", "requests", "requests in the batch", "cell"),
    _c("max_extend_len", "int", "tokens", "longest extend length in the batch (the --extend-len value; alias --seq); "
       "stored as seq_len before, read under this name", "cell"),
    _c("prefix_len", "int", "tokens", "cached prefix per request", "cell"),
    _c("extend_lens", "str", "tokens", "extend (new-token) length of each request, comma-separated "
       "(SGLang's seq_lens would be prefix + extend)", "cell"),
    # -- row ------------------------------------------------------------------------------------
    _c("rank", "int", "", "CP rank", "row"),
    _c("mode", "str", " | ".join(ALL_MODES), "two attention calls per layer, one fused call over 2*bs segments, or "
       "one CP-native call (flex backend)", "row"),
    # -- values -----------------------------------------------------------------------------------
    _c("page_size", "int", "tokens", "KV page size"),
    _c("num_layers", "int", "", "attention layers per forward"),
    _c("status", "str", " | ".join(STATUSES), "ok, or why the row has no measurement"),
    _c("reason", "str", "", "why not ok (one line)"),
    _c("latency_us_median", "float", "µs", "forward latency (all layers)"),
    _c("latency_us_p10", "float", "µs", "10th percentile"),
    _c("latency_us_p90", "float", "µs", "90th percentile"),
    _c("latency_us_mean", "float", "µs", "mean"),
    _c("latency_us_ci_low", "float", "µs", "95% CI of the median, low (order statistics)"),
    _c("latency_us_ci_high", "float", "µs", "95% CI of the median, high"),
    _c("n_samples", "int", "", "timed forwards"),
    _c("stop_reason", "str", "precision | time budget | max samples", "why sampling stopped (--rel-ci, --budget-ms)"),
    _c("ci_rel_width", "float", "", "width of the median's 95% CI / median when sampling stopped"),
    _c("samples_us", "list", "µs", "every raw sample, in the agreed ABBA order (with --passes, pass after pass)"),
    _c("passes", "int", "", "timing passes whose samples the row holds (--passes; measure/passes.py)"),
    _c("pass_sizes", "list", "", "samples each pass contributed to samples_us, in order"),
    _c("per_layer_us", "float", "µs", "latency_us_median / num_layers", "derived"),
    _c("flops", "float", "FLOP", "per forward, from per-segment causal (windowed) areas"),
    _c("tflops", "float", "TFLOP/s", "flops / latency_us_median", "derived"),
    _c("gemm_peak_tflops", "float", "TFLOP/s", "the run's measured matmul peak (manifest gemm_peak: n×n×n matmuls, n = 8192 on a GPU)", "derived"),
    _c("host_launch_us", "float", "µs", "median host time to enqueue one forward inside the timed samples (graph: one replay; NaN on CPU)"),
    _c("setup_us_metadata", "float", "µs", "host setup: metadata"),
    _c("setup_us_page_table", "float", "µs", "host setup: page tables"),
    _c("setup_us_swa_page_table", "float", "µs", "host setup: the SWA pool table's duplicate (--swa-pool)"),
    _c("setup_us_plan", "float", "µs", "host setup: plan()"),
    _c("setup_us_outputs", "float", "µs", "host setup: output buffers"),
    _c("setup_us_total", "float", "µs", "sum of setup parts"),
    _c("peak_mem_bytes", "float", "bytes", "device memory the mode needs at its peak, from before its setup: "
       "setup_mem_bytes + max(first forward's transient peak, the setup's own) (NaN on CPU: mem_reason)"),
    _c("setup_mem_bytes", "float", "bytes", "device memory the mode's setup holds: sum of setup_mem_* "
       "(the shared float workspace included)"),
    *[_c(f"setup_mem_{k}", "float", "bytes", d) for k, d in zip(SETUP_PARTS, (
        "the fused call's row-duplicated block_tables (0 for two-call)",
        "the fused call's row-duplicated SWA-pool table, --swa-pool (0 for two-call or without it)",
        "indptr / indices / cu_seqlens arrays of the calls",
        "the wrappers' plan state and int workspace buffers",
        "the float workspace the calls use (shared by the modes, allocated once)",
        "pre-allocated attention outputs",
        "K|V all-gather buffers of a torchrun layer",
        "what the setup allocated outside the named parts"))],
    _c("forward_mem_bytes", "float", "bytes", "transient device memory of the first forward above what was "
       "allocated before it"),
    _c("mem_reason", "str", "", "why the memory columns are NaN (empty when measured)"),
    _c("page_table_bytes", "int", "bytes", "bytes of every page table: block_tables [bs, W], plus the SWA "
       "pool's [bs, W] with --swa-pool"),
    _c("swa_page_table_bytes", "int", "bytes", "bytes of the SWA pool's table [bs, W] (--swa-pool; else 0)"),
    _c("page_table_dup_bytes", "int", "bytes", "bytes of the row-duplicated [2*bs, W] tables, both with "
       "--swa-pool (fused only)", "derived"),
    _c("dup_copy_us", "float", "µs", "measured time of cat(t, t) of every page table (fused only)"),
    _c("kv_cache_bytes", "int", "bytes", "one layer's K+V cache (in either pool with --swa-pool: an SWA-pool "
       "cache has as many pages)"),
    _c("kv_buffers", "int", "", "distinct KV caches the layers rotate through, both pools with --swa-pool "
       "(the cell allocates kv_buffers x kv_cache_bytes of K+V)"),
    _c("swa_kv_buffers", "int", "", "of kv_buffers, the SWA pool's caches, which the window layers read "
       "(--swa-pool; else 0)"),
    _c("context_len", "int", "tokens", "tokens the page table is sized for"),
    _c("tokens_logical", "int", "tokens", "local query rows"),
    _c("tokens_padded", "int", "tokens", "rows padded to a multiple of 2*cp_size"),
    _c("max_kv_len", "int", "tokens", "longest kv_len on the rank"),
    _c("calls_per_layer", "int", "", "attention calls per layer"),
    _c("steps_per_layer", "int", "", "steps per layer (attention + communication + KV write)"),
    _c("max_abs_err", "float", "", "max |out - fp32 torch reference| (NaN: not checked)"),
    _c("diff_vs_two_call", "float", "", "max |fused - two-call| output (fused rows)"),
    _c("diff_vs_eager", "float", "", "max |attention outputs of the breakable forward - an earlier forward's| "
       "(breakable rows; 0 expected: the same kernels on the same inputs)"),
    _c("sm_clock_mhz_before", "float", "MHz", "SM clock before timing (NaN: unknown)"),
    _c("sm_clock_mhz_after", "float", "MHz", "SM clock after timing"),
    _c("clock_drop", "bool", "", f"SM clock fell by more than {clock_drop_text()} while timing", "derived"),
    _c("sm_clock_mhz_min", "float", "MHz", "lowest SM clock read after a timed sample (NaN: unknown)"),
    _c("sm_clock_mhz_max", "float", "MHz", "highest SM clock read after a timed sample"),
    _c("attn_kernels", "float", "", "attention kernels per forward (GPU executions; torch backend: calls)"),
    _c("attn_kernels_expected", "float", "", "layers x attention calls per layer x kernels_per_call"),
    _c("kernels_per_call", "float", "", "attention kernels per attention call"),
    _c("attn_calls", "float", "", "prev/next/combined ranges per forward"),
    _c("comm_kernels", "float", "", "collective (NCCL) kernels per forward"),
    _c("kernels", "float", "", "GPU kernel executions per forward"),
    _c("merge_kernels", "float", "", "split-KV merge kernels per forward"),
    _c("fill_kernels", "float", "", "fill/memset kernels per forward"),
    _c("copy_kernels", "float", "", "copy kernels per forward"),
    _c("other_kernels", "float", "", "non-attention kernels per forward"),
    _c("launches", "float", "", "CPU launch calls per forward"),
    _c("gpu_busy_us", "float", "µs", "GPU busy time of the profiled eager forward (union of kernel, memset and "
       "memcpy intervals; NaN on CPU)"),
    _c("host_bound", "bool", "", "eager row whose median latency exceeds 1.2 x its GPU busy time: it measures "
       "how fast the host launches", "derived"),
    _c("trace", "str", "path", "Chrome trace of the profiled forward"),
    _c("forward_rule", "str", "kinds | all", "breakable rows: the forward estimated from one layer of each kind "
       "(kinds: sum over kinds of layers x one layer's time, layers of a kind timed back to back) or all its layers "
       "timed (all; always under torchrun)"),
    _c("kind_layers_per_sample", "str", "", "breakable kinds rows: layers of each kind one sample ran, e.g. "
       "'window 127: 1 of 18, full: 1 of 18'"),
    _c("kinds_forward_us", "float", "µs", "breakable all rows of simulated ranks: the forward estimated from one "
       "layer of each kind (as --forward-layers kinds does), timed right after the whole forwards of the same rank "
       "and mode, median (pass 1): the estimate checked against the forward at the clock the GPU held then"),
    _c("kernel_impl", "str", "module version", "which build of the backend's kernel ran (fa3: sgl_kernel.flash_attn or "
       "flash_attn_interface, with its version)"),
    # -- torchrun launches: per-rank phases, medians of 3 separately timed eager forwards (sums over layers)
    _c("gather_us", "float", "µs", "the gather step per forward: pack, all_gather_into_tensor, strip and reorder "
       "(CUDA events between steps; includes waiting for slower ranks)"),
    _c("kv_write_us", "float", "µs", "writing the gathered K|V into the paged pool, per forward"),
    _c("attn_us", "float", "µs", "attention calls per forward"),
    _c("wait_us", "float", "µs", "gather_us minus the cell's smallest gather_us: time spent waiting in the "
       "all-gather for slower ranks", "derived"),
    _c("gather_bytes", "int", "bytes", "bytes each rank receives per layer (all ranks' padded K|V)"),
    _c("bus_gbps", "float", "GB/s", "(n-1)/n * gather_bytes * num_layers / the cell's smallest gather_us: a lower "
       "bound of the link's bus bandwidth (the step includes packing and reordering)", "derived"),
    _c("critical_us_median", "float", "µs", "median over samples of the per-sample maximum over ranks", "derived"),
    # -- workloads: tensor parallelism, length mixes and traces, per-layer-kind times -------------------
    _c("tp_size", "int", "GPUs", "attention tensor parallelism: the row measures one GPU's heads "
       "(q heads / tp_size, max(1, kv heads / tp_size))", "run", "tp_size"),
    _c("batch", "int", "", "index of the batch in a --lengths mix or --trace (0 for a bs x extend-len grid)", "cell"),
    _c("prefix_lens", "str", "tokens", "cached prefix of each request, comma-separated (prefix_len is the longest)"),
    _c("window_layers_us", "float", "µs", "the sliding-window layers' share of the profiled eager forward: "
       "GPU busy time of the work launched in those layers; NaN on CPU, for a model with one layer kind and "
       "with --no-profile; breakable rows: the window layers' share of separately timed breakable forwards, "
       "CUDA events after every layer"),
    _c("full_layers_us", "float", "µs", "the full-attention layers' share of the same forward"),
    # -- the breakable prefill forward (timing breakable; docs/design.md §11) ---------------------------
    _c("ep_size", "int", "GPUs", "expert parallelism of the MoE (--ep; default cp_size x tp_size); 0 for a "
       "dense model or --layer-rest-us; breakable rows"),
    _c("layer_rest", "str", "model | N us", "what runs besides attention in a breakable forward: the model's "
       "layer (norms, projections, RoPE, MLP or MoE) or --layer-rest-us N µs of GPU work per layer (breakable rows)"),
    _c("segments", "str", "graph | eager: why", "how the breakable forward's non-attention segments ran: replayed "
       "CUDA graphs, or eagerly (CPU; a token bucket SGLang would not replay, --graph-buckets)"),
    _c("graph_bucket", "int", "tokens", "rows the segments ran at (the rank's padded tokens, or the "
       "--graph-buckets bucket they are padded to)"),
    _c("bucket_pad_ratio", "float", "", "graph_bucket / tokens_padded (1: no bucket padding)"),
    _c("rest_flops", "float", "FLOP", "GEMM FLOPs of the non-attention work per forward (domain/layer_rest.py)"),
    _c("rest_weight_bytes", "float", "bytes", "device bytes of the non-attention weights the layers rotate over"),
    _c("rest_weights_note", "str", "", "the checkpoint format the stand-in weights replace (e.g. MXFP4 experts: "
       "the stand-in moves more bytes, so rest time is an upper bound and attention's share a lower bound)"),
    _c("moe_a2a_bytes", "int", "bytes", "bytes a rank sends per layer in the MoE dispatch and combine "
       "(all_to_all_single over the CP group of a torchrun launch; 0 simulated)"),
    _c("host_samples_us", "list", "µs", "host time to issue each timed forward (breakable rows), in sample order"),
    _c("host_hidden", "bool", "", "breakable row whose median host issue time is below its median forward: the "
       "host ran ahead of the GPU", "derived"),
]
COLUMNS: dict[str, Column] = {c.name: c for c in _COLUMNS}

RUN_COLUMNS = tuple(c.name for c in _COLUMNS if c.role == "run")
CELL_COLUMNS = RUN_COLUMNS + tuple(c.name for c in _COLUMNS if c.role == "cell")
KEY_COLUMNS = CELL_COLUMNS + tuple(c.name for c in _COLUMNS if c.role == "row")
DERIVED_COLUMNS = tuple(c.name for c in _COLUMNS if c.role == "derived")  # computed on read (results.derived)
# the manifest config lists that name a sweep's cells (a --resume finishes the run's own cells, never others)
GRID_OPTIONS = ("cp_sizes", "bs_list", "extend_len_list", "extend_lens", "timings", "modes")
# sweep options a resumed sweep must keep: the run columns' options, options that change every row's meaning
# without being a column of their own, and the grid
FIXED_ON_RESUME = tuple(c.option for c in _COLUMNS if c.option) + ("prefix", "context_len", "check", "batches",
                                                                  "prefix_hit", "cp_min_extend", "cp_min_tokens",
                                                                  "swa_pool", "ep", "layer_rest_us", "graph_buckets",
                                                                  "passes") + GRID_OPTIONS


def row_key(row: dict) -> tuple:
    """The identity of a row: its :data:`KEY_COLUMNS` values as text (a resume skips keys on disk)."""
    return tuple(str(row.get(c)) for c in KEY_COLUMNS)


# -- migrations ------------------------------------------------------------------------------------
V1_DEFAULTS = {"launch": "simulated", "world_size": 1, "gather": "none", "seed": 0}
# columns added within schema 2: a stored row without one gets this value (no version bump; see add_defaults)
V2_DEFAULTS = {"tp_size": 1, "batch": 0, "fused_order": "prev-next"}
# columns renamed within schema 2: old name -> new name (a stored row is read under the new name)
V2_RENAMED = {"seq_len": "max_extend_len"}
# columns added within schema 3: a stored row without one gets this value (add_defaults). Rows written before
# plugins existed ran cpbench's own backends; which cpbench version is not known from the row
V3_DEFAULTS = {"backend_dist": "cpbench", "backend_version": ""}
# backends renamed in schema 3: FlashInfer's paged prefill was "fa2" / "fa3"; "fa3" now names FlashAttention-3
V3_BACKENDS = {"fa2": "flashinfer-fa2", "fa3": "flashinfer-fa3"}


def migrate_row(row: dict) -> dict:
    """Bring a stored row to :data:`SCHEMA_VERSION` (a renamed column never strands a stored run).

    v1 -> v2: ``seq_lens`` (extend lengths) is renamed ``extend_lens``; ``launch``, ``world_size``,
    ``gather`` and ``seed`` are added (v1 runs were simulated in one process; the v1 CLI's default seed
    was 0 and is the only value committed runs used). v2 -> v3: ``backend`` ``fa2`` / ``fa3`` (FlashInfer's
    paged prefill) reads as ``flashinfer-fa2`` / ``flashinfer-fa3`` (:data:`V3_BACKENDS`). Columns added
    later within v2 get their defaults (:func:`add_defaults`). A row of another version is returned as it is
    (the store refuses it with a message).
    """
    version = row.get("schema_version", 1)
    if version == SCHEMA_VERSION:
        return add_defaults(row)
    if version == 1:
        row = _v1_to_v2(row)
    elif version != 2:
        return row
    out = {**row, "schema_version": SCHEMA_VERSION}
    if "backend" in out:
        out["backend"] = renamed_backend(out["backend"])
    return add_defaults(out)


def _v1_to_v2(row: dict) -> dict:
    """A v1 row as v2 wrote it (:func:`migrate_row`)."""
    out = {("extend_lens" if k == "seq_lens" else k): v for k, v in row.items()}
    for k, v in V1_DEFAULTS.items():
        out.setdefault(k, v)
    out["schema_version"] = 2
    return out


def renamed_backend(name):
    """The current name of backend ``name`` as a schema 1 or 2 run recorded it (:data:`V3_BACKENDS`; any other
    value, a missing one (None) included, as it is)."""
    return V3_BACKENDS.get(name, name) if isinstance(name, str) else name


def renamed_backends(names: str) -> str:
    """A comma-separated ``--backend`` list of a schema 1 or 2 run with every name current
    (``"trtllm-fmha-v2,fa3"`` -> ``"trtllm-fmha-v2,flashinfer-fa3"``)."""
    return ",".join(V3_BACKENDS.get(n.strip(), n) for n in names.split(","))


_BACKEND_OPTION = re.compile(r"(--backend(?:=|\s+))([^\s'\"]+)")


def renamed_command(command: str) -> str:
    """A command line a schema 1 or 2 run recorded, its ``--backend`` list with every name current
    (:func:`renamed_backends`): the command then runs the kernels the run ran. The rest is kept as written."""
    return _BACKEND_OPTION.sub(lambda m: m.group(1) + renamed_backends(m.group(2)), command)


def add_defaults(row: dict) -> dict:
    """Fill the columns added within schema 2 and 3 that an older row lacks: ``tp_size`` 1, ``batch`` 0 (every
    earlier run measured one GPU's heads at TP 1 on a bs x extend-len grid or one explicit batch), ``fused_order``
    ``prev-next`` (the only order before the option existed),
    ``prefix_lens`` (``prefix_len`` repeated ``bs`` times), ``backend_dist`` ``cpbench`` and ``backend_version``
    empty (:data:`V3_DEFAULTS`); and reads a renamed column under its new name
    (:data:`V2_RENAMED`: ``seq_len`` held the longest *extend* length, now ``max_extend_len``). Returns ``row``
    itself when nothing is missing."""
    if all(k in row for k in (*V2_DEFAULTS, *V3_DEFAULTS)) and "prefix_lens" in row \
            and not V2_RENAMED.keys() & row.keys():
        return row
    out = {**V2_DEFAULTS, **V3_DEFAULTS, **{V2_RENAMED.get(k, k): v for k, v in row.items()}}
    if "prefix_lens" not in out:
        try:
            out["prefix_lens"] = ",".join([str(int(row["prefix_len"]))] * int(row["bs"]))
        except (KeyError, TypeError, ValueError):  # a status row of a broken run: leave it unknown
            out["prefix_lens"] = ""
    return out


def field_problem(name: str, value) -> str | None:
    """What is wrong with storing ``value`` under column ``name`` (unknown column, a derived column, a value
    of the wrong JSON type), or None. ``setup_us_<part>`` columns are open-ended (one per setup step)."""
    col = COLUMNS.get(name)
    if col is None:
        return None if name.startswith("setup_us_") else f"unknown column {name!r}"
    if col.role == "derived":
        return f"column {name!r} is derived on read (results.derived), not stored"
    if value is None:
        return None
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "str": isinstance(value, str), "bool": isinstance(value, bool),
          "list": isinstance(value, list)}[col.type]
    if col.type == "int" and isinstance(value, float) and math.isnan(value):
        ok = True
    return None if ok else f"{name}={value!r} is not {col.type}"


def check_row(row: dict) -> list[str]:
    """Problems of a row to be stored, against the schema (unknown columns, derived columns, wrong types,
    unknown status, missing key columns), [] if none. ``RunDir.append`` refuses a row with problems."""
    problems = [p for p in (field_problem(k, v) for k, v in row.items()) if p]
    if row.get("status") not in STATUSES:
        problems.append(f"status {row.get('status')!r} not in {STATUSES}")
    for k in KEY_COLUMNS:
        if k not in row:
            problems.append(f"key column {k!r} missing")
    return problems


def non_numeric(df) -> tuple[str, object, int] | None:
    """The first stored number column of a results frame holding a value that is not a number (a hand-edited
    ``"bs": "one"``): ``(column, first such value, rows with one)``, or None when every value reads as a number
    (or is empty). Derived columns are skipped (computed on read)."""
    import pandas as pd

    for name in df.columns:
        col = COLUMNS.get(name)
        if col is None or col.type not in ("int", "float") or col.role == "derived":
            continue
        s = df[name]
        if pd.api.types.is_numeric_dtype(s):
            continue
        bad = s.notna() & s.map(lambda v: isinstance(v, (list, dict)) or pd.isna(pd.to_numeric(v, errors="coerce")))
        if bad.any():
            return name, s[bad].iloc[0], int(bad.sum())
    return None
