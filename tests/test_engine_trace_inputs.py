"""``cpbench profile --from``: which files make one run, and how their ranks are numbered (process groups, devices,
file names), and nsys inputs that are damaged or stale: each accepted as what it is, or refused in one line."""

import json

import pytest

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


def _two_device_events():
    """One process's trace: per layer a GEMM and one attention kernel on device 0, and two attention kernels (and a
    GEMM) on device 1, as one process driving two GPUs records them (kineto's ``args.device``)."""
    evs = tf.events(layers=2, per_layer=1, forwards=2)
    more, corr = [], 10_000
    for e in evs:
        if e["cat"] == "kernel":
            e["args"]["device"] = 0
            copies = 2 if "fmha" in e["name"] else 1
            for i in range(copies):
                corr += 1
                more.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": e["ts"] - 4, "dur": 1,
                             "args": {"correlation": corr}})
                more.append({**e, "ts": e["ts"] + 0.1 * (i + 1), "args": {"correlation": corr, "device": 1}})
    return evs + more


def test_a_trace_of_two_devices_is_read_as_two_ranks(tmp_path):
    path = tmp_path / "one-process.json"
    path.write_text(json.dumps({"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
                                "traceEvents": _two_device_events()}))
    out = ranks(path, "--layers", "2")
    assert [(r["rank"], r["rank_source"], r["attention_kernels_per_forward"]) for r in out] == [
        (0, "device order", [2, 2]), (1, "device order", [4, 4])]
    assert "device 1" in cpbench("profile", "--from", path, "--layers", "2").stdout
    other = tf.write(tmp_path / "other.json.gz", rank=1, world_size=2)
    r = cpbench("profile", "--from", path, other)
    assert r.returncode == 2 and "holds kernels of 2 devices (0, 1): give it alone" in r.stderr


def test_an_nsys_process_on_two_devices_is_two_ranks(tmp_path):
    import sqlite3

    db = tf.write_nsys_sqlite(tmp_path / "n.sqlite", pids=(7, 8), layers=2, per_layer=1, forwards=2)
    con = sqlite3.connect(db)  # process 8's kernels and calls become process 7's second GPU
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1, globalPid = ? WHERE globalPid = ?", (7 << 24, 8 << 24))
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId + 1000 WHERE deviceId = 1")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = ?, correlationId = correlationId + 1000 "
                "WHERE globalTid = ?", ((7 << 24) | 7, (8 << 24) | 8))
    con.execute("DELETE FROM NVTX_EVENTS WHERE globalTid = ?", ((8 << 24) | 8,))
    con.commit()
    con.close()
    out = ranks(db, "--layers", "2", "--forward-range", "prefill_forward")
    assert [(r["rank"], r["rank_source"], r["attention_kernels_per_forward"]) for r in out] == [
        (0, "process and device order", [2, 2]), (1, "process and device order", [2, 2])]


def test_ranks_without_distributed_info_follow_the_number_in_the_file_name(tmp_path):
    """12 traces that name no rank, r0 ... r11: rank 2 is r2 (not r10, as sorted text would have it)."""
    for i in range(12):
        (tmp_path / f"engine-r{i}.trace.json").write_text(json.dumps({"traceEvents": tf.events(layers=2, forwards=1 + i % 5)}))
    out = ranks(tmp_path, "--layers", "2")
    assert [(r["rank"], r["forwards"], r["file"].rsplit("/", 1)[-1]) for r in out][:3] == [
        (0, 1, "engine-r0.trace.json"), (1, 2, "engine-r1.trace.json"), (2, 3, "engine-r2.trace.json")]
    assert [r["forwards"] for r in out] == [1 + i % 5 for i in range(12)] and {r["rank_source"] for r in out} == {"file name"}
    console = cpbench("profile", "--from", tmp_path, "--layers", "2").stdout
    assert "ranks are inferred from the number in each file name (the traces name none: no distributedInfo)" in console
    (tmp_path / "engine-extra.trace.json").write_text(json.dumps({"traceEvents": tf.events(layers=2)}))
    assert {r["rank_source"] for r in ranks(tmp_path, "--layers", "2")} == {"file order"}  # a name without a number


@pytest.mark.parametrize("table,column", [("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
                                          ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId"),
                                          ("CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
                                          ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                                          ("NVTX_EVENTS", "end")])
def test_text_in_an_integer_column_of_an_nsys_export_is_one_line(tmp_path, table, column):
    import sqlite3

    db = tf.write_nsys_sqlite(tmp_path / "n.sqlite", pids=(7,), layers=2)
    con = sqlite3.connect(db)
    con.execute(f"UPDATE {table} SET {column} = 'not a number' WHERE rowid = 2")
    con.commit()
    con.close()
    r = cpbench("profile", "--from", db, "--layers", "2")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert f"has text ('not a number') in {table}.{column}, an integer column" in r.stderr, r.stderr


def test_a_stale_export_beside_its_report_is_refused_as_a_file_or_in_a_directory(tmp_path):
    """A report recorded again after its .sqlite was exported: read from the directory as from the file, the export is
    out of date; without nsys to export it again, refused saying so."""
    import os

    db = tf.write_nsys_sqlite(tmp_path / "server.sqlite", layers=2)
    rep = tmp_path / "server.nsys-rep"
    rep.write_bytes(b"a report recorded after the export")
    os.utime(db, (1_700_000_000, 1_700_000_000))
    os.utime(rep, (1_700_000_100, 1_700_000_100))
    for given in (rep, tmp_path):
        r = cpbench("profile", "--from", given, "--layers", "2", env={"PATH": str(tmp_path / "no-tools")})
        assert r.returncode == 2 and "'server.sqlite' is older than 'server.nsys-rep'" in r.stderr, r.stderr
        assert "nsys is not installed here" in r.stderr
    os.utime(db, (1_700_000_200, 1_700_000_200))  # exported after the report: read once, from the export
    assert [r["file"] for r in ranks(tmp_path, "--layers", "2")] == [str(db)] * 2


def test_ctrl_c_of_profile_says_interrupted_without_a_sweeps_resume_advice(tmp_path, monkeypatch):
    import cpbench.studies.engine_traces.traces as engine_trace

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    tf.write(tmp_path / "r0.json.gz")
    monkeypatch.setattr(engine_trace, "read_torch_trace", interrupted)
    r = cpbench("profile", "--from", tmp_path / "r0.json.gz")
    assert r.returncode == 130 and r.stderr == "interrupted\n"
    import cpbench.commands.profiling as profiling

    monkeypatch.setattr(profiling, "profile_cell", interrupted)
    r = cpbench("profile", "--cp", "2", "--extend-len", "64", "--layers", "2", "--device", "cpu", "--out", tmp_path / "p")
    assert r.returncode == 130 and "--resume" not in r.stderr and r.stderr.startswith("interrupted")
