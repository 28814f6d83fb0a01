#!/usr/bin/env python3
"""The one-layer-per-kind estimate against the whole forward inside one ``--forward-layers all`` run (simulated
ranks): each row holds the whole forward's median (``latency_us_median``) and, timed right after it at the clock it
left, the estimate's (``kinds_forward_us``). Per cell, the layer-synchronised critical path of each mode both ways
(sum over layer kinds of the slowest rank, each rank's forward split by its own window/full shares, as cpbench's
critical path does), how far apart (%), and the share of the two-call forward fused saves by each; then the worst
rank. Markdown on stdout.

  PYTHONPATH=src python3 benchmarks/h200-forward-kinds/same_run.py RUN [RUN ...]
"""
import sys

import cpbench


def crit(rows, column: str) -> float:
    """Sum over kinds of the slowest rank's time in that kind, µs: ``column`` split by each rank's kind shares."""
    share = rows.window_layers_us / (rows.window_layers_us + rows.full_layers_us)
    return float((rows[column] * share).max() + (rows[column] * (1 - share)).max())


def saved(two_call: float, fused: float) -> float:
    return 100 * (1 - fused / two_call)


def main(paths: list[str]) -> None:
    print("| kernel | bs | extend | two-call ms: kinds / whole | fused ms: kinds / whole | ms differ (two-call, fused) "
          "| fused saves: kinds / whole | differ (points) | worst rank: ms differ |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        r = cpbench.Run.open(path).rows
        r = r[(r.timing == "breakable") & (r.status == "ok") & r.kinds_forward_us.notna()]
        for (backend, bs, ext), g in r.groupby(["backend", "bs", "max_extend_len"], sort=True):
            m = {mode: g[g["mode"] == mode] for mode in ("two-call", "fused")}
            k = {mode: crit(x, "kinds_forward_us") for mode, x in m.items()}
            w = {mode: crit(x, "latency_us_median") for mode, x in m.items()}
            worst = 100 * (g.kinds_forward_us / g.latency_us_median - 1).abs().max()
            d = {mode: 100 * (k[mode] / w[mode] - 1) for mode in k}
            print(f"| {backend} | {bs} | {ext} | {k['two-call'] / 1e3:.2f} / {w['two-call'] / 1e3:.2f} "
                  f"| {k['fused'] / 1e3:.2f} / {w['fused'] / 1e3:.2f} | {d['two-call']:+.2f} %, {d['fused']:+.2f} % "
                  f"| {saved(k['two-call'], k['fused']):+.2f} % / {saved(w['two-call'], w['fused']):+.2f} % "
                  f"| {saved(k['two-call'], k['fused']) - saved(w['two-call'], w['fused']):+.2f} | {worst:.2f} % |")


if __name__ == "__main__":
    main(sys.argv[1:])
