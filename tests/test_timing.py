"""Timing helpers: statistics, repeat count from the budget, ABBA interleaving."""

import gc
import math
import random

import torch

from cpbench.measure.timing import Clock, repeats_for_budget, summarize, time_interleaved


def test_summarize_values():
    s = summarize([float(x) for x in range(1, 101)])
    assert s["latency_us_median"] == 50.5 and s["n_samples"] == 100
    assert abs(s["latency_us_p10"] - 10.9) < 1e-9 and abs(s["latency_us_p90"] - 90.1) < 1e-9
    assert s["latency_us_ci_low"] < 50.5 < s["latency_us_ci_high"]
    assert (s["latency_us_ci_low"], s["latency_us_ci_high"]) == (41.0, 60.0)  # order stats n/2 -+ 1.96 sqrt(n)/2
    assert summarize([])["n_samples"] == 0


def test_repeats_for_budget():
    assert repeats_for_budget(1000.0, 200.0) == 200
    assert repeats_for_budget(1e6, 200.0) == 5  # at least min_reps
    assert repeats_for_budget(1.0, 1e6, max_reps=2000) == 2000


def test_abba_order_and_every_sample_kept():
    order = []
    fns = {"A": lambda: order.append("A"), "B": lambda: order.append("B")}
    out = time_interleaved(fns, Clock(torch.device("cpu")), warmup=0, budget_ms=1e-9, min_reps=5)
    assert len(out["A"]) == len(out["B"]) == 5
    assert "".join(order) == "AB" + "ABBA" * 2  # estimate pass, then A B B A ...


def test_the_garbage_collector_is_paused_while_timing_and_restored():
    seen = []
    out = time_interleaved({"a": lambda: seen.append(gc.isenabled()), "b": lambda: seen.append(gc.isenabled())},
                           Clock(torch.device("cpu")), warmup=1, budget_ms=1, min_reps=3, max_reps=3)
    assert seen and not any(seen) and gc.isenabled()
    assert [len(v) for v in out.values()] == [3, 3]


class FakeClock:
    """Samples from a per-variant generator instead of a real clock (the callables are names)."""

    cuda = False
    last_enqueue_us = float("nan")

    def __init__(self, draw):
        self.draw = draw

    def sample_us(self, fn, barrier=None):
        return self.draw(fn())

    def sync(self):
        pass


def test_a_quiet_variant_stops_at_precision_and_a_noisy_one_at_the_budget():
    rng = random.Random(0)
    quiet = FakeClock(lambda name: 1000.0 * (1 + 0.001 * rng.random()))  # 0.1 % spread
    info = {}
    out = time_interleaved({"a": lambda: "a", "b": lambda: "b"}, quiet, warmup=0, budget_ms=1000, min_reps=5,
                           rel_ci=0.01, info=info)
    assert info["a"]["stop_reason"] == info["b"]["stop_reason"] == "precision"
    assert len(out["a"]) == len(out["b"]) < 1000 * 1e3 / 1000.0  # far fewer than the budget allows
    assert info["a"]["ci_rel_width"] <= 0.01
    noisy = FakeClock(lambda name: 1000.0 * (0.5 + rng.random()) ** 3)  # spread of ~ +-100 %
    info = {}
    out = time_interleaved({"a": lambda: "a", "b": lambda: "b"}, noisy, warmup=0, budget_ms=60, min_reps=5,
                           rel_ci=0.01, info=info)
    assert info["a"]["stop_reason"] == info["b"]["stop_reason"] == "time budget"
    assert len(out["a"]) == len(out["b"]) == repeats_for_budget(max(out["a"][0], out["b"][0]), 60)  # the cap
    assert info["a"]["ci_rel_width"] > 0.01


def test_without_rel_ci_the_whole_budget_is_sampled():
    clock = FakeClock(lambda name: 1000.0)
    info = {}
    out = time_interleaved({"a": lambda: "a"}, clock, warmup=0, budget_ms=50, min_reps=5, info=info)
    assert len(out["a"]) == 50 and info["a"]["stop_reason"] == "time budget"


def test_host_launch_is_the_median_enqueue_time_inside_the_timed_samples():
    class EnqueueClock(FakeClock):
        cuda = True  # enqueue times are reported only where enqueueing is not executing

        def sample_us(self, fn, barrier=None):
            name = fn()
            self.calls = getattr(self, "calls", 0) + 1
            self.last_enqueue_us = {"a": 100.0, "b": 10.0}[name] + self.calls % 3  # a: 100..102, b: 10..12
            return 1000.0

    info = {}
    time_interleaved({"a": lambda: "a", "b": lambda: "b"}, EnqueueClock(None), warmup=0, budget_ms=30,
                     min_reps=9, info=info)
    assert info["a"]["host_launch_us"] == 101.0 and info["b"]["host_launch_us"] == 11.0
    cpu = {}
    time_interleaved({"a": lambda: "a"}, FakeClock(lambda n: 5.0), warmup=0, budget_ms=1, min_reps=3, info=cpu)
    assert math.isnan(cpu["a"]["host_launch_us"])


def test_clock_range_over_samples_and_unknown():
    from cpbench.measure.timing import clock_range

    assert clock_range([1980.0, 1830.0, math.nan, 1905.0]) == {"sm_clock_mhz_min": 1830.0, "sm_clock_mhz_max": 1980.0}
    got = clock_range([math.nan, math.nan])
    assert math.isnan(got["sm_clock_mhz_min"]) and math.isnan(got["sm_clock_mhz_max"])


def test_sm_clock_read_after_each_sample_reaches_info():
    reads = iter([1980.0, 1950.0, 1890.0, 1900.0, 1935.0, 1960.0, 1970.0, 1940.0, 1910.0, 1920.0])

    class ReadingClock(FakeClock):
        def sample_us(self, fn, barrier=None):
            self.last_clock_mhz = next(reads)
            return super().sample_us(fn, barrier)

    info: dict = {}
    time_interleaved({"a": lambda: "a", "b": lambda: "b"}, ReadingClock(lambda n: 5.0), warmup=0, budget_ms=1,
                     min_reps=5, max_reps=5, info=info)
    # one estimate each (a, b), then ABBA (a b b a a b b a): a takes reads 0, 2, 5, 6, 9; b 1, 3, 4, 7, 8
    a, b = info["a"], info["b"]
    assert (a["sm_clock_mhz_min"], a["sm_clock_mhz_max"]) == (1890.0, 1980.0)
    assert (b["sm_clock_mhz_min"], b["sm_clock_mhz_max"]) == (1900.0, 1950.0)
