#!/usr/bin/env python3
"""The one-layer-per-kind estimate against the whole forward at the same clock: per cell of
``benchmarks/breakable_check.py --kinds`` JSONL (no cpbench import), the layer-synchronised critical path of both
(ms), how far apart (%), and the share of the two-call forward fused saves by each. Markdown on stdout.

  python3 benchmarks/h200-forward-kinds/interleaved.py RUN.jsonl [RUN.jsonl ...]
"""
import json
import sys


def saved(two_call: float, fused: float) -> float:
    """Share of the two-call time the fused path saves, %."""
    return 100 * (1 - fused / two_call)


def main(paths: list[str]) -> None:
    print("| kernel | bs | extend | two-call ms: kinds / whole | fused ms: kinds / whole | ms differ (two-call, fused) "
          "| fused saves: kinds / whole | differ (points) |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        with open(path) as fh:
            for line in fh:
                c = json.loads(line)
                w2, wf = c["crit_sync_two_call_ms"], c["crit_sync_fused_ms"]
                k2, kf = c["kinds_two_call_ms"], c["kinds_fused_ms"]
                print(f"| {c['cell']['backend']} | {c['cell']['bs']} | {c['cell']['extend_len']} | {k2:.2f} / {w2:.2f} "
                      f"| {kf:.2f} / {wf:.2f} | {100 * (k2 / w2 - 1):+.2f} %, {100 * (kf / wf - 1):+.2f} % "
                      f"| {saved(k2, kf):+.2f} % / {saved(w2, wf):+.2f} % | {saved(k2, kf) - saved(w2, wf):+.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
