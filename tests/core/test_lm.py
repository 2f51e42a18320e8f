"""The shared language-model core: tokenizer, model, traces, generation statistics, hooks, and the
stage helpers the LM papers share (acquire, base models as units of work, model loading)."""
import math

import numpy as np
import pytest
import torch

from iclr26.core.lm import generate as generation
from iclr26.core.lm import model as lm_model
from iclr26.core.lm import tokenizer as lm_tokenizer
from iclr26.core.lm import traces
from iclr26.core.lm.formats import TagFormat
from iclr26.core.lm.hooks import LayerHook

SPEC = {"modulus": 10, "max_operand": 2, "n_ops": [3, 3], "redundancy": 0.75, "filler_vocab_size": 1}
TINY = {"config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "max_position_embeddings": 128}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tok")
    lm_tokenizer.build_tokenizer(traces.vocabulary(10), directory)
    return lm_tokenizer.load_tokenizer(directory)  # through AutoTokenizer, as at full scale


@pytest.fixture(scope="module")
def lm(tok):
    return lm_model.build_model(TINY, tok, seed=0).eval()


def test_tokenizer_round_trip_and_special_tokens(tok):
    row = traces.generate(SPEC, 1, seed=0)[0]
    fmt = TagFormat(tok)
    text = f"{row['problem']} <think> {row['trace']} </think> ans {row['answer']}"
    ids = fmt.encode(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids
    assert ids[: len(fmt.prompt_ids(row["problem"]))] == fmt.prompt_ids(row["problem"])
    special = lm_tokenizer.special_ids(tok)
    assert len({special[k] for k in ("think", "end_think", "skip", "sep", "eos", "pad")}) == 6
    assert fmt.encode("[SKIP] <sep> </think>") == [special["skip"], special["sep"], special["end_think"]]
    assert type(tok).__name__ != "PreTrainedTokenizerFast" or tok.padding_side == "left"


def test_traces_have_the_schema_the_redundancy_and_the_seed():
    rows = traces.generate(SPEC, 50, seed=3)
    assert set(rows[0]) >= {"problem", "answer", "trace"}
    kinds = [k for r in rows for k in r["kinds"]]
    assert np.mean([k != "comp" for k in kinds]) == pytest.approx(0.75)
    assert all(r["answer"] == r["trace_answer"] for r in rows)  # no errors injected
    assert rows == traces.generate(SPEC, 50, seed=3) and rows != traces.generate(SPEC, 50, seed=4)
    faulty = traces.generate({**SPEC, "error_rate": 0.5, "fix_rate": 0.0}, 200, seed=0)
    assert np.mean([r["answer"] != r["trace_answer"] for r in faulty]) > 0.5  # unfixed errors carry on
    fixed = traces.generate({**SPEC, "error_rate": 0.5, "fix_rate": 1.0}, 200, seed=0)
    assert all(r["answer"] == r["trace_answer"] for r in fixed) and any("fix" in r["kinds"] for r in fixed)


def test_token_stats_match_a_hand_computed_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    logprob, entropy, maxprob = generation.token_stats(logits, torch.tensor([1]))
    assert float(entropy) == pytest.approx(1.5 * math.log(2), abs=1e-6)   # -(.5 ln .5 + 2 * .25 ln .25)
    assert float(logprob) == pytest.approx(math.log(0.25), abs=1e-6)
    assert float(maxprob) == pytest.approx(0.5, abs=1e-6)
    uniform = generation.token_stats(torch.zeros(1, 8), torch.tensor([0]))[1]
    assert float(uniform) == pytest.approx(math.log(8), abs=1e-6)


def test_cached_batched_generation_agrees_with_teacher_forcing(lm, tok):
    """Left padding + KV cache must give the same per-token statistics as one full forward pass."""
    rows = traces.generate(SPEC, 4, seed=1)
    prompts = [TagFormat(tok).prompt_ids(r["problem"]) for r in rows]
    prompts[0] = prompts[0][2:]  # unequal lengths exercise the padding
    out = generation.generate(lm, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6)
    stats = generation.score(lm, [p + t for p, t in zip(prompts, out.tokens)], tok.pad_token_id)
    for p, tokens, ent, lp in zip(prompts, out.tokens, out.entropy, out.logprob):
        i = prompts.index(p)
        assert np.allclose(ent, stats["entropy"][i][len(p):], atol=1e-4)
        assert np.allclose(lp, stats["logprob"][i][len(p):], atol=1e-4)
        assert 1 <= len(tokens) <= 6
    sampled = [generation.generate(lm, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6, temperature=1.0,
                                   seed=5).tokens for _ in range(2)]
    assert sampled[0] == sampled[1]


def test_hook_reads_and_shifts_the_last_position(lm, tok):
    ids = torch.tensor([TagFormat(tok).encode("3 + 1 <think> + 1 = 4")] * 2)
    with LayerHook(lm, 0, capture=True) as hook:
        plain = lm(input_ids=ids).logits
        before = hook.captured.clone()
        vector = torch.randn(before.shape[-1])
        hook.set_shift([0.0, 2.0], vector)
        shifted = lm(input_ids=ids).logits
        after = hook.captured
    assert torch.allclose(after[0], before[0]) and torch.allclose(after[1, :-1], before[1, :-1])
    assert torch.allclose(after[1, -1] - before[1, -1], 2.0 * vector, atol=1e-5)
    assert torch.allclose(shifted[0], plain[0], atol=1e-6)
    assert not torch.allclose(shifted[1, -1], plain[1, -1])
    assert torch.allclose(lm(input_ids=ids).logits, plain)  # the hook is gone after the block


def test_from_pretrained_of_a_saved_model(lm, tok, tmp_path):
    lm.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    again_tok = lm_tokenizer.load_tokenizer(tmp_path / "model")
    again = lm_model.build_model({"source": str(tmp_path / "model"), "revision": "main"}, again_tok).eval()
    ids = torch.tensor([TagFormat(again_tok).prompt_ids("3 + 1")])
    with torch.no_grad():
        assert torch.allclose(again(input_ids=ids).logits, lm(input_ids=ids).logits, atol=1e-6)
    from iclr26.core.errors import DataError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError):  # a local directory without config.json is refused, not sent to the hub
        lm_model.build_model({"source": str(tmp_path / "empty")}, tok)


