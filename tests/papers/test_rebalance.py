"""Card 03, ReBalance: calibration, the control function and its gates, steering at step boundaries,
and the offline full-scale path. (Every stage at smoke scale: tests/test_contract.py.)"""
import math

import numpy as np
import pytest

from iclr26.papers.rebalance import control

SHIPPED_7B = {"q25c": 0.666, "q75c": 0.928, "q25v": 0.00049, "q75v": 0.0099, "low_val_1": -1.19, "low_val_2": -2.34}


def test_control_function_meets_its_conditions_and_gates():
    ctl = control.Controller(SHIPPED_7B)
    assert ctl.baseline(0.666) == pytest.approx(-1.19, abs=1e-9)          # F(q25c) = low_val_1
    assert ctl.baseline(1.0) == pytest.approx(0.01, abs=1e-9)             # F(1) = 0.01
    assert ctl.baseline(0.928) == pytest.approx(0.0, abs=1e-9)            # F(q75c) = 0 (build_F)
    assert ctl.baseline(0.7) < ctl.baseline(0.9)                          # more confident, less pruning
    # overthinking corner (unsure and unstable): the aggressive magnitude low_val_2
    assert ctl.alpha(0.5, 0.05) == pytest.approx(-2.34, abs=1e-6)
    # underthinking corner (sure and stable): a push toward reflection, high_val_2
    assert ctl.alpha(1.0, 0.0) == pytest.approx(0.1, abs=1e-6)
    assert ctl.alpha(0.99, 0.0) == pytest.approx(ctl.baseline(0.99) + 0.1 - 0.01, abs=1e-6)
    # unsure but stable: no gate fires, alpha follows F alone
    assert ctl.alpha(0.6, 0.0) == pytest.approx(max(ctl.baseline(0.6), -2.34), abs=1e-6)
    for c in np.linspace(0, 1, 11):
        for v in (0.0, 0.005, 0.05):
            assert -2.34 - 1e-9 <= ctl.alpha(c, v) <= 0.1 + 1e-9


def test_each_steering_arm_turns_the_calibration_into_its_rule():
    method = {"slope": 1200.0, "high_val_2": 0.1}
    assert control.steering_rule("static_steering", SHIPPED_7B, method) == {"arm": "static_steering", "alpha": -1.19}
    chosen = {**SHIPPED_7B, "static": {"alpha": -0.6}}     # the fixed strength prepare chose on the calibration set
    assert control.steering_rule("static_steering", chosen, method) == {"arm": "static_steering", "alpha": -0.6}
    rule = control.steering_rule("rebalance", SHIPPED_7B, method)
    assert rule["k"] == pytest.approx(control.Controller(SHIPPED_7B).k)
    assert rule["F_q25c"] == pytest.approx(-1.19) and rule["F_1"] == pytest.approx(0.01)
    assert (rule["alpha_min"], rule["alpha_max"]) == (-2.34, 0.1)


def test_confidence_labels_vector_and_lda_magnitudes():
    assert control.step_confidence([math.log(0.5), math.log(0.5)]) == pytest.approx(0.5)
    assert control.variance_proxy(0.9, 0.5) == pytest.approx(0.04) and control.variance_proxy(0.9, None) == 0.0
    conf = np.array([0.1, 0.2, 0.5, 0.6, 0.9, 0.95, 0.97, 0.99])
    cue = np.array([0, 0, 1, 0, 0, 1, 0, 0], bool)
    pos, neg, q25, q75 = control.labels(conf, cue)
    assert pos.tolist() == [1, 1, 1, 0, 0, 1, 0, 0]          # cue or below q25
    assert neg.tolist() == [0, 0, 0, 0, 0, 0, 1, 1]          # no cue and above q75
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(8, 4))
    hidden[pos] += [3, 0, 0, 0]
    v = control.steering_vector(hidden, pos, neg)
    assert v[0] > 2
    low1, low2 = control.lda_magnitudes(hidden, pos, neg, v)
    w = (hidden[pos].mean(0) - hidden[neg].mean(0)) / (hidden[pos].var(0) + hidden[neg].var(0))
    m1, m0 = hidden[pos].mean(0) @ w, hidden[neg].mean(0) @ w
    t = -(m1 + m0) / 2                                        # as the official code writes the threshold
    assert low1 == pytest.approx(-(m1 - t) / (w @ v), rel=1e-6)
    assert low2 == pytest.approx(-max(hidden[pos] @ w - t) / (w @ v), rel=1e-6)
    assert low2 <= low1 < 0
    mid1, mid2 = control.lda_magnitudes(hidden, pos, neg, v, "midpoint")
    assert mid1 == pytest.approx(-0.5) and mid2 <= mid1             # the midpoint: half of v moves the mean


