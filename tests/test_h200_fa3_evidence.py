"""Counting on real flashinfer-fa3 recordings from the H200 (gpt-oss-120b, cp 4, bs 1, seq 8192, flashinfer
0.7.2.post1).

Fixtures: torch.profiler Chrome traces of rank 0's two-call and fused forwards written by
`cpbench profile --cp 4 --bs 1 --seq 8192 --nsys`, and the `nsys stats -r nvtx_kern_sum` CSV of the
same command (docs/evidence/). The PR #33137 headline: 72 -> 36 per rank, 288 -> 144 over 4 ranks.
"""

import gzip
from pathlib import Path

import pytest

from cpbench.kernels.backends.registry import kernel_patterns
from cpbench.profiles.capture import load_trace
from cpbench.profiles.kernels import count_events
from cpbench.profiles.nsys import kernels_per_range, parse_nvtx_kern_sum

FIX = Path(__file__).parent / "fixtures"
FA3_PATTERNS = kernel_patterns("flashinfer-fa3")  # recorded on FlashInfer's fa3


@pytest.mark.parametrize("mode,attention,calls", [("two-call", 72, 72), ("fused", 36, 36)])
def test_fa3_trace_counts(mode, attention, calls):
    c = count_events(load_trace(FIX / f"h200_fa3_cp4_bs1_seq8192_r0_{mode}.json.gz"), FA3_PATTERNS,
                     require_attention=True)
    assert c.attention == attention
    assert c.attention_calls == calls
    assert c.fill == 0  # outputs are pre-allocated: no zero-fill kernel in the forward
    assert c.launches >= c.attention  # every GPU execution was launched from the host


def test_fa3_nsys_csv_per_forward_range():
    rows = parse_nvtx_kern_sum(gzip.decompress((FIX / "h200_fa3_nvtx_kern_sum.csv.gz").read_bytes()).decode())
    per = kernels_per_range(rows, FA3_PATTERNS)
    total = {"two-call": 0, "fused": 0}
    for rank in range(4):
        for mode, want in (("two-call", 72), ("fused", 36)):
            got = per[f"cp4 bs1 seq8192 r{rank} {mode} eager"].attention
            assert got == want
            total[mode] += got
    assert total == {"two-call": 288, "fused": 144}
    assert per["combined"].attention == 4 * 36 and per["prev"].attention == 4 * 36
