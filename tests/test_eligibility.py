"""The CP eligibility rule by name or number (--cp-min-extend, --cp-min-tokens) in geometry, a sweep and its
report; cp_size 1 reads "no CP"."""

import json

import pytest
from clirun import cpbench

from cpbench.domain.eligibility import CpRule, parse_rule
from cpbench.domain.geometry import eligibility, rank_geometry
from cpbench.results.store import load_run
from cpbench.errors import CpbenchInputError

TINY = ["--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "16", "--page-size", "16", "--budget-ms", "5",
        "--no-profile"]


def test_pr_rule_mirrors_zigzag_can_apply():
    """SGLang PR #33137, layers/cp/zigzag.py ZigzagCPStrategy.can_apply: CP runs when every extend length is at
    least 2 * cp_size (each of the 2 * cp_size blocks gets a token)."""
    assert eligibility([11, 13], 4) == (True, "")
    ok, why = eligibility([7, 4096], 4)
    assert not ok and why.startswith("request 0 has 7 extend tokens < 2*cp_size = 8 (rule pr)")
    assert eligibility([8, 8], 4)[0] and not eligibility([8, 7], 4)[0]


def test_upstream_rule_needs_128_per_request():
    """Later upstream SGLang: every extend length >= max(128, 2 * cp_size): cpbench's own example batch (cp 4,
    extends 11 and 13) runs without CP there; at cp 128 the 2 * cp_size floor (256) wins."""
    up = parse_rule("upstream")
    ok, why = eligibility([11, 13], 4, up)
    assert not ok and "request 0 has 11 extend tokens < max(128, 2*cp_size) = 128" in why
    assert eligibility([128, 128], 4, up) == (True, "")
    assert up.need(4) == 128 and up.need(128) == 256
    assert not eligibility([255, 300], 128, up)[0]


def test_numeric_rule_and_total_token_minimum():
    """A fork's threshold N means max(N, 2 * cp_size) per request; --cp-min-tokens adds a batch total."""
    r = parse_rule("64")
    assert r == CpRule("64", 0) and r.need(4) == 64 and r.need(64) == 128
    assert not eligibility([63, 100], 4, r)[0] and eligibility([64, 100], 4, r)[0]
    t = parse_rule("pr", 1000)
    ok, why = eligibility([400, 500], 4, t)
    assert not ok and "the batch has 900 extend tokens < --cp-min-tokens 1000" in why
    assert eligibility([500, 500], 4, t)[0]


def test_cp_size_1_is_no_cp():
    """layers/cp/base.py init_cp_strategy: at cp_size 1 SGLang builds no CP strategy at all."""
    ok, why = eligibility([5], 1, parse_rule("upstream"))
    assert ok and why.startswith("no CP")  # a plain prefill: runnable, but not CP
    js = rank_geometry([5, 9], None, 1, 0).to_json()
    assert js["eligible"] is False and js["reason"].startswith("no CP (cp_size 1)") and js["kv_len_prev"] is None


@pytest.mark.parametrize("args,needle", [
    (("bogus",), "--cp-min-extend must be pr"), (("0",), "--cp-min-extend must be pr"),
    (("pr", -1), "--cp-min-tokens must be"),
])
def test_bad_rules(args, needle):
    with pytest.raises(CpbenchInputError, match=needle):
        parse_rule(*args)


@pytest.mark.parametrize("option,value,message", [
    ("--cp-min-extend", "99999999999999999999", "--cp-min-extend must be pr (2*cp_size, SGLang PR #33137), upstream "
     "(max(128, 2*cp_size)) or a number of tokens in [1, 2147483647], got '99999999999999999999'"),
    ("--cp-min-tokens", "99999999999999999999", "--cp-min-tokens must be a number of tokens in [0, 2147483647] "
     "(0: none), got 99999999999999999999"),
])
def test_a_huge_rule_value_names_the_allowed_range(option, value, message):
    r = cpbench("geometry", "--cp", "4", "--extend-lens", "11,13", option, value)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {message}", r.stderr
    assert cpbench("geometry", "--cp", "4", "--extend-lens", "11,13", option, "2147483647").returncode == 0


def test_geometry_cli_follows_the_rule():
    r = cpbench("geometry", "--cp", "4", "--extend", "11,13", "--json", "--cp-min-extend", "upstream")
    rows = json.loads(r.stdout)
    assert r.returncode == 0 and {o["eligible"] for o in rows} == {False}
    assert "< max(128, 2*cp_size) = 128 (rule upstream)" in rows[0]["reason"]
    r = cpbench("geometry", "--cp", "1", "--extend", "11,13")
    assert r.returncode == 0 and "no CP (cp_size 1)" in r.stdout and "eligible" not in r.stdout
    r = cpbench("geometry", "--cp-min-extend", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_sweep_share_follows_the_rule(tmp_path, text_reports):
    """One batch of 16 tokens, one of 130 at cp 2: both run with CP under pr; under upstream only the 130."""
    out = tmp_path / "r"
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--lengths", "16,130",
                "--cp-min-extend", "upstream", "--out", str(out), *TINY)
    assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
    df, manifest = load_run(out)
    assert manifest["config"]["cp_min_extend"] == "upstream" and manifest["config"]["cp_min_tokens"] == 0
    status = df.groupby("max_extend_len")["status"].agg(set).to_dict()
    assert status == {16: {"ineligible"}, 130: {"ok"}}
    assert "rule upstream" in df.loc[df["max_extend_len"] == 16, "reason"].iloc[0]
    report = (out / "report.md").read_text()
    assert ("1 of 2 requests (50 %) in 1 of 2 batch(es) ran with CP; the others are in batches SGLang runs "
            "without CP under rule upstream: every extend >= max(128, 2*cp_size) = 128") in report
    r = cpbench("sweep", "--device", "cpu", "--cp", "2", "--bs", "1", "--lengths", "16,130", "--out", str(out),
                "--resume", *TINY)
    assert r.returncode == 2 and "was measured with --cp-min-extend upstream, not --cp-min-extend pr" in r.stderr


def test_a_sweep_no_batch_of_can_run_names_the_length_that_would():
    """#33: `cpbench sweep --cp-min-extend upstream --swa-pool` (a README example) exited 2 on CPU without
    saying which length passes."""
    r = cpbench("sweep", "--cp-min-extend", "upstream", "--swa-pool", "--device", "cpu")
    assert r.returncode == 2 and r.stderr.strip().endswith("use --extend-len 128 or more")
