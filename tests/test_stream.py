"""studies/breakable/stream.py time_stream: the one-layer samples of --forward-layers kinds, taken back to back in ABBA
order inside chunks, paired by round, sized by the budget and stopped by precision like synchronised samples."""

import math

from cpbench.studies.breakable.stream import time_stream


class ChunkClock:
    """A CPU clock (no device, no SM clock reader) whose calls report their cost through ``cost``."""

    cuda = False
    read_clock_mhz = None

    def sync(self):
        pass


def _variants(log, cost):
    def fn(name):
        def run():
            log.append(name)
            cost[0] = cost[1][name]
        return run
    return {n: fn(n) for n in cost[1]}


def test_samples_come_back_to_back_in_abba_order_and_pair_by_round(monkeypatch):
    import cpbench.studies.breakable.stream as stream

    log: list = []
    cost = [0.0, {"a|w": 10.0, "a|f": 30.0, "b|w": 11.0, "b|f": 33.0}]

    def fake_chunk(fns, clock, lead_us):  # the cost each call reported, µs
        out = []
        for f in fns:
            f()
            out.append(cost[0])
        return out, [math.nan] * len(fns)

    monkeypatch.setattr(stream, "run_chunk", fake_chunk)
    info: dict = {}
    out = time_stream(_variants(log, cost), ChunkClock(), warmup=1, budget_ms=0.2, min_reps=4, info=info)
    assert log[:4] == ["a|w", "a|f", "b|w", "b|f"]  # the warm-up round
    assert log[4:12] == ["a|w", "a|f", "b|w", "b|f", "b|f", "b|w", "a|f", "a|w"]  # A B B A: two samples a round
    # budget 200 µs at 33 µs a sample: 6 samples of each variant, an even count (whole rounds), all paired
    assert {n: len(v) for n, v in out.items()} == {"a|w": 6, "a|f": 6, "b|w": 6, "b|f": 6}
    assert out["a|f"] == [30.0] * 6 and out["b|w"] == [11.0] * 6
    assert info["a|w"]["stop_reason"] == "time budget" and math.isnan(info["a|w"]["host_launch_us"])


def test_a_quiet_stream_stops_at_precision(monkeypatch):
    import cpbench.studies.breakable.stream as stream

    chunks = []

    def fake_chunk(fns, clock, lead_us):
        chunks.append(len(fns))
        return [100.0] * len(fns), [math.nan] * len(fns)

    monkeypatch.setattr(stream, "run_chunk", fake_chunk)
    info: dict = {}
    out = time_stream({"a": lambda: None, "b": lambda: None}, ChunkClock(), warmup=0, budget_ms=1000, min_reps=4,
                      rel_ci=0.01, min_stop=10, info=info, chunk_ms=1.0)
    assert info["a"]["stop_reason"] == "precision" and 10 <= len(out["a"]) < 1000 * 1e3 / 100.0
    assert chunks[0] == 4 and all(c == 4 * 2 for c in chunks[1:])  # one round first, then 1 ms chunks of 2 rounds


def test_a_precise_predicate_replaces_the_per_variant_stop(monkeypatch):
    import cpbench.studies.breakable.stream as stream

    monkeypatch.setattr(stream, "run_chunk", lambda fns, clock, lead_us: ([100.0] * len(fns), [math.nan] * len(fns)))
    seen = []

    def precise(samples):  # what the samples estimate is precise once it holds 12 of each
        seen.append(len(samples["a"]))
        return len(samples["a"]) >= 12

    info: dict = {}
    out = time_stream({"a": lambda: None, "b": lambda: None}, ChunkClock(), warmup=0, budget_ms=1000, min_reps=4,
                      rel_ci=0.5, min_stop=4, info=info, chunk_ms=0.4, precise=precise)
    assert info["a"]["stop_reason"] == "precision" and len(out["a"]) == 12 and seen[-1] == 12
