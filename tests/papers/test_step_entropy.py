"""Card 07, step entropy: the compression rule, the step scores, the rewards, the pruning diagnostics,
the [SKIP] augmentation, and the offline full-scale path. (Every stage at smoke scale:
tests/test_contract.py.)"""
import math

import numpy as np
import pandas as pd
import pytest

from iclr26.core.io import read_json, read_jsonl
from iclr26.core.job import load_records, run_paper
from iclr26.papers.step_entropy import method

SLUG = "step_entropy"


def test_rules_mask_floor_kappa_n_steps_of_the_right_kind():
    scores = [0.5, 0.1, 2.0, 0.3, 1.0]
    rng = np.random.default_rng(0)
    assert method.masked_steps(scores, 0.4, "low_entropy", rng) == {1, 3}      # floor(0.4 * 5) = 2 lowest
    assert method.masked_steps(scores, 0.4, "high_entropy", rng) == {2, 4}
    assert method.masked_steps(scores, 0.0, "low_entropy", rng) == set()
    assert method.masked_steps(scores, 1.0, "random", rng) == set(range(5))
    assert len(method.masked_steps(scores, 0.8, "random", rng)) == 4
    assert method.compress(["a", "b", "c"], {1}, "[SKIP]") == ["a", "[SKIP]", "c"]
    assert method.skip_ratio(["a", "[SKIP]", "[SKIP]", "c"], "[SKIP]") == 0.5
    with pytest.raises(ValueError):
        method.masked_steps(scores, 0.5, "middle", rng)


def test_step_scores_sum_mean_and_the_codes_sampled_variant():
    entropy, logprob = [0.2, 0.4], [math.log(0.5), math.log(0.25)]
    assert method.step_score(entropy, logprob, "sum_entropy") == pytest.approx(0.6)
    assert method.step_score(entropy, logprob, "mean_entropy") == pytest.approx(0.3)
    expected = (0.5 * math.log(2) + 0.25 * math.log(4)) / 2                 # mean of -p log p
    assert method.step_score(entropy, logprob, "mean_sampled_neglogp") == pytest.approx(expected)


def test_grpo_reward_terms_are_the_official_ones():
    cfg = {"correct": 2.0, "ratio_high": 1.0, "ratio_mid": 0.5, "flood_penalty": 2.0, "max_skips": 9,
           "length_penalty": 1.0, "max_length": 96}
    assert method.grpo_reward(True, 0.8, 5, 50, cfg) == 3.0
    assert method.grpo_reward(True, 0.6, 5, 50, cfg) == 2.5
    assert method.grpo_reward(False, 0.1, 12, 120, cfg) == -3.0


def test_pruning_diagnostics_and_the_sft_rule():
    from iclr26.papers.step_entropy.finetune import sft_rule
    from iclr26.papers.step_entropy.pruning import compress, necessary_kept, needed_steps, score_by_kind

    traces = [{"steps": ["+ 1 = 3", "so 3", "ok check", "wait - 2 = 1"], "scores": [2.0, 0.1, 0.2, 1.5]},
              {"steps": ["so 4", "that + 1"], "scores": [0.3, 0.4]}]
    needed = needed_steps(traces)
    assert needed == [[0, 3], []]
    steps, masked = compress(traces[0], 0.5, "low_entropy", np.random.default_rng(0))
    assert steps == ["+ 1 = 3", "[SKIP]", "[SKIP]", "wait - 2 = 1"] and masked == {1, 2}
    assert necessary_kept(needed, [masked, set()]) == 1.0            # the trace without needed steps is left out
    assert necessary_kept(needed, [{0, 1}, set()]) == 0.5
    assert math.isnan(necessary_kept([[], []], [set(), set()]))
    assert score_by_kind(traces) == {"score_comp": pytest.approx(1.75), "score_redundant": pytest.approx(0.25)}
    cfg = {"train": {"sft_kappa": 0.8}}
    assert sft_rule("full_cot", cfg) == ("low_entropy", 0.0) and sft_rule("random", cfg) == ("random", 0.8)


def test_skip_augmentation_keeps_the_answer_and_only_replaces_steps():
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.tokenizer import SKIP, build_tokenizer
    from iclr26.papers.step_entropy.own_traces import skip_augmented_examples

    fmt = TagFormat(build_tokenizer(traces.vocabulary(10)))
    rows = traces.generate({"modulus": 10, "max_operand": 2, "n_ops": [3, 3], "redundancy": 0.75}, 20, seed=0)
    plain = skip_augmented_examples(fmt, rows, 0.0, seed=0)
    assert plain == [fmt.training_example(r["problem"], r["trace"], r["trace_answer"]) for r in rows]
    skip_id = fmt.encode(SKIP)[0]
    masked = skip_augmented_examples(fmt, rows, 1.0, seed=0)
    for (ids, start), (plain_ids, plain_start), row in zip(masked, plain, rows):
        assert skip_id in ids and start == plain_start and ids[-2:] == plain_ids[-2:]   # same answer, eos
        assert fmt.parse(ids[start:])["answer"] == row["trace_answer"]
    assert masked != skip_augmented_examples(fmt, rows, 1.0, seed=1)                    # seeded


def test_full_scale_path_on_a_hub_layout_model_offline(workdir, hub_model_dir, hub_dataset_dir):
    """scale=full with the model id and the dataset repos replaced by local directories: chat
    template, blank-line steps, [SKIP] as text, \\boxed{} graded by math-verify."""
    from iclr26.core.lm.tokenizer import load_tokenizer

    overrides = ["device=cpu", "threads=1", "format.user='{problem}'", f"model.source={hub_model_dir}",
                 "model.dtype=float32", "model.attn_implementation=eager", "method.max_new_tokens=40",
                 "method.kappas=[0.0,0.5]", "format.answer_tokens=12", "train.n_problems=4", "train.steps=2",
                 "train.batch_size=2",
                 *(f"data.{d}.hub_id={hub_dataset_dir}" for d in ("reasoning.splits.train", "reasoning.splits.test",
                                                                   "filler_weakness.splits.test"))]
    records = pd.DataFrame(load_records(run_paper(SLUG, "full", overrides, seeds=[0, 1, 2])))  # 3: claim tests
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
    sft_tok = load_tokenizer(workdir / "runs/full/step_entropy/low_entropy/s0/sft_s0/tokenizer")
    assert len(sft_tok) == len(load_tokenizer(hub_model_dir))     # no token added: [SKIP] stays text
