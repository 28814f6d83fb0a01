"""Nsight Compute raw CSV: parsing, grouping kernels into attention calls, argv, refusals."""

from pathlib import Path

import pytest

from cpbench.profiles.kernels import ProfileError
from cpbench.profiles.ncu import (METRICS, check_ncu_output, group_calls, ncu_argv, nvtx_include, nvtx_ranges,
                                  parse_ncu_csv, parse_ncu_version, tiles_from_kernel_name)

FIX = Path(__file__).parent / "fixtures"
FA2 = ("batchprefillwithpagedkvcachekernel",)


def test_synthetic_fa2_csv_parses_every_kernel():
    ks = parse_ncu_csv((FIX / "ncu_raw_synthetic_fa2.csv").read_text())
    assert len(ks) == 10 and [k["id"] for k in ks] == list(range(10))
    first = ks[0]
    assert first["name"].startswith("void flashinfer::BatchPrefillWithPagedKVCacheKernel<")
    assert first["duration"] == pytest.approx(31.2)  # "31,200" nsecond -> µs
    assert (first["grid"], first["block"], first["regs"], first["smem_dynamic"]) == (256, 128, 128, 67584)
    assert (first["waves"], first["occupancy_pct"], first["sm_pct"], first["dram_pct"], first["sms"]) == \
        (0.97, 21.3, 18.2, 9.1, 132)
    assert first["block_size"] == "(128, 1, 1)" and first["units"]["gpu__time_duration.sum"] == "nsecond"
    assert ks[7]["duration"] == pytest.approx(6.4) and "MergeStates" in ks[7]["name"]


def test_units_row_optional_thousands_separators_and_na():
    text = ('"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size"\n'
            '"0","k<a, b>","1,234,567","n/a"\n')
    [k] = parse_ncu_csv(text)
    assert k["duration"] == pytest.approx(1234.567)  # no units row: ns assumed
    assert k["grid"] is None and k["waves"] is None  # n/a, and a metric not in the table


def test_usecond_unit_row():
    text = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","usecond"\n"3","k","12.5"\n'
    assert parse_ncu_csv(text)[0]["duration"] == 12.5


def test_no_table_or_no_metric_is_an_error():
    with pytest.raises(ProfileError, match="no ncu raw CSV"):
        parse_ncu_csv("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n")
    with pytest.raises(ProfileError, match="none of the metrics"):
        parse_ncu_csv('"ID","Kernel Name","foo"\n"0","k","1"\n')


def test_group_calls_attaches_merges_to_their_call():
    ks = parse_ncu_csv((FIX / "ncu_raw_synthetic_fa2.csv").read_text())
    calls = ["prev", "next", "prev", "next", "combined", "combined"]
    groups = group_calls(ks, calls, FA2)
    assert [g["call"] for g in groups] == calls
    assert [len(g["kernels"]) for g in groups] == [2, 2, 2, 2, 1, 1]
    assert [k["kind"] for k in groups[0]["kernels"]] == ["attention", "merge"]
    with pytest.raises(ProfileError, match="profiled 6 attention kernels, expected 5"):
        group_calls(ks, calls[:5], FA2)
    with pytest.raises(ProfileError, match="before any attention kernel"):
        group_calls(ks[1:], calls, FA2)


def test_argv_and_version():
    argv = ncu_argv("/x/ncu", ["python", "-m", "cpbench"], ["a r0 two-call graph", "a r0 fused graph"],
                    Path("/tmp/l.csv"))
    assert argv[:2] == ["/x/ncu", "--nvtx"]
    assert argv.count("--nvtx-include") == 2 and "cpbench@a r0 fused graph/" in argv
    i = argv.index("--metrics")
    assert argv[i + 1].split(",") == list(METRICS)
    for flag in ("--csv", "--target-processes", "--cache-control", "--clock-control", "--log-file"):
        assert flag in argv
    assert argv[-3:] == ["python", "-m", "cpbench"]
    assert nvtx_include("layer0") == "cpbench@layer0/"
    assert parse_ncu_version("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025\n"
                             "Version 2025.3.1.0 (build 36398880) (public-release)") == "2025.3.1.0"
    assert parse_ncu_version("") is None


def test_permission_error_is_named():
    check_ncu_output("==PROF== Connected\n")
    with pytest.raises(ProfileError, match="ERR_NVGPUCTRPERM.*cpbench profile"):
        check_ncu_output("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                         "Performance Counters on the target device 0.")


def test_h200_fixtures_parse():
    # real ncu 2025.3.1 raw CSV from an H200 (columns trimmed to the metrics cpbench asks for): gpt-oss-120b,
    # cp 4, bs 1, 2048 tokens, layer 0 of ranks 0 and 3, two-call then fused
    fa3 = parse_ncu_csv((FIX / "h200_ncu_fa3_raw_trimmed.csv").read_text())
    assert len(fa3) == 6 and [k["duration"] for k in fa3] == pytest.approx([14.432, 18.784, 47.36, 19.168, 19.456,
                                                                               32.576])
    assert {(k["grid"], k["block"], k["waves"], k["sms"]) for k in fa3} == {(132, 512, 1.0, 132)}  # persistent
    assert fa3[2]["smem_dynamic"] == 73808 and fa3[2]["units"]["gpu__time_duration.sum"] == "ns"
    assert tiles_from_kernel_name(fa3[0]["name"]) == (192, 96)
    assert nvtx_ranges(fa3[2]["nvtx"]) == [("cpbench", "cp4 bs1 seq2048 r0 fused eager"), ("cpbench", "layer0"),
                                           ("cpbench", "combined")]
    fa2 = parse_ncu_csv((FIX / "h200_ncu_fa2_raw_trimmed.csv").read_text())
    assert len(fa2) == 10 and fa2[1]["grid"] == 1320 and fa2[1]["duration"] == pytest.approx(92.256)
    assert tiles_from_kernel_name(fa2[0]["name"]) == (128, 64)  # CTA_TILE_Q 128, NUM_MMA_KV 4 x NUM_WARPS_KV 1 x 16
    assert tiles_from_kernel_name(fa2[1]["name"]) is None  # the merge kernel has no attention tiles
    groups = group_calls(fa2, ["prev", "next", "combined"] * 2, FA2)
    assert [[k["kind"] for k in g["kernels"]] for g in groups] == [["attention", "merge"], ["attention", "merge"],
                                                                  ["attention"]] * 2


@pytest.mark.parametrize("backend,fixture,calls", [("flashinfer-fa3", "h200_ncu_fa3_raw_trimmed.csv", 6),
                                                   ("flashinfer-fa2", "h200_ncu_fa2_raw_trimmed.csv", 6)])
def test_the_registrys_patterns_find_the_attention_kernels_ncu_names(backend, fixture, calls):
    """ncu names kernels without their namespaces: a namespaced pattern (flashinfer-fa3's
    ``flashinfer::prefillwithkvcachekernel``) still finds them."""
    from cpbench.kernels.backends.registry import kernel_patterns

    groups = group_calls(parse_ncu_csv((FIX / fixture).read_text()), ["prev", "next", "combined"] * 2,
                         kernel_patterns(backend))
    assert len(groups) == calls and all(g["kernels"][0]["kind"] == "attention" for g in groups)


def test_group_calls_checks_the_nvtx_call_range():
    fa3 = parse_ncu_csv((FIX / "h200_ncu_fa3_raw_trimmed.csv").read_text())
    with pytest.raises(ProfileError, match="inside NVTX range 'prev', expected call 'next'"):
        group_calls(fa3, ["next", "prev", "combined"] * 2, ("prefillwithkvcachekernel",))
