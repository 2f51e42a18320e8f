"""Card 07, step entropy: the compression rule, the step scores, the rewards, and a smoke run."""
import math

import numpy as np
import pandas as pd
import pytest

from iclr26.core.io import read_json, read_jsonl
from iclr26.core.job import load_records, run_paper
from iclr26.papers.step_entropy import method as R
from iclr26.papers.step_entropy.experiment import figures

SLUG = "step_entropy"


def test_rules_mask_floor_kappa_n_steps_of_the_right_kind():
    scores = [0.5, 0.1, 2.0, 0.3, 1.0]
    rng = np.random.default_rng(0)
    assert R.masked_steps(scores, 0.4, "low_entropy", rng) == {1, 3}      # floor(0.4 * 5) = 2 lowest
    assert R.masked_steps(scores, 0.4, "high_entropy", rng) == {2, 4}
    assert R.masked_steps(scores, 0.0, "low_entropy", rng) == set()
    assert R.masked_steps(scores, 1.0, "random", rng) == set(range(5))
    assert len(R.masked_steps(scores, 0.8, "random", rng)) == 4
    assert R.compress(["a", "b", "c"], {1}, "[SKIP]") == ["a", "[SKIP]", "c"]
    assert R.skip_ratio(["a", "[SKIP]", "[SKIP]", "c"], "[SKIP]") == 0.5
    with pytest.raises(ValueError):
        R.masked_steps(scores, 0.5, "middle", rng)


def test_step_scores_sum_mean_and_the_codes_sampled_variant():
    entropy, logprob = [0.2, 0.4], [math.log(0.5), math.log(0.25)]
    assert R.step_score(entropy, logprob, "sum_entropy") == pytest.approx(0.6)
    assert R.step_score(entropy, logprob, "mean_entropy") == pytest.approx(0.3)
    expected = (0.5 * math.log(2) + 0.25 * math.log(4)) / 2                 # mean of -p log p
    assert R.step_score(entropy, logprob, "mean_sampled_neglogp") == pytest.approx(expected)


def test_grpo_reward_terms_are_the_official_ones():
    cfg = {"correct": 2.0, "ratio_high": 1.0, "ratio_mid": 0.5, "flood_penalty": 2.0, "max_skips": 9,
           "length_penalty": 1.0, "max_length": 96}
    assert R.grpo_reward(True, 0.8, 5, 50, cfg) == 3.0
    assert R.grpo_reward(True, 0.6, 5, 50, cfg) == 2.5
    assert R.grpo_reward(False, 0.1, 12, 120, cfg) == -3.0


def _records(evals):
    return pd.DataFrame(load_records(evals)).sort_values(["method", "dataset", "stage", "seed", "kappa"])


def test_smoke_run_every_stage_and_same_seed_same_records(workdir, tmp_path_factory):
    evals = run_paper(SLUG, "smoke")
    records = _records(evals)
    assert set(records["method"]) == {"full_cot", "low_entropy", "random", "high_entropy"}
    prune = records[records["stage"] == "prune"]
    assert set(prune["dataset"]) == {"reasoning", "filler_weakness"}
    assert set(prune[prune["method"] == "low_entropy"]["kappa"]) == {0.0, 0.8}
    assert set(records[records["stage"] == "sft"]["method"]) == {"full_cot", "low_entropy", "random"}
    assert prune["accuracy"].between(0, 1).all()
    # kappa 0 is the same full CoT under every rule
    k0 = prune[prune["kappa"] == 0.0].groupby(["dataset", "seed"])["accuracy"].nunique()
    assert (k0 == 1).all()
    # masking never lengthens the thinking ([SKIP] is one token); an untrained smoke model may write no steps
    low = prune[(prune["method"] == "low_entropy") & (prune["dataset"] == "reasoning")]
    k08, k00 = (low[low["kappa"] == k]["thinking_tokens"].to_numpy() for k in (0.8, 0.0))
    assert (k08 >= 0).all() and (k08 <= k00).all()
    assert read_json(evals[0])["provenance"]["method"] == "full_cot"
    paths = figures({}, records, workdir / "fig")
    assert paths and all(p.stat().st_size > 0 for p in paths)

    import os

    other = tmp_path_factory.mktemp("again")
    os.chdir(other)
    again = _records(run_paper(SLUG, "smoke"))
    pd.testing.assert_frame_equal(records.reset_index(drop=True), again.reset_index(drop=True))


def test_full_scale_path_on_a_hub_layout_model_offline(workdir, hub_model_dir, hub_dataset_dir):
    """scale=full with the model id and the dataset repos replaced by local directories: chat
    template, blank-line steps, [SKIP] as text, \\boxed{} graded by math-verify."""
    from iclr26.core.lm import tokenizer as K

    overrides = ["device=cpu", "threads=1", "format.user='{problem}'", f"model.source={hub_model_dir}", "model.dtype=float32",
                 "model.attn_implementation=eager", "method.max_new_tokens=40", "method.kappas=[0.0,0.5]",
                 "format.answer_tokens=12", "train.n_problems=4", "train.steps=2", "train.batch_size=2",
                 *(f"data.{d}.hub_id={hub_dataset_dir}" for d in ("reasoning.splits.train", "reasoning.splits.test",
                                                                   "filler_weakness.splits.test"))]
    records = _records(run_paper(SLUG, "full", overrides, seeds=[0]))
    manifest = read_json(workdir / "data/full/step_entropy/raw/reasoning/manifest.json")
    assert manifest["info"]["test"]["rows"] == 9 and len(manifest["info"]["test"]["sha256"]) == 64
    assert set(records["dataset"]) == {"reasoning"}                    # the weakness row is tiny-only
    prune = records[records["stage"] == "prune"]
    assert set(prune[prune["method"] == "low_entropy"]["kappa"]) == {0.0, 0.5}
    assert prune["accuracy"].between(0, 1).all() and prune["accuracy"].max() > 0   # some boxed answers verify
    own = read_jsonl(workdir / "data/full/step_entropy/prepared/reasoning/own_test_s0.jsonl")
    assert sum(len(t["steps"]) > 1 for t in own) > len(own) // 2     # blank-line steps were found
    assert all("\n\n" not in step for t in own for step in t["steps"])
    assert set(records[records["stage"] == "sft"]["method"]) == {"full_cot", "low_entropy", "random"}
    sft_tok = K.load_tokenizer(workdir / "runs/full/step_entropy/low_entropy/s0/sft_s0/tokenizer")
    assert len(sft_tok) == len(K.load_tokenizer(hub_model_dir))     # no token added: [SKIP] stays text
