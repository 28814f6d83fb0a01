"""--forward-layers kinds (studies/breakable/layers.py time_layer_kinds): the forward estimated from one layer of each
kind, layers of a kind run back to back and rotated, scaled by the kind's layer count; on a CPU sweep the kinds
rows carry the rule and the same columns as a whole-forward row."""

import json
import math

import pytest

from cpbench.studies.breakable.layers import kind_layers, kind_rotation, kinds_text, time_layer_kinds
from clirun import cpbench


class FakeClock:
    """No device: time_layer_kinds only syncs it (the timer takes the samples)."""

    cuda = False

    def sync(self):
        pass


def _layers(log, cost, mode):
    """Per layer: a segment and an attention callable that log (layer, µs)."""
    return [[lambda i=i: log.append((i, cost[i] / 2)), lambda i=i: log.append((i, cost[i] / 2))]
            for i in range(len(cost))]


def test_kind_layers_group_by_window_in_model_order():
    assert kind_layers([127, -1, 127, -1, 4]) == {127: [0, 2], -1: [1, 3], 4: [4]}
    assert kind_rotation([127, -1, 127, -1, 127, -1, 4]) == {127: [2, 4], -1: [3, 5], 4: [6]}
    assert kinds_text({127: [0, 2], -1: [1, 3]}, {127: 1, -1: 2}) == "window 127: 1 of 2, full: 2 of 2"


def test_the_estimate_is_layers_times_one_layer_rotated_over_the_last_two_of_a_kind():
    wl = [127, -1] * 4  # 4 window layers of 10 µs, 4 full layers of 30 µs: a forward of 160 µs
    cost = [10.0 if w >= 0 else 30.0 for w in wl]
    log: list = []
    layer_fns = {m: _layers(log, cost, m) for m in ("two-call", "fused")}
    seen = []

    def timer(fns, info, budget_share, forward_ci):  # runs each variant 6 times, a sample the work it logged (µs)
        assert budget_share == 0.5  # two kinds: one forward sample costs a layer of each
        out = {}
        for name, fn in fns.items():
            start = len(log)
            xs = []
            for _ in range(6):
                mark = len(log)
                fn()
                xs.append(sum(us for _, us in log[mark:]))
            seen.append((name, [i for i, _ in log[start::2]]))
            out[name] = xs
            info[name] = {"stop_reason": "time budget", "host_samples_us": [2.0] * 6, "sm_clock_mhz_min": math.nan}
        assert forward_ci(out) == 0.0  # the precision stop reads the forward estimate (identical samples: no width)
        noisy = {n: [x * (1 + 0.1 * (i % 2)) for i, x in enumerate(v)] for n, v in out.items()}
        assert forward_ci(noisy) > 0.05
        return out

    est = time_layer_kinds(layer_fns, FakeClock(), wl, timer, {})
    for m, e in est.items():
        assert e.forward_us == pytest.approx([160.0] * 6)  # 4 x 10 + 4 x 30, from one-layer samples
        assert e.columns == {"forward_rule": "kinds", "kind_layers_per_sample": "window 127: 1 of 4, full: 1 of 4",
                             "window_layers_us": 40.0, "full_layers_us": 120.0}
        assert e.stop["host_launch_us"] == pytest.approx(8 * 2.0)  # each kind's issue time scaled like its samples
    assert dict(seen)["two-call|127"] == [4, 6, 4, 6, 4, 6]  # one layer a sample, rotating over the last two
    assert dict(seen)["fused|-1"] == [5, 7, 5, 7, 5, 7]
    assert [i for i, _ in log[-4::2]] == [6, 7]  # the last layer of each kind ran last (the forward's outputs)


@pytest.mark.slow
def test_a_cpu_sweep_estimates_the_forward_by_kind_and_all_keeps_the_whole(tmp_path, rough_charts):
    rows = {}
    for rule in ("kinds", "all"):
        out = tmp_path / rule
        r = cpbench("sweep", "--cp", "2", "--bs", "1", "--extend-len", "32", "--device", "cpu", "--layers", "4",
                    "--timing", "breakable", "--layer-rest-us", "0", "--forward-layers", rule, "--budget-ms", "5",
                    "--no-profile", "--out", out)
        assert r.returncode == 0, r.stderr
        rows[rule] = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    for rule, rs in rows.items():
        assert len(rs) == 4 and {x["status"] for x in rs} == {"ok"} and {x["forward_rule"] for x in rs} == {rule}
        assert all(x["window_layers_us"] > 0 and x["full_layers_us"] > 0 and x["diff_vs_eager"] == 0.0 for x in rs)
    assert {x["kind_layers_per_sample"] for x in rows["kinds"]} == {"window 127: 1 of 2, full: 1 of 2"}
    assert "kind_layers_per_sample" not in rows["all"][0]
    # all (simulated ranks) also times the one-layer estimate right after its whole forwards; kinds rows need none
    for x in rows["all"]:  # 4 layers on a CPU: the estimate is the forward's size, not a stray number
        assert 0.2 < x["kinds_forward_us"] / x["latency_us_median"] < 5, x
    assert "kinds_forward_us" not in rows["kinds"][0]
    # the report says the forward is an estimate, and what it was checked against, only where it is one
    assert "the forward estimated from them" in (tmp_path / "kinds" / "report.md").read_text()
    assert "the forward estimated from them" not in (tmp_path / "all" / "report.md").read_text()
