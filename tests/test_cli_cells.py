"""The CLI's shared pieces: the cell options of sweep and profile (cli/cells.py) and the exception table
(cli/errors.py: one line on stderr, exit codes, CPBENCH_DEBUG)."""

import pytest

from cpbench.cli.cells import Cells, check_out, parse_cells, workload_batches
from cpbench.errors import CpbenchInputError
from clirun import cpbench

SWEEP = dict(default_bs="1,4,16", default_extend_len="32,64")
PROFILE = dict(default_bs="1", default_extend_len="8192")


def cells(cp="4", bs=None, seq=None, seq_lens=None, prefix=0, ranks="all", defaults=SWEEP):
    return parse_cells(cp=cp, bs=bs, extend_len=seq, extend_lens=seq_lens, prefix=prefix, ranks=ranks, **defaults)


def test_defaults_of_each_command():
    c = cells()
    assert c == Cells([4], [1, 4, 16], [32, 64], None, 0, None)
    assert c.batches[:3] == [(32,), (64,), (32,) * 4] and len(c.batches) == 6 and c.longest == 64
    p = cells(defaults=PROFILE)
    assert p.batches == [(8192,)] and p.ranks is None


def test_explicit_batch_prefix_and_ranks():
    c = cells(cp="2,4", seq_lens="3000,5000", prefix=512, ranks="0,1")
    assert c.batches == [(3000, 5000)] and c.cp_sizes == [2, 4] and c.ranks == [0, 1]
    assert c.longest == 5512 and c.bs_list == [1, 4, 16]  # the defaults stay for the manifest


@pytest.mark.parametrize("kw,needle", [
    (dict(bs="0"), "--bs values must be >= 1"), (dict(seq=""), "--extend-len is empty"),
    (dict(seq_lens=" "), "--extend-lens is empty"), (dict(seq_lens="64", bs="2"), "--extend-lens gives the whole batch"),
    (dict(seq_lens="64", seq="64"), "--extend-lens gives the whole batch"), (dict(prefix=-1), "--prefix-len must be in"),
    (dict(prefix=1 << 25), "--prefix-len must be in"), (dict(cp="2,4", ranks="2"), "--ranks 2 is outside [0, cp_size)"),
    (dict(cp="0"), "--cp values must be >= 1"), (dict(ranks="x"), "--ranks must be comma-separated integers"),
])
def test_bad_cell_options(kw, needle):
    with pytest.raises(CpbenchInputError) as e:
        cells(**kw)
    assert needle in str(e.value)


def test_empty_out():
    check_out(None, "runs/<timestamp>")
    with pytest.raises(CpbenchInputError, match="leave it out for runs/profile-<time>"):
        check_out(" ", "runs/profile-<time>")


def test_sweep_and_profile_refuse_the_same_input_alike(tmp_path):
    for cmd in ("sweep", "profile"):
        r = cpbench(cmd, "--cp", "2", "--ranks", "3", "--seq", "64", "--out", tmp_path / cmd, "--layers", "2")
        assert r.returncode == 2 and r.stderr.strip() == "error: --ranks 3 is outside [0, cp_size) for cp_size 2"
        assert not (tmp_path / cmd).exists()


def test_no_arguments_print_the_help_once():
    r = cpbench()
    assert r.returncode == 0 and r.stdout.count("Usage:") == 1 and "sweep" in r.stdout and not r.stderr


def test_cpbench_debug_shows_the_traceback(monkeypatch):
    r = cpbench("geometry", "--extend", "x")
    assert r.returncode == 2 and r.stderr == "error: --extend-lens must be comma-separated integers, got 'x'\n"
    monkeypatch.setenv("CPBENCH_DEBUG", "1")
    with pytest.raises(CpbenchInputError, match="--extend-lens must be"):
        cpbench("geometry", "--extend", "x")  # re-raised: the process would print the full traceback
    with pytest.raises(Exception, match="No such command 'nope'"):
        cpbench("nope")  # click's usage errors too
    r = cpbench()  # the help is not an error
    assert r.returncode == 0 and "Usage:" in r.stdout


@pytest.mark.parametrize("exc,code,line", [
    (OverflowError("int too large"), 2, "error: a value is too large to run (OverflowError: int too large): "
                                        "use realistic sizes"),
    (IsADirectoryError(21, "Is a directory"), 2, "error: IsADirectoryError: [Errno 21] Is a directory: check that "
                                                 "path"),
    (KeyboardInterrupt(), 130, "interrupted\n"),  # not a sweep: no advice to resume one
])
def test_exception_table(monkeypatch, exc, code, line):
    import cpbench.cli.geometry as g

    def boom():
        raise exc

    monkeypatch.setattr("cpbench.domain.models.PRESETS", type("P", (), {"values": staticmethod(boom)})())
    r = cpbench("models")
    assert r.returncode == code and r.stderr.startswith(line) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert g.models  # the command itself is a plain function


