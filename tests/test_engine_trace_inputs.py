"""``cpbench profile --from``: which files make one run, and how their ranks are numbered (process groups, devices,
file names), and nsys inputs that are damaged or stale: each accepted as what it is, or refused in one line."""

import json

import tracefactory as tf
from clirun import cpbench


def ranks(*args):
    r = cpbench("profile", "--from", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ranks"]


def test_ranks_in_different_subgroups_are_one_run(tmp_path):
    """torch.profiler lists only a rank's own groups: ranks 0-1 and 2-3 of a 4-rank run list different subgroups
    (pg 1 = [0, 1], pg 2 = [2, 3]) beside the same default group."""
    for r in range(4):
        tf.write(tmp_path / f"t-TP-{r}.trace.json.gz", r, 4, layers=2, subgroups=[("1", [0, 1])] if r < 2 else [("2", [2, 3])])
    assert [x["rank"] for x in ranks(tmp_path, "--layers", "2")] == [0, 1, 2, 3]


def test_ranks_that_disagree_on_a_group_are_refused(tmp_path):
    a = tf.write(tmp_path / "a.json.gz", 0, 4, subgroups=[("1", [0, 1])])
    b = tf.write(tmp_path / "b.json.gz", 1, 4, subgroups=[("1", [1, 2])])
    r = cpbench("profile", "--from", a, b)
    assert r.returncode == 2 and "disagree on process group '1' (ranks [0, 1] against [1, 2])" in r.stderr
    c = tf.write(tmp_path / "c.json.gz", 1, 4, backend="gloo")
    r = cpbench("profile", "--from", a, c)
    assert r.returncode == 2 and "different process groups (nccl with 4 ranks against gloo with 4 ranks)" in r.stderr
