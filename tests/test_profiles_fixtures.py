"""Counting and nsys parsing on recorded / hand-written fixtures (tests/fixtures/expected_counts.json
lists each fixture with the counts it must give; add recorded H200 files there)."""

import json
from pathlib import Path

import pytest

from cpbench.profiles.capture import load_trace
from cpbench.profiles.kernels import ProfileError, count_events
from cpbench.profiles.nsys import kernels_per_range, parse_nvtx_kern_sum

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "expected_counts.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED["traces"]))
def test_trace_fixture_counts(name):
    spec = EXPECTED["traces"][name]
    events = load_trace(FIXTURES / name)
    counts = count_events(events, spec["patterns"])
    got = {k: getattr(counts, k) for k in spec["counts"]}
    assert got == spec["counts"]
    if spec.get("raises"):
        with pytest.raises(ProfileError, match="no attention kernels"):
            count_events(events, spec["patterns"], require_attention=True)
    else:
        assert count_events(events, spec["patterns"], require_attention=True).attention > 0


def test_trace_fixture_without_patterns_has_no_attention():
    events = load_trace(FIXTURES / "trace_fa2_two_call.json")
    counts = count_events(events, ())
    assert counts.attention == 0 and counts.other == 4
    with pytest.raises(ProfileError):
        counts.require_attention()


@pytest.mark.parametrize("name", sorted(EXPECTED["nsys"]))
def test_nsys_fixture_counts(name):
    spec = EXPECTED["nsys"][name]
    rows = parse_nvtx_kern_sum((FIXTURES / name).read_text())
    assert len(rows) == spec["rows"]
    per_range = kernels_per_range(rows, spec["patterns"], domain=spec.get("domain", "cpbench"))
    for rng, want in spec["ranges"].items():
        got = {k: getattr(per_range[rng], k) for k in want}
        assert got == want, rng