def test_a_repeated_rank_is_refused_in_one_line(tmp_path):
    with pytest.raises(CpbenchInputError, match="--ranks repeats rank 0"):
        cells(cp="2", ranks="0,0")
    for cmd in ("sweep", "profile"):
        r = cpbench(cmd, "--cp", "2", "--ranks", "0,1,0", "--seq", "64", "--out", tmp_path / cmd, "--layers", "2")
        assert r.returncode == 2 and r.stderr.strip().startswith("error: --ranks repeats rank 0: give each rank once")
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / cmd).exists()


@pytest.mark.parametrize("args, line", [
    (("--extend-len", "nan"), "error: --extend-len must be comma-separated integers, got 'nan'"),
    (("--seq", "0"), "error: --seq values must be >= 1, got 0"),
    (("--extend-lens", "x"), "error: --extend-lens must be comma-separated integers, got 'x'"),
    (("--prefix-len", "-1"), "error: --prefix-len must be in [0, 16777216] tokens, got -1"),
    (("--warmup", "-1"), "error: --warmup must be >= 0 untimed forwards, got -1"),
    (("--seed", "18446744073709551616"), "error: --seed must be an integer in [0, 2**63), got 18446744073709551616"),
    (("--budget-ms", "nan"), "error: --budget-ms must be a finite number of ms > 0, got nan"),
])
def test_messages_name_the_option_as_typed(tmp_path, args, line):
    r = cpbench("sweep", "--cp", "2", "--layers", "2", "--device", "cpu", "--out", tmp_path / "r", *args)
    assert r.returncode == 2 and r.stderr.strip() == line, r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("cmd, choices", [
    ("profile", "auto, torch, flashinfer-fa2, flashinfer-fa3, fa3, trtllm-fmha-v2, trtllm-gen, flex"),
    ("explain", "auto, flashinfer-fa2, flashinfer-fa3, trtllm-fmha-v2"),
])
def test_profile_and_explain_take_one_backend(cmd, choices):
    """A list (which sweep takes) gets its own line naming the choices, not click's 'Value error, ... is not
    one of'; an unknown name too. Both are checked before anything else (explain on CPU included)."""
    r = cpbench(cmd, "--backend", "torch,flashinfer-fa2", "--device", "cpu")
    assert r.returncode == 2 and r.stderr.strip() == (f"error: cpbench {cmd} takes one --backend, got "
                                                      "'torch,flashinfer-fa2': "
                                                      f"use one of {choices} (run it once per backend)"), r.stderr
    r = cpbench(cmd, "--backend", "nope", "--device", "cpu")
    assert r.returncode == 2 and r.stderr.strip() == f"error: unknown --backend 'nope': use one of {choices}", r.stderr
    assert f"--backend <{choices.replace(', ', '|')}>" in cpbench(cmd, "--help").stdout


def test_repeated_values_are_one_cell_and_a_plan_too_large_is_refused():
    from cpbench.domain.limits import MAX_CELLS

    c = parse_cells(cp="2,2,4", bs="1,1", extend_len="32,32,64", extend_lens=None, prefix=0, ranks="all",
                    default_bs="1", default_extend_len="32")
    assert (c.cp_sizes, c.bs_list, c.extend_len_list) == ([2, 4], [1], [32, 64]) and len(c.batches) == 2
    many = ",".join(str(i) for i in range(1, 101))
    with pytest.raises(CpbenchInputError, match=f"make 1000000 cells, more than {MAX_CELLS}"):
        parse_cells(cp="2,4,6,8,10,12,14,16,18,20", bs=many, extend_len=",".join(str(32 * i) for i in range(1, 1001)),
                    extend_lens=None, prefix=0, ranks="all", default_bs="1", default_extend_len="32")


def test_a_grid_of_millions_of_requests_is_refused_as_cpbench_grid_refuses_it():
    """The CLI and cpbench.grid share the limits (domain/limits.py): --bs 65536 at 300 extend lengths is 300
    cells but 19.7M requests over their batches, which were built before anything was checked."""
    ext = ",".join(str(64 + i) for i in range(300))
    with pytest.raises(CpbenchInputError, match=r"^--cp x --bs x --extend-len plan 19660800 requests over their "
                                                r"batches, more than 16777216: sweep fewer or smaller batches$"):
        parse_cells(cp="2", bs="65536", extend_len=ext, extend_lens=None, prefix=0, ranks="all", default_bs="1",
                    default_extend_len="32")


def test_a_length_draw_of_billions_of_requests_is_refused():
    c = parse_cells(cp="2", bs="65536", extend_len=None, extend_lens=None, prefix=0, ranks="all", default_bs="1",
                    default_extend_len="32")
    with pytest.raises(CpbenchInputError, match="draws 4294967296 requests"):
        workload_batches(c, lengths="dist:uniform:32:64", trace=None, prefix_hit=None, batches=65536, seed=0,
                         extend_len_given=False)
