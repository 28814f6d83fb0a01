"""Request-length mixes, traces and prefix-cache hits (spec.lengths), and the FLOPs a prefix hit gives."""

import json
import re

import pytest

from cpbench.domain.flops import forward_flops
from cpbench.domain.geometry import rank_geometry
from cpbench.domain.lengths import LengthMix, draw, parse_lengths, plan_batches, read_trace, with_prefix_hit
from cpbench.domain.models import get_preset
from cpbench.domain.tp import split_heads
from cpbench.errors import CpbenchInputError


def test_parse_forms():
    assert parse_lengths("dist:uniform:100:200") == LengthMix("uniform", (100, 200))
    assert parse_lengths("dist:lognormal:4096:1.0") == LengthMix("lognormal", (4096.0, 1.0))
    assert parse_lengths("3000, 8192,500") == LengthMix("list", (3000, 8192, 500))


@pytest.mark.parametrize("text,needle", [
    ("dist:uniform:200:100", "LO <= HI"), ("dist:zipf:1:2", "unknown distribution 'zipf'"),
    ("dist:lognormal:0:1", "MEDIAN must be in"), ("dist:lognormal:100:9", "SIGMA"),
    ("dist:uniform:1", "use dist:uniform:LO:HI"), ("abc", "not a list of lengths"), ("0,5", "got 0"),
])
def test_parse_refusals(text, needle):
    with pytest.raises(CpbenchInputError, match=re.escape(needle)):
        parse_lengths(text)


def test_seeded_mixes_are_reproducible():
    for text in ("dist:uniform:1000:9000", "dist:lognormal:4096:1.0"):
        mix = parse_lengths(text)
        a = plan_batches([1, 4], mix=mix, seed=7)
        assert a == plan_batches([1, 4], mix=mix, seed=7)  # same seed, same lengths
        assert a != plan_batches([1, 4], mix=mix, seed=8)  # another seed, other lengths
        assert [len(e) for e, _ in a] == [1] * 4 + [4] * 4  # 4 batches per bs by default
        assert all(p == (0,) * len(e) for e, p in a)
    lo, hi = 1000, 9000
    vals = [x for e, _ in plan_batches([16], mix=parse_lengths(f"dist:uniform:{lo}:{hi}"), batches=8, seed=1) for x in e]
    assert len(vals) == 128 and lo <= min(vals) and max(vals) <= hi and len(set(vals)) > 100


def test_lognormal_median():
    import random

    vals = sorted(draw(LengthMix("lognormal", (4096.0, 1.0)), 2001, random.Random(0)))
    assert 3500 < vals[1000] < 4700  # the sample median of 2001 draws lies near 4096


def test_fixed_list_is_cut_in_order():
    mix = parse_lengths("30,40,50,60,70")
    assert plan_batches([2], mix=mix) == [((30, 40), (0, 0)), ((50, 60), (0, 0)), ((70,), (0,))]
    assert plan_batches([2], mix=mix, batches=1, prefix=8) == [((30, 40), (8, 8))]


def test_prefix_hit_splits_each_request():
    assert with_prefix_hit([1000, 7, 1], 0.25) == [(750, 250), (6, 1), (1, 0)]
    assert plan_batches([2], mix=parse_lengths("1000,400"), prefix_hit=0.5) == [((500, 200), (500, 200))]
    with pytest.raises(CpbenchInputError, match=r"\[0, 1\)"):
        with_prefix_hit([10], 1.0)
    with pytest.raises(CpbenchInputError, match="keep one"):
        plan_batches([1], mix=parse_lengths("10"), prefix=4, prefix_hit=0.5)


