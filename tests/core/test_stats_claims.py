import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from iclr26.core.claims import check_claim, claims_markdown, verdict
from iclr26.core.errors import ConfigError
from iclr26.core.stats import Estimate, aggregate, effect, iqm


def test_mean_interval_matches_scipy():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    est = aggregate(x, "mean")
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    assert est.value == pytest.approx(3.5)
    assert (est.lo, est.hi) == pytest.approx((lo, hi))


def test_iqm_drops_the_outer_quartiles():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)


def test_bootstrap_is_reproducible():
    x = np.arange(10.0)
    assert aggregate(x, "iqm") == aggregate(x, "iqm")


def test_paired_effect_uses_per_seed_differences():
    base = np.array([10.0, 20.0, 30.0])
    est = effect(base + np.array([1.0, 1.1, 0.9]), base, "paired_t")
    assert est.value == pytest.approx(1.0)
    assert 0.5 < est.lo < 1.0 < est.hi < 1.5  # unpaired, the seed spread would swamp it
    assert effect(base + 1.0, base, "welch_t").lo < 0


@pytest.mark.parametrize("lo,hi,direction,expected", [
    (0.1, 0.5, "higher", "holds"), (-0.5, -0.1, "higher", "not reproduced"), (-0.1, 0.3, "higher", "inconclusive"),
    (-0.5, -0.1, "lower", "holds"), (0.1, 0.5, "lower", "not reproduced"), (float("nan"), 1, "lower", "inconclusive"),
])
def test_verdicts(lo, hi, direction, expected):
    assert verdict(Estimate(0.0, lo, hi, 3, ""), direction, 0.0) == expected


def test_within_band():
    est = lambda lo, hi: Estimate((lo + hi) / 2, lo, hi, 1, "")  # noqa: E731
    assert verdict(est(0.9, 1.1), "within", 1.0, 0.25) == "holds"
    assert verdict(est(1.5, 1.9), "within", 1.0, 0.25) == "not reproduced"
    assert verdict(est(1.1, 1.4), "within", 1.0, 0.25) == "inconclusive"
    with pytest.raises(ConfigError, match="tolerance"):
        verdict(est(1, 1), "within", 1.0)


def _records():
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(6):
        shared = rng.normal(0, 5)  # seed effect shared by both methods: pairing removes it
        rows.append({"method": "base", "seed": seed, "env": "a", "score": 10 + shared})
        rows.append({"method": "new", "seed": seed, "env": "a", "score": 11 + shared + rng.normal(0, 0.1)})
        rows.append({"method": "new", "seed": seed, "env": "b", "score": 0.0})
    return pd.DataFrame(rows)


def test_claim_against_baseline_is_computed_from_records():
    spec = {"id": "c1", "claim": "new beats base", "metric": "score", "where": {"env": "a"}, "method": "new",
            "baseline": "base", "direction": "higher", "test": "paired_t"}
    out = check_claim(spec, _records())
    assert out["verdict"] == "holds"
    assert out["estimate"]["value"] == pytest.approx(1.0, abs=0.1)
    assert out["estimate"]["n"] == 6
    flipped = check_claim({**spec, "direction": "lower"}, _records())
    assert flipped["verdict"] == "not reproduced"


def test_claim_against_value_with_fit_interval():
    records = pd.DataFrame([{"method": "m", "seed": 0, "slope": -2.02, "slope_lo": -2.1, "slope_hi": -1.95}])
    spec = {"id": "s", "claim": "rate", "metric": "slope", "method": "m", "value": -2.0, "tolerance": 0.25,
            "direction": "within", "test": "fit"}
    assert check_claim(spec, records)["verdict"] == "holds"


@pytest.mark.parametrize("change,message", [
    ({"metric": "nope"}, "metric 'nope'"),
    ({"test": "magic"}, "test 'magic'"),
    ({"value": 1.0}, "exactly one of"),
    ({"where": {"planet": "mars"}}, "filter key 'planet'"),
])
def test_bad_claim_specs_name_the_problem(change, message):
    spec = {"id": "c1", "claim": "x", "metric": "score", "method": "new", "baseline": "base",
            "direction": "higher", "test": "paired_t", **change}
    with pytest.raises(ConfigError, match=message):
        check_claim(spec, _records())


def test_claims_markdown_counts_verdicts():
    spec = {"id": "c1", "claim": "new beats base", "metric": "score", "where": {"env": "a"}, "method": "new",
            "baseline": "base", "direction": "higher", "test": "paired_t", "paper": "+1.0"}
    text = claims_markdown([{"paper": "toy", "scale": "tiny", "claims": [check_claim(spec, _records())]}])
    assert "Totals: 1 holds." in text
    assert "| toy | tiny | new beats base | +1.0 |" in text
    assert math.isfinite(float(text.split("new - base: ")[1].split(" ")[0]))