def test_steering_acts_only_at_step_boundaries_inside_thinking():
    """A huge steering vector changes what follows a boundary; with alpha 0 the arm is the original."""
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.lm.tokenizer import SEP, build_tokenizer
    from iclr26.papers.rebalance.arms import sample

    spec = {"modulus": 10, "max_operand": 2, "n_ops": [2, 3], "error_rate": 0.2, "fix_rate": 0.9}
    tok = build_tokenizer(traces.vocabulary(10))
    model = build_model({"config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                    "num_attention_heads": 2}}, tok, seed=0).eval()
    rows = traces.generate(spec, 32, seed=0)
    fmt = TagFormat(tok)
    examples = fmt.training_examples([r["problem"] for r in rows] * 4, [r["trace"] for r in rows] * 4,
                                     [r["trace_answer"] for r in rows] * 4)
    train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tok.pad_token_id, 60, 16, 5e-3, 0)
    cfg = {"eval": {"max_new_tokens": 30, "temperature": 0.7},
           "method": {"layer": 0, "slope": 1200.0, "high_val_2": 0.1, "keywords": ["wait"]}}
    cal = {"q25c": 0.5, "q75c": 0.9, "q25v": 0.0, "q75v": 0.01, "low_val_1": -1.0, "low_val_2": -2.0,
           "vector": (np.ones(32) * 50).tolist()}
    original = sample(model, fmt, rows, cfg, 0, "original").tokens
    sep = tok.convert_tokens_to_ids(SEP)
    steered = sample(model, fmt, rows, cfg, 0, "static_steering", cal).tokens
    assert steered != original
    for a, b in zip(original, steered):    # identical up to and including the first boundary
        cut = a.index(sep) + 1 if sep in a else len(a)
        assert a[:cut] == b[:cut]
    silent = sample(model, fmt, rows, cfg, 0, "static_steering", {**cal, "alpha": 0.0}).tokens
    assert silent == original
    cue = fmt.encode(traces.REFLECTION)[0]
    assert all(cue not in t for t in sample(model, fmt, rows, cfg, 0, "keyword_suppression").tokens)
    # issue 11, item 5: several chunks, unequal (16 + 14) and equal (16 + 16). alpha is reset at every
    # chunk's prefill, so no chunk inherits the last pass's alpha (a crash when the sizes differ, a
    # silently shifted prompt when they agree): each row matches the original up to its first boundary.
    # 6 new tokens: a chunk's last pass reads the boundary that ends "+ 1 = 3 <sep>", so its alpha is not 0
    for n in (30, 32):
        chunked = {**cfg, "eval": {**cfg["eval"], "batch_size": 16, "max_new_tokens": 6}}
        more = traces.generate(spec, n, seed=1)
        plain = sample(model, fmt, more, chunked, 3, "original").tokens
        steered = sample(model, fmt, more, chunked, 3, "static_steering", cal).tokens
        assert len(steered) == n and steered != plain
        for a, b in zip(plain, steered):
            cut = a.index(sep) + 1 if sep in a else len(a)
            assert a[:cut] == b[:cut]


def test_full_scale_path_on_a_hub_layout_model_offline(workdir, hub_model_dir, hub_dataset_dir, static_server):
    """scale=full with the model id replaced by a save_pretrained directory, the benchmark URL by a
    loopback server (sha256 checked) and the calibration repo by a local directory: the official
    system prompt, blank-line steps, keyword suppression over every variant of the keywords, Phase
    A/B calibration and dynamic steering on the hub-layout model, \\boxed{} graded by math-verify."""
    import pandas as pd

    from iclr26.core.io import read_json, sha256_file
    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    (root / "test.jsonl").write_bytes((hub_dataset_dir / "test.jsonl").read_bytes())
    from iclr26.core.config import compose_job_config

    digest = sha256_file(hub_dataset_dir / "test.jsonl")
    splits = compose_job_config("rebalance", "full")["data"]["math"]["splits"]
    overrides = ["device=cpu", "threads=1", f"model.source={hub_model_dir}", "model.dtype=float32",
                 "model.revision=null", f"model.cache_dir={workdir / 'hub'}",
                 "model.attn_implementation=eager", "method.layer=1", "eval.max_new_tokens=40",
                 "method.lda_threshold=midpoint", "method.probe_problems=4", "method.static_grid=[1.0]",
                 *[f"~data.math.splits.{name}" for name in splits if name not in ("test", "calibration")],
                 *[f"data.math.splits.{name}.url={base}/test.jsonl" for name in ("test", "calibration")],
                 *[f"data.math.splits.{name}.sha256={digest}" for name in ("test", "calibration")],
                 *[f"~data.math.splits.{name}.{key}" for name in ("test", "calibration")
                   for key in ("bytes", "git_blob") if key in splits[name]],
                 "data.math.splits.calibration.limit=8"]
    records = pd.DataFrame(load_records(run_paper("rebalance", "full", overrides, seeds=[0, 1, 2])))  # 3: claim tests
    assert set(records["method"]) == {"original", "keyword_suppression", "static_steering", "rebalance"}
    assert records["accuracy"].between(0, 1).all() and (records["thinking_tokens"] > 0).all()
    assert "errors_fixed" not in records or records["errors_fixed"].isna().all()   # the chain audit is tiny-only
    by = records[records["seed"] == 0].set_index("method")
    assert by.loc["keyword_suppression", "reflections"] == 0 < by.loc["original", "reflections"]
    calibration = read_json(workdir / "data/full/rebalance/prepared/math/calibration_s0.json")
    assert calibration["n_steps"] > 8 and calibration["n_positive"] > 0 and calibration["n_negative"] > 0
    steering = read_json(workdir / "runs/full/rebalance/rebalance/s0/steering_s0.json")
    assert steering["vector"] == calibration["vector"] and steering["arm"] == "rebalance" and steering["k"] > 0
    manifest = read_json(workdir / "data/full/rebalance/raw/math/manifest.json")
    assert manifest["info"]["calibration"]["rows"] == 8 and manifest["info"]["test"]["rows"] == 9
    assert records["format_ok"].between(0, 1).all() and records["reflect_rate"].between(0, 1).all()


def test_calibration_and_magnitude_errors_name_their_cause():
    """An untrained model writing one-token traces has no step to label: one clear error, not a nan vector."""
    from iclr26.core.errors import DataError
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model
    from iclr26.core.lm.tokenizer import build_tokenizer
    from iclr26.papers.rebalance.calibration import calibrate

    tok = build_tokenizer(traces.vocabulary(10))
    model = build_model({"config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                                    "num_attention_heads": 2}}, tok, seed=0).eval()
    rows = traces.generate({"modulus": 10, "max_operand": 2, "n_ops": [2, 2]}, 4, seed=0)
    cfg = {"eval": {"max_new_tokens": 1, "temperature": 0.7},
           "method": {"layer": 0, "cue_words": ["wait"], "calibration_temperature": 0.0}}
    with pytest.raises(DataError, match="no sampled trace has more than one step"):
        calibrate(model, TagFormat(tok), rows, cfg, seed=0)
    hidden = np.random.default_rng(0).normal(size=(6, 3))
    pos, neg = np.array([1, 1, 1, 0, 0, 0], bool), np.array([0, 0, 0, 1, 1, 1], bool)
    v = control.steering_vector(hidden, pos, neg)
    with pytest.raises(ValueError, match="point apart"):
        control.lda_magnitudes(hidden, pos, neg, -v)
    with pytest.raises(ValueError, match="threshold must be official or midpoint"):
        control.lda_magnitudes(hidden, pos, neg, v, "median")


def _calibration_setup():
    """A 2-layer model and 8 traces of one cue step each, tokenized as the calibration pass sees them."""
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model
    from iclr26.core.lm.tokenizer import build_tokenizer

    tok = build_tokenizer(traces.vocabulary(10))
    fmt = TagFormat(tok)
    model = build_model({"config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
                                    "num_attention_heads": 2}}, tok, seed=0).eval()
    rows = traces.generate({"modulus": 10, "max_operand": 2, "n_ops": [3, 3]}, 8, seed=0)
    rows = [{**r, "trace": r["trace"] + " <sep> wait + 1 = 1"} for r in rows]   # one cue step per trace
    tokens = [ids[n:] for ids, n in fmt.training_examples([r["problem"] for r in rows], [r["trace"] for r in rows],
                                                           [r["trace_answer"] for r in rows])]
    return tok, fmt, model, rows, tokens


def test_calibration_confidence_is_the_geometric_mean_of_the_max_prob(monkeypatch):
    """audit 03, B1: a step's offline confidence is exp(mean log max-prob), the official value under
    greedy decoding, whatever token the pass sampled (the sampled token's log-prob is ignored)."""
    from iclr26.core.lm.generate import Generation
    from iclr26.papers.rebalance import calibration

    tok, fmt, model, rows, tokens = _calibration_setup()
    rng = np.random.default_rng(0)
    maxprob = [list(rng.uniform(0.3, 1.0, len(t))) for t in tokens]
    gen = Generation(tokens=tokens, logprob=[[math.log(0.01)] * len(t) for t in tokens], maxprob=maxprob)
    monkeypatch.setattr(calibration, "sample", lambda *a, **k: gen)
    cfg = {"eval": {"max_new_tokens": 40, "temperature": 0.7},
           "method": {"layer": 1, "cue_words": ["wait"], "calibration_temperature": 0.7, "read_at": "boundary",
                      "lda_threshold": "midpoint", "quartiles_over": "all"}}
    out = calibration.calibrate(model, fmt, rows, cfg, seed=0)
    expected = [math.exp(np.mean(np.log(m[lo:hi]))) for t, m in zip(tokens, maxprob)
                for lo, hi in fmt.step_spans(t, 0, fmt.thinking_end(t))]
    assert (out["q25c"], out["q75c"]) == pytest.approx(tuple(np.quantile(expected, [0.25, 0.75])))
    assert out["q25c"] > 0.3                       # not the sampled tokens' log-prob (0.01)


def test_calibration_refuses_a_non_negative_low_val_1(monkeypatch):
    """issue 10: with the official LDA threshold t = -(w.mu1 + w.mu0)/2, states whose projections on w
    both sit below zero give low_val_1 = -max(w.mu1 - t, 0) / (w.v) = -0.0 (seed 0 of an earlier tiny
    run): static steering at alpha = low_val_1 is then a no-op. Calibration stops with one error that
    names the cause and the fix, instead of a vector that does nothing. Here the real calibration runs
    on a real model; the captured states are moved along minus their class-mean difference (which
    leaves w and v as they are and lowers both projections), so the case arises whatever the weights."""
    from iclr26.core.errors import DataError
    from iclr26.core.lm.generate import Generation
    from iclr26.papers.rebalance import calibration

    tok, fmt, model, rows, tokens = _calibration_setup()
    maxprob = [list(np.random.default_rng(i).uniform(0.3, 1.0, len(t))) for i, t in enumerate(tokens)]
    gen = Generation(tokens=tokens, logprob=[[0.0] * len(t) for t in tokens], maxprob=maxprob)
    monkeypatch.setattr(calibration, "sample", lambda *a, **k: gen)
    cfg = {"eval": {"max_new_tokens": 40, "temperature": 0.7},
           "method": {"layer": 1, "cue_words": ["wait"], "calibration_temperature": 0.7, "read_at": "boundary",
                      "lda_threshold": "official", "quartiles_over": "all"}}
    real = control.lda_magnitudes

    def states_below_zero(hidden, positive, negative, v, threshold):
        gap = hidden[positive].mean(0) - hidden[negative].mean(0)
        return real(hidden - 1e3 * gap, positive, negative, v, threshold)

    monkeypatch.setattr(calibration.control, "lda_magnitudes", states_below_zero)
    with pytest.raises(DataError, match=r"low_val_1 = -?0 >= 0 with the official LDA threshold.*midpoint"):
        calibration.calibrate(model, fmt, rows, cfg, seed=0)
    # the same states under the midpoint threshold: low_val_1 = -1/2 whatever they are
    out = calibration.calibrate(model, fmt, rows, {**cfg, "method": {**cfg["method"], "lda_threshold": "midpoint"}},
                                seed=0)
    assert out["low_val_1"] == pytest.approx(-0.5, rel=1e-4) and out["n_positive"] > 0 and out["n_negative"] > 0


def test_boundary_behaviour_counts_reflections_and_broken_steps():
    """The precondition's measure: reflections and malformed steps after a boundary (a trace with no
    answer counts once more), and the share of well-formed traces."""
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.tokenizer import build_tokenizer
    from iclr26.papers.rebalance.scoring import boundary_behaviour

    fmt = TagFormat(build_tokenizer(traces.vocabulary(10)))
    cfg = {"method": {"cue_words": ["wait"]}, "data": {"math": {"source": "chains"}}}
    parsed = [{"thinking": "+ 1 = 3 <sep> wait + 1 = 3 <sep> - 2 = 1", "answer": "1"},   # 1 of 2 reflective
              {"thinking": "+ 1 = 3 <sep> so so so", "answer": "3"},                       # 1 of 1 malformed
              {"thinking": "+ 1 = 3 <sep> + 2 = 5", "answer": ""}]                         # 0 of 1, no answer: +1 of 1
    out = boundary_behaviour(cfg, "math", fmt, parsed)
    assert out["format_ok"] == pytest.approx(1 / 3)
    assert out["reflect_rate"] == pytest.approx(3 / 5)
    assert boundary_behaviour(cfg, "math", fmt, parsed, each=True)["format_ok"] == [True, False, False]


def test_high_val_2_keeps_the_shipped_ratio_when_scaled():
    """audit 03, M3: scaled by |low_val_1| / 1.19, the push toward reflection keeps the shipped ~8%."""
    fixed = {"slope": 1200.0, "high_val_2": 0.1}
    assert control.high_val_2({"low_val_1": -0.5}, fixed) == 0.1
    scaled = {**fixed, "high_val_2_scale": "low_val_1"}
    assert control.high_val_2({"low_val_1": -0.5}, scaled) == pytest.approx(0.1 * 0.5 / 1.19)
    assert control.high_val_2(SHIPPED_7B, scaled) == pytest.approx(0.1)
    rule = control.steering_rule("rebalance", {**SHIPPED_7B, "low_val_1": -0.5, "low_val_2": -0.8}, scaled)
    assert rule["high_val_2"] == pytest.approx(0.1 * 0.5 / 1.19) and rule["alpha_max"] == pytest.approx(0.042, abs=1e-3)
    with pytest.raises(ValueError, match="high_val_2_scale"):
        control.high_val_2(SHIPPED_7B, {**fixed, "high_val_2_scale": "relative"})


def test_static_strength_is_chosen_by_accuracy_and_the_vector_is_checked(monkeypatch):
    """audit 03, M1/B2: the shortest-thinking alpha (0 included) within the accuracy tolerance, not the
    strongest; the grid point f = 1 is the vector check (a probe of its own when the grid lacks it)."""
    from iclr26.papers.rebalance import calibration

    results = {None: {"accuracy": 0.70, "thinking_tokens": 30.0, "format_ok": 1.0, "reflect_rate": 0.3},
               -0.25: {"accuracy": 0.69, "thinking_tokens": 27.0, "format_ok": 1.0, "reflect_rate": 0.25},
               -0.5: {"accuracy": 0.60, "thinking_tokens": 20.0, "format_ok": 0.9, "reflect_rate": 0.2},
               -1.0: {"accuracy": 0.40, "thinking_tokens": 12.0, "format_ok": 0.8, "reflect_rate": 0.1}}
    calls = []

    def fake_probe(model, fmt, rows, cfg, seed, arm, steering, dataset, stream=0):
        calls.append((arm, None if steering is None else steering["alpha"], stream))
        return dict(results[None if steering is None else steering["alpha"]])

    monkeypatch.setattr(calibration, "probe", fake_probe)
    cfg = {"method": {"static_grid": [1.0, 0.25, 0.5], "static_accuracy_tolerance": 0.02}}
    out = calibration.static_strength(None, None, [], cfg, 0, {"low_val_1": -1.0}, "math")
    assert out["alpha"] == -0.25 and out["vector_check"]["alpha"] == -1.0 and len(calls) == 4
    assert len({stream for *_, stream in calls}) == 4          # every probe its own sampling stream
    cfg = {"method": {"static_grid": [0.5], "static_accuracy_tolerance": 0.02}}
    out = calibration.static_strength(None, None, [], cfg, 0, {"low_val_1": -1.0}, "math")
    assert out["alpha"] == 0.0 and out["vector_check"]["reflect_rate"] == 0.1   # -0.5 loses accuracy: unsteered


def test_firing_statistics_and_vector_check_records():
    from iclr26.papers.rebalance.stages import firing, vector_check

    out = firing([-0.5, -0.1, 0.0, 0.04], 2, True)
    assert out == pytest.approx({"alpha_neg_share": 0.5, "alpha_pos_share": 0.25, "alpha_mean": -0.14,
                                 "boundaries": 2.0})
    assert all(math.isnan(v) for v in firing([], 3, False).values())
    cal = {"static": {"alpha": -0.25, "original": {"reflect_rate": 0.3, "format_ok": 0.95},
                      "vector_check": {"reflect_rate": 0.2, "format_ok": 0.9}}}
    assert vector_check(cal) == pytest.approx({"vector_reflect_change": -0.1, "vector_format_change": -0.05,
                                               "static_alpha_chosen": -0.25})


def test_alternating_rechecks_switch_and_return():
    """The generator's path switches (card 03): a wrong candidate, then back to the value; off by default
    (the same rows as before the knob existed)."""
    from iclr26.core.lm import traces

    spec = {"modulus": 10, "max_operand": 2, "n_ops": [2, 3], "error_rate": 0.0, "check_rate_easy": 1.0,
            "easy_max_ops": 3}
    assert traces.generate(spec, 20, seed=0) == traces.generate({**spec, "alternate_rate": 0.0}, 20, seed=0)
    rows = traces.generate({**spec, "alternate_rate": 1.0, "alternate_max": 2}, 20, seed=0)
    for row in rows:
        steps, kinds = traces.split_steps(row["trace"]), row["kinds"]
        assert "switch" in kinds and row["trace_answer"] == row["answer"]
        for i, kind in enumerate(kinds):
            if kind == "switch":
                assert kinds[i + 1] == "check" and steps[i].split()[:4] == steps[i + 1].split()[:4]
                assert steps[i].split()[4] != steps[i + 1].split()[4]
        audit = traces.audit_thinking(row["problem"], row["trace"], 10)
        assert audit["errors"] == 0 and audit["final"] == int(row["answer"])


def test_claims_use_the_per_problem_outcomes_through_the_cluster_bootstrap():
    """A cluster_bootstrap claim reads the records' <metric>_items (per problem, per seed), pairs the
    seeds, and states its interval; without the lists it stops with one clear error."""
    import pandas as pd

    from iclr26.core.claims import check_claim
    from iclr26.core.errors import ConfigError

    rng = np.random.default_rng(0)
    rows = []
    for seed in range(8):
        for method, p in (("original", 0.5), ("rebalance", 0.8)):
            items = (rng.random(60) < p).astype(int).tolist()
            rows.append({"method": method, "seed": seed, "accuracy": float(np.mean(items)), "accuracy_items": items})
    records = pd.DataFrame(rows)
    spec = {"id": "x", "claim": "x", "metric": "accuracy", "method": "rebalance", "baseline": "original",
            "direction": "higher", "test": "cluster_bootstrap"}
    out = check_claim(spec, records)
    assert out["verdict"] == "holds" and out["estimate"]["n"] == 8
    assert "cluster bootstrap (60 problems)" in out["estimate"]["how"]
    assert out["estimate"]["lo"] < 0.3 < out["estimate"]["hi"]
    with pytest.raises(ConfigError, match="accuracy_items"):
        check_claim(spec, records.drop(columns=["accuracy_items"]))