def test_prefix_hit_flops_by_hand():
    """gpt-oss-120b at TP 8 (8 q heads, head_dim 64), one request of 1000 prompt tokens with 25 % cached:
    prefix 250, extend 750, cp_size 1. Query i (0..749) sits at position 250 + i and attends
    - in a full layer: positions + 1 keys -> sum_{p=250}^{999} (p + 1) = (251 + 1000) * 750 / 2 = 469125 pairs;
    - in a window layer (window_left 127): every position >= 127 sees 128 keys -> 750 * 128 = 96000 pairs.
    18 layers of each kind, 4 FLOPs per pair per head per head_dim element (QK^T and PV)."""
    model = split_heads(get_preset("gpt-oss-120b"), 8)
    ((ext, pre),) = plan_batches([1], mix=parse_lengths("1000"), prefix_hit=0.25)
    assert (ext, pre) == ((750,), (250,))
    g = rank_geometry(ext, pre, 1, 0)
    assert forward_flops(model, g) == 18 * (469125 + 96000) * 4 * 8 * 64
    # at cp 2 the four ranks' blocks add up to the same work: rank 0 holds blocks 0 and 3, rank 1 blocks 1 and 2
    two = sum(forward_flops(model, rank_geometry(ext, pre, 2, r)) for r in range(2))
    assert two == forward_flops(model, g)


def test_trace_csv_and_jsonl(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("# requests\ninput_len,cached_len,output_len\n1000,250,10\n\n64,0,1\n")
    assert read_trace(csv_path) == ([750, 64], [250, 0])
    jl = tmp_path / "t.jsonl"
    jl.write_text(json.dumps({"extend_len": 12, "prefix_len": 3}) + "\n" + json.dumps({"extend_len": 9, "prefix_len": 0}))
    assert read_trace(jl) == ([12, 9], [3, 0])
    bare = tmp_path / "b.csv"
    bare.write_text("extend_len\n100\n200\n")
    assert read_trace(bare) == ([100, 200], None)
    assert plan_batches([2], trace=read_trace(bare), prefix_hit=0.5) == [((50, 100), (50, 100))]
    with pytest.raises(CpbenchInputError, match="drop --prefix"):
        plan_batches([2], trace=read_trace(csv_path), prefix_hit=0.5)


@pytest.mark.parametrize("text,needle", [
    ("tokens\n5\n", "has none of the columns extend_len, input_len, prompt_tokens: name the request's tokens "
                    "with one of them (cached tokens, optional: prefix_len, cached_len, cached_tokens)"),
    ("input_len,cached_len\n10,10\n", "line 2: cached_len 10 must be < "),
    ("extend_len\n12.5\n", "line 2: extend_len must be an integer"), ("", "holds no requests"),
    ('{"extend_len": 3}\n[1]\n', "line 2 is not a JSON object"), ("extend_len\n0\n", "lengths must be in"),
    ('{"extend_len": 3}\n{"extend_len": 3\n', "line 2 is not valid JSON"),
    ('{"extend_len": 3}\n{"extend_len": 1e400}\n', "line 2: extend_len must be an integer number of tokens, got inf"),
    ("# lengths\n[2048, 0]\n[512, 64]\n", "line 2 is a JSON array: write one JSON object per line with named lengths"),
    ('{"extend_len": ' + "9" * 5000 + "}\n", "line 1 is not JSON cpbench can read: ValueError"),
    ('{"extend_len": 3}\n{"a": ' + "[" * 100000 + "\n", "line 2 is not JSON cpbench can read: RecursionError"),
])
def test_trace_refusals(tmp_path, text, needle):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(CpbenchInputError, match=re.escape(needle)):
        read_trace(p)
    with pytest.raises(CpbenchInputError, match="cannot read --trace"):
        read_trace(tmp_path / "missing.csv")
    with pytest.raises(CpbenchInputError, match="^--trace is empty: give a CSV or JSONL file of requests$"):
        read_trace(" ")


def test_a_trace_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    csv_path = tmp_path / "bom.csv"
    csv_path.write_text("extend_len,prefix_len\n100,10\n200,0\n", encoding="utf-8-sig")  # Excel's "CSV UTF-8"
    assert csv_path.read_bytes().startswith(b"\xef\xbb\xbfextend_len")
    assert read_trace(csv_path) == ([100, 200], [10, 0])
    jl = tmp_path / "bom.jsonl"
    jl.write_text(json.dumps({"input_len": 50, "cached_len": 20}) + "\n", encoding="utf-8-sig")
    assert read_trace(jl) == ([30], [20])


def test_a_trace_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    with pytest.raises(CpbenchInputError, match="is not a regular file"):
        read_trace(fifo)