def test_bootstrap_interval_agrees_with_the_t_interval_on_normal_data():
    x = np.random.default_rng(1).normal(5.0, 2.0, 200)
    t_est = aggregate(x, "mean")
    boot = effect(x, np.zeros(50), "bootstrap_mean")
    assert boot.lo == pytest.approx(t_est.lo, abs=0.1) and boot.hi == pytest.approx(t_est.hi, abs=0.1)
    iqm_est = aggregate(x, "iqm")
    assert iqm_est.lo < 5.0 < iqm_est.hi


# ----------------------------------------------------------------------------- new outcomes
CLAIM = {"id": "c1", "claim": "new beats base", "metric": "score", "where": {"env": "a"}, "method": "new",
         "baseline": "base", "direction": "higher", "test": "paired_t"}


def test_a_claims_note_is_printed_beside_its_verdict():
    from iclr26.core.claims import outcome_text

    out = check_claim({**CLAIM, "note": "on a 48-seed pool this comparison is inconclusive."}, _records())
    assert outcome_text(out) == f"**{out['verdict']}** (on a 48-seed pool this comparison is inconclusive)"


def test_failed_precondition_makes_the_claim_untestable_with_the_measured_reason():
    pre = {"claim": "new is below base", "metric": "score", "where": {"env": "a"}, "method": "new",
           "baseline": "base", "direction": "lower", "test": "paired_t"}
    out = check_claim({**CLAIM, "precondition": pre}, _records())
    assert out["verdict"] == "untestable here"
    assert out["reason"].startswith("precondition not met (new is below base): new - base = 1")
    assert out["precondition"]["verdict"] == "not reproduced"
    assert out["estimate"]["value"] == pytest.approx(1.0, abs=0.1)  # the test itself is still shown
    met = check_claim({**CLAIM, "precondition": {**pre, "direction": "higher"}}, _records())
    assert met["verdict"] == "holds" and "reason" not in met and met["precondition"]["verdict"] == "holds"


def test_precondition_against_a_value_and_its_spec_is_checked():
    pre = {"metric": "score", "where": {"env": "b"}, "method": "new", "value": 1.0, "direction": "higher",
           "test": "t"}
    out = check_claim({**CLAIM, "precondition": pre}, _records())
    # every seed of env b scores 0: a zero-width interval is not evidence either way
    assert out["reason"] == ("precondition not met (score higher): new vs 1.0 = 0 [0, 0], no spread across seeds: "
                             "every seed gives new = 0")
    with pytest.raises(ConfigError, match="precondition lacks key 'test'"):
        check_claim({**CLAIM, "precondition": {k: v for k, v in pre.items() if k != "test"}}, _records())


def test_too_few_seeds_for_the_test_is_untestable_not_inconclusive():
    few = _records()[lambda r: r["seed"] < 2]
    out = check_claim(CLAIM, few)
    assert out["verdict"] == "untestable here" and out["reason"] == "2 seeds; paired_t is valid from 3"


def test_a_bootstrap_against_a_value_is_refused():
    spec = {"id": "v", "claim": "x", "metric": "score", "method": "new", "value": 0.0, "direction": "higher",
            "test": "bootstrap_mean"}
    with pytest.raises(ConfigError, match="use t"):
        check_claim(spec, _records())
    assert check_claim({**spec, "test": "t"}, _records())["estimate"]["how"] == "one-sample t, 95% CI of the mean"


def test_a_check_is_shown_with_its_number_but_not_counted():
    check = check_claim({**CLAIM, "id": "c2", "claim": "parts sum to the total", "kind": "check"}, _records())
    assert check["kind"] == "check" and check["verdict"] == "holds"
    pre = {"metric": "score", "where": {"env": "a"}, "method": "new", "baseline": "base", "direction": "lower",
           "test": "paired_t"}
    untestable = check_claim({**CLAIM, "id": "c3", "claim": "needs a premise", "precondition": pre}, _records())
    text = claims_markdown([{"paper": "toy", "scale": "tiny",
                             "claims": [check_claim(CLAIM, _records()), check, untestable]}])
    assert "Totals: 1 holds, 1 untestable here." in text
    section = text.split("## Checks and probes")[1]
    assert "parts sum to the total" in section and "new - base: 1" in section and "**holds**" in section
    assert "parts sum to the total" not in text.split("## Checks and probes")[0]
    assert "**untestable here**: precondition not met" in text
    with pytest.raises(ConfigError, match="kind 'maybe'"):
        check_claim({**CLAIM, "kind": "maybe"}, _records())