def test_training_lowers_the_loss_and_the_format_parses_what_it_wrote(tok):
    model = lm_model.build_model(TINY, tok, seed=1)
    rows = traces.generate(SPEC, 64, seed=2)
    fmt = TagFormat(tok)
    examples = [fmt.training_example(r["problem"], r["trace"], r["answer"]) for r in rows]
    losses = lm_model.train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tok.pad_token_id,
                               steps=30, batch_size=16, lr=5e-3, seed=0)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3])
    ids, start = examples[0]
    parsed = fmt.parse(ids[start:])
    assert parsed["answer"] == rows[0]["answer"] and parsed["thinking"] == rows[0]["trace"]
    assert fmt.is_correct(parsed["answer"], rows[0]["answer"]) and not fmt.is_correct("", "")
    sep = lm_tokenizer.special_ids(tok)["sep"]
    word = fmt.encode("so")[0]
    tokens = [word, sep, word, word, sep, sep, word]
    assert fmt.step_spans(tokens, 0, 7) == [(0, 1), (2, 4), (6, 7)]
    assert fmt.step_texts(tokens, fmt.step_spans(tokens, 0, 7)) == ["so", "so so", "so"]
    thinking = fmt.join_steps(["+ 1 = 3", "[SKIP]"])
    assert fmt.split_steps(thinking) == ["+ 1 = 3", "[SKIP]"] and thinking == traces.join_steps(["+ 1 = 3", "[SKIP]"])
    assert fmt.answer_after_prefill(fmt.encode("7")) == "7"
    assert fmt.keyword_ids(["WAIT"]) == fmt.encode("wait")


def test_step_kinds_of_the_chain_task():
    steps = ("+ 1 = 3", "wait - 2 = 1", "so 3", "that + 1", "ok check", "[SKIP]", "+ 1")
    assert [traces.step_kind(s) for s in steps] == ["comp", "reflect", "redundant", "redundant", "redundant", "other",
                                                    "other"]


