#!/usr/bin/env python3
"""The validation table of --forward-layers kinds against all: per cell, the critical path of both modes (ms), the
share of the two-call forward fused saves with its 95 % interval, and the median SM clock of the rows (MHz), from two
run directories of the same backend. Markdown on stdout. With INDEPENDENT (the JSONL of benchmarks/breakable_check.py,
which does not import cpbench), a second table sets its layer-synchronised critical path beside the kinds run's.

  PYTHONPATH=src python3 benchmarks/h200-forward-kinds/compare.py KINDS_RUN ALL_RUN BACKEND [INDEPENDENT]
"""
import json
import sys

import cpbench


def saved(speedup: float) -> float:
    """Share of the two-call time the fused path saves, %, from two-call / fused."""
    return 100 * (1 - 1 / speedup)


def main(kinds_dir: str, all_dir: str, backend: str, independent: str | None = None) -> None:
    runs = {rule: cpbench.Run.open(d) for rule, d in (("kinds", kinds_dir), ("all", all_dir))}
    cp, clock = {}, {}
    for rule, run in runs.items():
        c = run.critical_path()
        cp[rule] = c[(c.timing == "breakable") & (c.backend == backend) & (c.status == "ok")].set_index(
            ["bs", "max_extend_len"])
        rows = run.rows
        rows = rows[(rows.timing == "breakable") & (rows.backend == backend)]
        clock[rule] = rows.groupby(["bs", "max_extend_len"]).sm_clock_mhz_max.median()
    print("| bs | extend | two-call ms: kinds / all | fused ms: kinds / all | ms differ (two-call, fused) "
          "| fused saves: kinds | all | differ (points) | SM clock MHz: kinds / all |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in cp["all"].index.intersection(cp["kinds"].index):
        k, a = cp["kinds"].loc[key], cp["all"].loc[key]
        d2, df = (k.two_call_us / a.two_call_us - 1) * 100, (k.fused_us / a.fused_us - 1) * 100
        sk, sa = saved(k.speedup), saved(a.speedup)
        ci = {r: f"[{saved(x.speedup_ci_low):+.1f}, {saved(x.speedup_ci_high):+.1f}]" for r, x in (("k", k), ("a", a))}
        print(f"| {key[0]} | {key[1]} | {k.two_call_us / 1e3:.2f} / {a.two_call_us / 1e3:.2f} "
              f"| {k.fused_us / 1e3:.2f} / {a.fused_us / 1e3:.2f} | {d2:+.1f} %, {df:+.1f} % "
              f"| {sk:+.1f} % {ci['k']} | {sa:+.1f} % {ci['a']} | {sk - sa:+.1f} "
              f"| {clock['kinds'][key]:.0f} / {clock['all'][key]:.0f} |")
    if independent:
        print("\n| bs | extend | two-call ms: kinds / independent | fused ms: kinds / independent "
              "| fused saves: kinds | independent | differ (points) |")
        print("|---|---|---|---|---|---|---|")
        with open(independent) as fh:
            for line in fh:
                c = json.loads(line)
                key = (c["cell"]["bs"], c["cell"]["extend_len"])
                if key not in cp["kinds"].index:
                    continue
                k, two, fused = cp["kinds"].loc[key], c["crit_sync_two_call_ms"], c["crit_sync_fused_ms"]
                si = saved(two / fused)
                print(f"| {key[0]} | {key[1]} | {k.two_call_us / 1e3:.2f} / {two:.2f} | {k.fused_us / 1e3:.2f} / "
                      f"{fused:.2f} | {saved(k.speedup):+.1f} % | {si:+.1f} % | {saved(k.speedup) - si:+.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:5])