def test_small_sample_cells_are_labelled_as_ranges_not_confidence_intervals():
    est = aggregate([3.0, 1.0, 2.0], "median")
    assert (est.value, est.lo, est.hi) == (2.0, 1.0, 3.0)
    assert est.how == "median, range of 3 seeds (too few for a 95% CI)" and "95% CI" not in est.how.split("(")[0]
    assert "bootstrap 95% CI" in aggregate(np.arange(8.0), "iqm").how
    boot = effect(np.arange(8.0), np.arange(8.0), "bootstrap_iqm")
    assert "bootstrap" in boot.how and boot.lo < 0 < boot.hi


def test_every_seed_gate_holds_only_when_every_seed_passes():
    records = _records()
    gate = {"claim": "new above base on every seed", "metric": "score", "where": {"env": "a"}, "method": "new",
            "baseline": "base", "direction": "higher", "test": "every_seed"}
    diffs = (records.query("method == 'new' and env == 'a'")["score"].to_numpy()
             - records.query("method == 'base'")["score"].to_numpy())
    out = check_claim({**CLAIM, "precondition": gate}, records)
    assert out["precondition"]["verdict"] == "holds"
    assert out["precondition"]["estimate"]["lo"] == pytest.approx(diffs.min())
    assert out["precondition"]["estimate"]["hi"] == pytest.approx(diffs.max())
    # one seed below the line is enough to fail the gate, although the mean stays well above it
    one_fails = records.copy()
    one_fails.loc[(one_fails["method"] == "new") & (one_fails["seed"] == 3) & (one_fails["env"] == "a"), "score"] -= 5
    failed = check_claim({**CLAIM, "precondition": gate}, one_fails)
    assert failed["precondition"]["verdict"] == "inconclusive" and failed["verdict"] == "untestable here"
    assert failed["precondition"]["estimate"]["value"] > 0
    low = diffs[3] - 5
    assert failed["reason"] == (f"precondition not met (new above base on every seed): new - base fails on "
                                f"seed 3 ({low:.3g}) (the line: 0)")
    # a seed without a value fails the gate too
    no_value = records.copy()
    no_value.loc[(no_value["method"] == "new") & (no_value["seed"] == 2) & (no_value["env"] == "a"), "score"] = None
    missing = check_claim({**CLAIM, "precondition": gate}, no_value)
    assert missing["verdict"] == "untestable here" and "seed 2 (no value)" in missing["reason"]
    against_value = {"metric": "score", "where": {"env": "b"}, "method": "new", "value": -1.0,
                     "direction": "higher", "test": "every_seed"}
    assert check_claim({**CLAIM, "precondition": against_value}, records)["precondition"]["verdict"] == "holds"


def test_every_seed_is_refused_as_a_claims_test_but_allowed_in_a_check():
    spec = {**CLAIM, "test": "every_seed"}
    with pytest.raises(ConfigError, match="is a gate, not inference"):
        check_claim(spec, _records())
    assert check_claim({**spec, "kind": "check"}, _records())["kind"] == "check"


# ----------------------------------------------------------------------------- degenerate data (issue 27)
def _arms(method, base, metric="accuracy"):
    return pd.DataFrame([{"method": m, "seed": s, metric: v} for m, values in (("new", method), ("base", base))
                         for s, v in enumerate(values)])


KEEPS = {"id": "keeps", "claim": "new keeps accuracy", "metric": "accuracy", "method": "new", "baseline": "base",
         "direction": "within", "value": None, "tolerance": 0.05, "test": "paired_t"}
KEEPS.pop("value")
RANGE = {"metric_range": {"accuracy": [0, 1]}, "slug": "toy", "scale": "tiny", "seeds": [0, 1, 2]}