def test_batched_encoding_gives_the_ids_of_one_at_a_time(tok):
    fmt = TagFormat(tok)
    rows = traces.generate({**SPEC, "n_ops": [2, 4]}, 6, seed=4)
    problems, thinkings = [r["problem"] for r in rows], [r["trace"] for r in rows]
    answers = [r["answer"] for r in rows]
    assert fmt.prompt_ids_many(problems) == [fmt.prompt_ids(p) for p in problems]
    assert fmt.encode_many(thinkings) == [fmt.encode(t) for t in thinkings] and fmt.encode_many([]) == []
    assert fmt.prefill_ids_many(problems, thinkings) == [fmt.prefill_ids(p, t) for p, t in zip(problems, thinkings)]
    examples = fmt.training_examples(problems, thinkings, answers)
    assert examples == [fmt.training_example(p, t, a) for p, t, a in zip(problems, thinkings, answers)]
    ids, start = examples[0]
    assert ids[:start] == fmt.prompt_ids(problems[0]) and ids[-1] == tok.eos_token_id
    assert len({len(ids) for ids, _ in examples}) > 1       # unequal lengths: nothing was padded


def _lm_job(stage: str, kind: str, cfg: dict):
    """A job of a stand-in paper (no folder): what a stage function of an LM paper receives."""
    from iclr26.core.job import Job, data_dir
    from iclr26.core.paper import Paper

    paper = Paper(slug="lm_core", title="LM core", methods=("m",), datasets=("chains",), metrics=("accuracy",),
                  stage_module="none")
    out_dir = data_dir("smoke", paper.slug, kind, "chains")
    out_dir.mkdir(parents=True, exist_ok=True)
    return Job(paper=paper, cfg=cfg, stage=stage, out_dir=out_dir, dataset="chains")


def test_acquire_base_models_as_units_and_the_shared_loader(workdir):
    from iclr26.core.errors import ConfigError
    from iclr26.core.io import read_jsonl
    from iclr26.core.lm.stages import acquire, load_model, save_finetuned, train_base_models

    cfg = {"scale": "smoke", "seeds": [0, 1], "device": "cpu", "model": {"source": None, **TINY},
           "data": {"chains": {**SPEC, "source": "chains", "n_train": 24, "n_test": 5, "data_seed": 3}},
           "base": {"steps": 4, "batch_size": 4, "lr": 1e-3}}
    raw = _lm_job("acquire", "raw", cfg)
    assert acquire(raw, ("train", "test")) == {"source": "chains", "n_train": 24, "n_test": 5}
    train, test = (read_jsonl(raw.out_dir / f"{split}.jsonl") for split in ("train", "test"))
    assert len(train) == 24 and len(test) == 5
    assert train == traces.generate(cfg["data"]["chains"], 24, 3000) and test[0] != train[0]   # seed per split
    with pytest.raises(ConfigError, match="data.chains.source must be chains or hub, got 'bogus'"):
        acquire(_lm_job("acquire", "raw", {**cfg, "data": {"chains": {"source": "bogus"}}}), ("train",))

    prepared = _lm_job("prepare", "prepared", cfg)
    seen = []

    def examples_for(fmt, rows, seed):
        seen.append(seed)
        return fmt.training_examples([r["problem"] for r in rows], [r["trace"] for r in rows],
                                     [r["answer"] for r in rows])

    info = train_base_models(prepared, examples_for)
    assert seen == [0, 1] and sorted(info) == ["s0_final_loss", "s1_final_loss"]
    assert train_base_models(prepared, examples_for) == info and seen == [0, 1]   # finished units are not redone
    model, fmt = load_model(prepared, 1, base_dir=prepared.out_dir)
    other, _ = load_model(prepared, 0, base_dir=prepared.out_dir)
    ids = torch.tensor([fmt.prompt_ids(test[0]["problem"])])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        assert not torch.allclose(logits, other(input_ids=ids).logits)   # one model per seed
        save_finetuned(model, fmt.tokenizer, workdir / "finetuned")
        again, again_fmt = load_model(prepared, 1, finetuned=workdir / "finetuned")
        assert torch.equal(again(input_ids=ids).logits, logits) and len(again_fmt.tokenizer) == len(fmt.tokenizer)
    with pytest.raises(ValueError, match="needs the base_dir"):
        load_model(prepared, 0)
