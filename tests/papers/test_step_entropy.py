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
    from iclr26.papers.step_entropy.pruning import compress, necessary_kept, needed_steps, only_needed, score_by_kind

    traces = [{"steps": ["+ 1 = 3", "so 3", "ok check", "wait - 2 = 1"], "scores": [2.0, 0.1, 0.2, 1.5]},
              {"steps": ["so 4", "that + 1"], "scores": [0.3, 0.4]}]
    needed = needed_steps(traces)
    assert needed == [[0, 3], []]
    steps, masked = compress(traces[0], 0.5, "low_entropy", np.random.default_rng(0))
    assert steps == ["+ 1 = 3", "[SKIP]", "[SKIP]", "wait - 2 = 1"] and masked == {1, 2}
    assert necessary_kept(needed, [masked, set()]) == 1.0            # the trace without needed steps is left out
    assert only_needed(traces[0], needed[0]) == ["+ 1 = 3", "[SKIP]", "[SKIP]", "wait - 2 = 1"]   # the oracle
    assert only_needed(traces[1], needed[1]) == ["[SKIP]", "[SKIP]"]
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
                                                                   "filler_weakness.splits.test",
                                                                   "restate_value.splits.test"))]
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


def test_scores_without_skip_renormalise_the_models_own_distribution():
    """The scorer's entropies exclude [SKIP]: with nothing excluded they are what the generation
    reports; with [SKIP] excluded they are the entropy and log-prob of p renormalised without it,
    H(q) = (H(p) - h(s)) / (1 - s) with s = p([SKIP]) and h the binary entropy."""
    import torch

    from iclr26.core.lm import generate as generation
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model
    from iclr26.core.lm.tokenizer import SKIP, build_tokenizer
    from iclr26.papers.step_entropy.own_traces import own_traces, stats_without

    tokenizer = build_tokenizer(traces.vocabulary(10))
    fmt = TagFormat(tokenizer)
    model = build_model({"config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                    "num_attention_heads": 2}}, tokenizer, seed=0).eval()
    skip = tokenizer.convert_tokens_to_ids(SKIP)
    prompts = fmt.prompt_ids_many(["3 + 1 - 2", "7 - 1 - 1 + 2"])
    out = generation.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, 12, seed=0)
    entropy, logprob = stats_without(model, prompts, out.tokens, tokenizer.pad_token_id, [])
    for ours, theirs in ((entropy, out.entropy), (logprob, out.logprob)):
        assert [len(r) for r in ours] == [len(r) for r in theirs]
        assert np.allclose(np.concatenate(ours), np.concatenate(theirs), atol=1e-4)
    entropy_q, logprob_q = stats_without(model, prompts, out.tokens, tokenizer.pad_token_id, [skip])
    with torch.no_grad():   # s = p([SKIP]) of every generated position, teacher-forced
        s = [torch.softmax(model(input_ids=torch.tensor([p + g])).logits[0, len(p) - 1: len(p) - 1 + len(g)], -1)
             [:, skip].numpy() for p, g in zip(prompts, out.tokens)]
    s, h_p = np.concatenate(s), np.concatenate(out.entropy)
    assert s.min() > 0.01                                       # the exclusion is not a no-op here
    binary = -(s * np.log(s) + (1 - s) * np.log(1 - s))
    assert np.allclose(np.concatenate(entropy_q), (h_p - binary) / (1 - s), atol=1e-4)
    chosen_skip = np.concatenate(out.tokens) == skip            # a [SKIP] written has no mass left under q
    assert np.all(np.isneginf(np.concatenate(logprob_q)[chosen_skip]))
    assert np.allclose(np.concatenate(logprob_q)[~chosen_skip],
                       (np.concatenate(out.logprob) - np.log(1 - s))[~chosen_skip], atol=1e-4)
    rows = [{"problem": "3 + 1 - 2", "answer": "2"}, {"problem": "7 - 1 - 1 + 2", "answer": "7"}]
    cfg = {"max_new_tokens": 12, "step_score": "sum_entropy"}
    plain = own_traces(model, fmt, rows, cfg, 0)
    without = own_traces(model, fmt, rows, {**cfg, "score_without_skip": True}, 0)
    assert [t["steps"] for t in plain] == [t["steps"] for t in without]          # the same greedy trace
    assert [t["scores"] for t in plain] != [t["scores"] for t in without]


def test_restatements_of_the_start_value_leave_no_computed_value_in_redundant_steps():
    """restate: start (07's setting): no redundant step carries a value the problem does not state,
    so with every computation step pruned the answer cannot be read off the trace. The default
    (value, paper 03) is unchanged."""
    from iclr26.core.lm import traces

    spec = {"modulus": 10, "max_operand": 2, "n_ops": [3, 3], "redundancy": 0.75}
    default, value = traces.generate(spec, 200, seed=0), traces.generate({**spec, "restate": "value"}, 200, seed=0)
    assert default == value
    start = traces.generate({**spec, "restate": "start"}, 200, seed=0)
    assert [(r["problem"], r["answer"]) for r in start] == [(r["problem"], r["answer"]) for r in default]
    carried = 0
    for row, old in zip(start, default):
        stated = set(row["problem"].split())                    # the start value and the operands
        steps, old_steps = traces.split_steps(row["trace"]), traces.split_steps(old["trace"])
        for step, old_step, kind in zip(steps, old_steps, row["kinds"]):
            if kind == "comp":
                assert step == old_step
            else:
                assert traces.step_kind(step) == "redundant" and set(step.split()) - stated <= {"so", "that", "ok",
                                                                                                 "check"}
        carried += row["answer"] in {s.split()[1] for s in old_steps if s.startswith("so ")} - stated
    assert carried > 50                          # the old restatements did carry the answer on many rows
    with pytest.raises(ValueError):
        traces.generate({**spec, "restate": "final"}, 1, seed=0)


def test_the_token_cut_is_a_check_and_the_accuracy_claim_stands_alone():
    """Fewer thinking tokens follows by construction from [SKIP]-compressed SFT data: a check, not
    counted (audit finding 10); the accuracy claim is tested by itself, so a model that writes fewer
    tokens and loses accuracy is 'not reproduced' on accuracy, not counted twice."""
    from iclr26.core.claims import check_claim
    from iclr26.core.config import compose_job_config

    claims = {c["id"]: c for c in compose_job_config(SLUG, "tiny")["claims"]}
    tokens, keeps = claims["sft_low_entropy_fewer_tokens"], claims["sft_low_entropy_keeps_accuracy"]
    assert tokens["kind"] == "check" and "precondition" not in tokens
    assert keeps.get("kind", "claim") == "claim" and "precondition" not in keeps
    assert claims["sft_low_entropy_beats_random_sft"]["kind"] == "check"
    assert claims["low_entropy_beats_random_with_random_filler"]["kind"] == "check"

    def records(acc_low):
        rows = []
        for seed, (a_full, a_low) in enumerate(zip([0.95, 0.97, 0.96], acc_low)):
            rows += [{"method": "full_cot", "seed": seed, "stage": "sft", "accuracy": a_full, "thinking_tokens": 44.0},
                     {"method": "low_entropy", "seed": seed, "stage": "sft", "accuracy": a_low,
                      "thinking_tokens": 30.0 + seed}]
        return pd.DataFrame(rows)

    assert check_claim(keeps, records([0.95, 0.96, 0.965]))["verdict"] == "holds"
    # the same accuracy on every seed is no spread, not evidence (issue 27): untestable, with the reason
    same = check_claim(keeps, records([0.95, 0.97, 0.96]))
    assert same["verdict"] == "untestable here" and same["reason"].startswith("no spread across seeds")
    assert check_claim(keeps, records([0.30, 0.41, 0.35]))["verdict"] == "not reproduced"
    assert check_claim(tokens, records([0.30, 0.41, 0.35]))["verdict"] == "holds"   # shown, not counted


def test_only_the_absolute_stage_a_claims_are_gated_by_the_oracle():
    """Every rule faces the same reader: the comparisons are not gated (audit finding 1), so a 0.9
    vs 0.3 comparison holds even when the model reads compressed traces badly; the absolute claims
    ('keeps accuracy') are untestable when the oracle compression itself loses more than 0.05."""
    from iclr26.core.claims import check_claim
    from iclr26.core.config import compose_job_config

    stage_a = {c["id"]: c for c in compose_job_config(SLUG, "tiny")["claims"] if c["where"].get("stage") == "prune"}
    gated = {i for i, c in stage_a.items() if c.get("precondition")}
    assert gated == {"low_entropy_keeps_accuracy_at_0.8", "low_entropy_keeps_accuracy_at_0.8_restate_value"}
    assert all(stage_a[i]["precondition"]["metric"] == "oracle_drop" for i in gated)

    def records(oracle_drop, low=0.9, random=0.3):
        acc = {"low_entropy": low, "random": random}
        return pd.DataFrame([{"method": m, "seed": s, "stage": "prune", "dataset": "reasoning", "kappa": k,
                              "accuracy": acc[m] + 0.01 * s * (2 if m == "random" else 1), "oracle_drop": d,
                              "acc_drop": (acc[m] - 0.95 + 0.01 * s) if k else 0.0}
                             for m in acc for s, d in enumerate(oracle_drop) for k in (0.0, 0.8)])

    beats, keeps = stage_a["low_entropy_beats_random_at_0.8"], stage_a["low_entropy_keeps_accuracy_at_0.8"]
    unreadable = records([-0.11, -0.44, -0.81])
    assert check_claim(beats, unreadable)["verdict"] == "holds"
    gate = check_claim(keeps, unreadable)
    assert gate["verdict"] == "untestable here" and "precondition" in gate["reason"]
    assert check_claim(keeps, records([0.0, -0.01, 0.0], low=0.94))["verdict"] == "holds"   # one-sided
    assert check_claim(keeps, records([0.0, -0.01, 0.0], low=0.5))["verdict"] == "not reproduced"


def test_trailing_augmentation_never_blanks_the_last_computation_step():
    """base.augment: trailing blanks steps by position: some before the last computation step, a
    run right after it; the last computation step (whose value is the answer) always stays. The
    card's random augmentation blanks it on some rows."""
    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.tokenizer import SKIP, build_tokenizer
    from iclr26.papers.step_entropy.own_traces import skip_augmented_examples

    fmt = TagFormat(build_tokenizer(traces.vocabulary(10)))
    rows = traces.generate({"modulus": 10, "max_operand": 2, "n_ops": [3, 3], "redundancy": 0.75}, 200, seed=0)
    runs = set()
    for kind, lost in (("trailing", False), ("random", True)):
        last_lost = 0
        for (ids, start), row in zip(skip_augmented_examples(fmt, rows, 1.0, 0, kind), rows):
            steps = fmt.split_steps(fmt.parse(ids[start:])["thinking"])
            last = max(i for i, k in enumerate(row["kinds"]) if k == "comp")
            last_lost += steps[last] == SKIP
            if kind == "trailing":
                assert steps[last] == traces.split_steps(row["trace"])[last] and steps[last + 1] == SKIP
                runs.add(sum(s == SKIP for s in steps[last + 1:]))
        assert (last_lost > 0) == lost
    assert runs == {1, 2, 3}                              # runs of every length after the last comp step


def test_value_groups_count_a_restated_value_as_kept():
    from iclr26.papers.step_entropy.pruning import necessary_kept, value_groups

    traces = [{"steps": ["+ 1 = 3", "so 3", "that + 1", "- 2 = 1", "so 5", "ok check"]}]
    groups = value_groups(traces)
    assert groups == [[{0, 1}, {3}]]                      # "so 5" restates the start value, not 1
    assert necessary_kept(groups, [{0}]) == 1.0           # the value 3 is still visible in "so 3"
    assert necessary_kept(groups, [{0, 1}]) == 0.5
    assert necessary_kept(groups, [{3}]) == 0.5


def test_stacked_training_is_train_lm_per_model_whoever_shares_the_run():
    """stacked.py trains the seeds' models side by side (vmap): each model ends as core.lm.model.train_lm
    leaves it (same batches, loss, clipping, AdamW, schedule; to float rounding), and a model's result
    does not depend on which other models share the run, nor on their examples' lengths."""
    import torch

    from iclr26.core.lm import traces
    from iclr26.core.lm.formats import TagFormat
    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.lm.tokenizer import build_tokenizer
    from iclr26.papers.step_entropy.own_traces import skip_augmented_examples
    from iclr26.papers.step_entropy.stacked import train_stacked

    tokenizer = build_tokenizer(traces.vocabulary(10))
    fmt = TagFormat(tokenizer)
    spec = {"config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}}
    rows = traces.generate({"modulus": 10, "max_operand": 2, "n_ops": [2, 4], "redundancy": 0.75}, 60, seed=0)
    examples = {seed: skip_augmented_examples(fmt, rows, 0.5, seed, "trailing") for seed in (0, 1)}
    examples[1] = examples[1][:30]                                    # another data set, other lengths
    pad, args = tokenizer.pad_token_id, (6, 8, 1e-2)
    alone = build_model(spec, tokenizer, seed=0)
    reference = train_lm(alone, [e[0] for e in examples[0]], [e[1] for e in examples[0]], pad, *args, 0, warmup=3)
    pair = [build_model(spec, tokenizer, seed=seed) for seed in (0, 1)]
    losses = train_stacked(pair, [examples[0], examples[1]], pad, *args, [0, 1], warmup=3)
    single = build_model(spec, tokenizer, seed=0)
    assert train_stacked([single], [examples[0]], pad, *args, [0], warmup=3)[0] == losses[0]
    assert np.allclose(losses[0], reference, atol=1e-5) and losses[0] != losses[1]
    for ours, theirs, again in zip(pair[0].parameters(), alone.parameters(), single.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-5) and torch.equal(ours, again)
    assert not any(torch.equal(a, b) for a, b in zip(pair[0].parameters(), pair[1].parameters()))
    assert not pair[0].training and not pair[1].training