def test_no_spread_across_seeds_is_untestable_and_says_it_is_at_the_ceiling():
    out = check_claim(KEEPS, _arms([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), {**RANGE, "metric_range": {}})
    assert out["verdict"] == "untestable here"      # the [0, 0] interval would have said "holds"
    assert out["reason"] == "no spread across seeds: every seed gives new = 1 and base = 1"
    higher = {**KEEPS, "direction": "higher"}
    higher.pop("tolerance")
    out = check_claim(higher, _arms([1.0, 1.0, 1.0], [0.5, 0.5, 0.5]), RANGE)
    assert out["reason"] == ("no spread across seeds: every seed gives new = 1 (at the ceiling) and base = 0.5")
    out = check_claim(higher, _arms([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), RANGE)
    assert "new = 0 (at the floor) and base = 0 (at the floor)" in out["reason"]
    out = check_claim(higher, _arms([0.6, 0.7, 0.8], [0.5, 0.6, 0.7]), RANGE)    # spread, a constant difference
    assert out["reason"] == "no spread across seeds: every seed gives new - base = 0.1"
    assert check_claim(higher, _arms([0.6, 0.8, 0.9], [0.5, 0.6, 0.7]), RANGE)["verdict"] == "holds"


def test_a_tolerance_claim_needs_headroom_below_the_ceiling():
    near = _arms([0.97, 0.99, 0.96], [0.98, 0.99, 0.97])      # base 0.98: within 0.05 of the ceiling
    out = check_claim(KEEPS, near, RANGE)
    assert out["verdict"] == "untestable here"
    assert out["reason"] == "no headroom: base (accuracy) = 0.98 is within the tolerance 0.05 of the ceiling 1"
    room = _arms([0.80, 0.82, 0.79], [0.81, 0.82, 0.80])
    assert check_claim(KEEPS, room, RANGE)["verdict"] == "holds"
    assert check_claim(KEEPS, near, {**RANGE, "metric_range": {}})["verdict"] == "holds"   # no range declared
    floor = check_claim({**KEEPS, "metric": "accuracy"}, _arms([0.02, 0.03, 0.01], [0.02, 0.03, 0.02]), RANGE)
    assert floor["reason"].endswith("of the floor 0")


def test_an_indicator_metric_ranges_over_zero_and_one():
    from iclr26.core.claims import metric_range

    assert metric_range({"indicators": ["reached"]}, "reached") == (0.0, 1.0)
    assert metric_range({"metric_range": {"x": [None, 5]}}, "x") == (None, 5.0)
    assert metric_range(None, "x") == (None, None)


def test_fit_without_its_own_interval_is_a_config_error():
    spec = {"id": "f", "claim": "slope below 1", "metric": "slope", "method": "new", "value": 1.0,
            "direction": "lower", "test": "fit"}
    records = pd.DataFrame([{"method": "new", "seed": 0, "slope": 0.5}])
    with pytest.raises(ConfigError, match="slope_lo and slope_hi"):
        check_claim(spec, records)
    with pytest.raises(ValueError, match="own 95% interval"):
        aggregate([0.5], "fit")
    ok = records.assign(slope_lo=0.4, slope_hi=0.6)
    assert check_claim(spec, ok)["verdict"] == "holds"
    wide = check_claim(spec, records.assign(slope_lo=0.4, slope_hi=1.6))
    assert wide["verdict"] == "inconclusive" and wide["seeds_needed"]["text"].startswith("more seeds would not")


MARGIN = {**CLAIM, "margin": {"value": 0.5, "why": "half the paper's +1.0"}}


def _near_zero(noise=0.05, n=12, shift=0.0):
    rng = np.random.default_rng(1)
    rows = []
    for seed in range(n):
        shared = rng.normal(0, 5)
        rows.append({"method": "base", "seed": seed, "env": "a", "score": 10 + shared})
        rows.append({"method": "new", "seed": seed, "env": "a", "score": 10 + shift + shared + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_an_effect_inside_the_margin_is_no_effect():
    out = check_claim(MARGIN, _near_zero(), RANGE)
    assert out["verdict"] == "not reproduced (no effect)"
    assert -0.5 < out["estimate_tost"]["lo"] < out["estimate_tost"]["hi"] < 0.5
    assert "91%" in out["estimate_tost"]["how"]
    assert check_claim(CLAIM, _near_zero(), RANGE)["verdict"] == "inconclusive"     # no margin: no such outcome
    assert check_claim(MARGIN, _records(), RANGE)["verdict"] == "holds"             # +1 is beyond the margin
    wide = check_claim(MARGIN, _near_zero(noise=1.0, n=4), RANGE)
    assert wide["verdict"] == "inconclusive"                                         # too noisy to show either


def test_an_inconclusive_claim_says_how_many_seeds_would_decide_it():
    from iclr26.core.claims import outcome_text

    out = check_claim(MARGIN, _near_zero(noise=1.0, n=4, shift=0.6), {**RANGE, "seeds": [0, 1, 2, 3]})
    assert out["verdict"] == "inconclusive"
    needed = out["seeds_needed"]
    assert needed["decide"] and 4 < needed["decide"] <= 64
    assert needed["no_effect"] is None and "at least the margin" in needed["text"]
    seeds = ",".join(map(str, range(needed["decide"])))
    assert needed["command"] == f"snakemake --cores 2 all --config 'papers=[toy]' 'seeds=[{seeds}]'"
    assert needed["text"] in outcome_text(out)
    # the projection: at the decided n the t interval at the same spread excludes 0, at n - 1 it does not
    from iclr26.core.stats import projected_half_width

    half, n, gap = (out["estimate"]["hi"] - out["estimate"]["lo"]) / 2, 4, abs(out["estimate"]["value"])
    assert projected_half_width(half, n, needed["decide"]) < gap <= projected_half_width(half, n, needed["decide"] - 1)
    flat = check_claim(CLAIM, _near_zero(noise=1.0, n=4, shift=0.0), RANGE)["seeds_needed"]
    assert flat["decide"] is None and flat["capped"] and flat["text"].startswith("more than 64 seeds")
    assert "command" not in flat
