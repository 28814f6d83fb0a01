"""Report sections for torchrun runs (one process per CP rank): "Real CP (torchrun)" and "Simulated vs
real critical path" (markdown only; the numbers come from ``dist_data``)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cpbench.domain.modes import Mode, MODES, Status
from cpbench.report.data import uniform
from cpbench.report.dist_data import (EST_BANDWIDTHS, cell_summary, estimates, sim_vs_real, topology_summary,
                                      torchrun_rows)
from cpbench.report.units import EFFECT_UNIT, human_bytes, human_tokens
from cpbench.report.tables import effect, md_table, ms, times
from cpbench.results.verdicts import effect_text

FORMULA = ("t_gather(bw) ≈ num_layers × (n−1)/n × gather_bytes / bw, with n = cp size and gather_bytes the bytes "
           "each rank receives per layer; estimated forward = attention + KV write (slowest rank, measured) + "
           "t_gather(bw)")


def pct(x) -> str:
    """0.1234 -> '12.3%'; NaN -> '—'."""
    return f"{100 * float(x):.1f}%" if x is not None and math.isfinite(float(x)) else "—"


def ms3(us) -> str:
    """µs -> ms with 4 significant digits (small estimates stay readable); NaN -> '—'."""
    return f"{float(us) / 1e3:.4g}" if us is not None and math.isfinite(float(us)) else "—"


def gbps(x) -> str:
    return f"{float(x):.3g}" if x is not None and math.isfinite(float(x)) else "—"


def _tokens(c) -> str:
    s = human_tokens(c["max_extend_len"]) + ("" if uniform(c["extend_lens"]) else f" ({c['extend_lens']})")
    return s + (f" + {human_tokens(c['prefix_len'])} prefix" if c["prefix_len"] > 0 else "")


def _pair(a: pd.Series, b: pd.Series, col: str, fmt) -> str:
    return f"{fmt(a[col]) if a is not None else '—'} / {fmt(b[col]) if b is not None else '—'}"


def launch_lines(d: pd.DataFrame, manifest: dict) -> list[str]:
    """Bullets: world size, dist backend, gather mode, NCCL version and variables, GPU topology summary."""
    ws = manifest.get("world_size") or sorted({int(w) for w in d["world_size"]})
    gather = manifest.get("gather") or ", ".join(sorted(set(d["gather"])))
    env = manifest.get("nccl_env") or {}
    env_text = ", ".join(f"`{k}={v}`" for k, v in sorted(env.items())) if isinstance(env, dict) and env else "none set"
    return [f"- World size: {ws} processes; distributed backend: {manifest.get('dist_backend') or '—'}; "
            f"K|V all-gather: {gather}.",
            f"- NCCL version: {manifest.get('nccl_version') or '—'}; NCCL variables: {env_text}.",
            f"- GPU topology: {topology_summary(manifest.get('gpu_topology'))}."]


def real_cp_section(d: pd.DataFrame, manifest: dict, cpu: bool = False) -> list[str]:
    """The "Real CP (torchrun)" section of a prepared frame, [] when it holds no torchrun rows. ``cpu``: a
    gloo launch on a CPU, a functional check: the effect column carries no interval,
    and no link-bandwidth estimate is drawn from loopback timings."""
    t = torchrun_rows(d)
    if t.empty:
        return []
    s = cell_summary(t)
    out = ["## Real CP (torchrun)", ""] + launch_lines(t, manifest) + [
        "", "One process per CP rank; every layer all-gathers K|V, writes it into the paged KV cache, then runs "
        "attention. Critical path = median over samples of the per-sample slowest rank (ms per forward). "
        "Gather share = gather_us / forward latency per rank (median over ranks, eager); wait = all-gather time "
        "beyond the fastest rank's (max over ranks); bus GB/s = (n−1)/n × gathered bytes / fastest rank's "
        "gather time. Phase times (eager only) are medians of separately timed forwards.", ""]
    for (model, backend, timing, cp), v in s.groupby(["model", "backend", "timing", "cp_size"], sort=True):
        rows = []
        for _, c in v.groupby(["bs", "prefix_len", "max_extend_len", "extend_lens"], sort=True):
            a = c[c["mode"] == Mode.TWO_CALL].iloc[0] if (c["mode"] == Mode.TWO_CALL).any() else None
            b = c[c["mode"] == Mode.FUSED].iloc[0] if (c["mode"] == Mode.FUSED).any() else None
            first = c.iloc[0]
            status = first["status"] if first["status"] == Status.OK else f"{first['status']}: {first['reason']}"[:60]
            rows.append([first["bs"], _tokens(first), ms(a["critical_us"]) if a is not None else "—",
                         ms(b["critical_us"]) if b is not None else "—",
                         effect_text(first["speedup"]) if cpu else effect(first),  # a CPU effect carries no interval claim
                         _pair(a, b, "share", pct), _pair(a, b, "wait_max_us", ms3),
                         _pair(a, b, "bus_gbps", gbps), status])
        out += [f"### {model} · {backend} · {timing} · cp {cp}", "", md_table(
            ["bs>", "extend tokens>", "two-call ms>", "fused ms>",
             f"{EFFECT_UNIT}>" if cpu else f"{EFFECT_UNIT} [95% CI]>", "gather share (two-call / fused)>",
             "wait ms, max over ranks (two-call / fused)>", "bus GB/s (two-call / fused)>", "status"], rows), ""]
    if cpu:
        return out + ["On a CPU the phase times are host wall times of separately run forwards in which gloo "
                      "collectives block the host, so their shares need not add up to the forward; no estimate at "
                      "another link bandwidth is drawn from them.", ""]
    out += estimate_lines(s)
    return out


def estimate_lines(summary: pd.DataFrame) -> list[str]:
    """The "estimate at another link bandwidth" sub-section (eager cells with phase times)."""
    e = estimates(summary)
    head = ["### Estimate at another link bandwidth", "",
            f"**Estimate, not a measurement**: {FORMULA}. Bandwidths: "
            + "; ".join(label for _, label in EST_BANDWIDTHS) + ". It assumes the all-gather runs at link speed "
            "and ignores latency, overlap and the wait for slower ranks.", ""]
    if e.empty:
        return head + ["_No eager torchrun cell with phase times, so nothing to estimate._", ""]
    rows = []
    for _, c in e.iterrows():
        r = [c["model"], c["cp_size"], c["bs"], _tokens(c), c["mode"], human_bytes(c["gather_bytes"]),
             ms3(c["gather_min_us"]), ms3(c["work_max_us"])]
        for bw, _ in EST_BANDWIDTHS:
            r += [ms3(c[f"est_gather_us_{bw:g}"]), ms3(c[f"est_forward_us_{bw:g}"])]
        rows.append(r)
    heads = ["model", "cp>", "bs>", "extend tokens>", "mode", "gathered / layer / rank>", "measured gather ms (fastest rank)>",
             "attention + KV write ms (slowest rank)>"]
    for bw, _ in EST_BANDWIDTHS:
        heads += [f"est. gather ms @ {bw:g} GB/s>", f"est. forward ms @ {bw:g} GB/s>"]
    return head + [md_table(heads, rows), ""]


def sim_vs_real_section(real: pd.DataFrame, sim: pd.DataFrame, sim_name: str, plot_dir: Path | None,
                        stem: str = "sim_vs_real") -> list[str]:
    """The "Simulated vs real critical path" section: per matched cell and mode, the simulated critical
    path (slowest rank's median, attention only) vs the torchrun one (with the gather) and the difference."""
    m = sim_vs_real(real, sim)
    out = ["## Simulated vs real critical path", "",
           f"Simulated run: `{sim_name}` (one process, ranks one after another: attention only). Real: this run's "
           "torchrun rows (one process per rank, with the K|V all-gather and KV write). Cells match on model, "
           "backend, dtype, timing, cp size, bs, tokens, prefix, extend lengths and mode. "
           "Difference = real − simulated: what the one-GPU model misses (communication, KV write, waiting).", ""]
    if m.empty:
        return out + ["_No cell ran (status ok) in both the simulated and the torchrun rows._", ""]
    for mode in MODES:
        g = m[m["mode"] == mode]
        if len(g):
            out.append(f"- {mode}: real / simulated median {times(g['ratio'].median())} "
                       f"(range {times(g['ratio'].min())} – {times(g['ratio'].max())}) over {len(g)} cell(s).")
    rows = [[f"{c['model']} · {c['backend']}", c["timing"], c["cp_size"], c["bs"], _tokens(c), c["mode"],
             ms(c["sim_us"]), ms(c["real_us"]), ms3(c["diff_us"]), times(c["ratio"])] for _, c in m.iterrows()]
    out += ["", md_table(["model · backend", "timing", "cp>", "bs>", "extend tokens>", "mode", "simulated ms>", "real ms>",
                          "real − simulated ms>", "real / simulated>"], rows), ""]
    if plot_dir is None or (plot_dir / f"{stem}.png").exists():
        out += [f"![{stem}](plots/{stem}.png)", ""]
    return out
