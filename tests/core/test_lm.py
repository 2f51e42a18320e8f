"""The shared language-model core: tokenizer, model, traces, generation statistics and hooks."""
import math

import numpy as np
import pytest
import torch

from iclr26.core.lm import generate as G
from iclr26.core.lm import hooks as H
from iclr26.core.lm import model as M
from iclr26.core.lm import tokenizer as K
from iclr26.core.lm import traces as T
from iclr26.core.lm.formats import TagFormat

SPEC = {"modulus": 10, "max_operand": 2, "n_ops": [3, 3], "redundancy": 0.75, "filler_vocab_size": 1}
TINY = {"config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "max_position_embeddings": 128}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tok")
    K.build_tokenizer(T.vocabulary(10), directory)
    return K.load_tokenizer(directory)  # through AutoTokenizer, as at full scale


@pytest.fixture(scope="module")
def lm(tok):
    M.configure_torch(1)
    return M.build_model(TINY, tok, seed=0).eval()


def test_tokenizer_round_trip_and_special_tokens(tok):
    row = T.generate(SPEC, 1, seed=0)[0]
    fmt = TagFormat(tok)
    text = f"{row['problem']} <think> {row['trace']} </think> ans {row['answer']}"
    ids = fmt.encode(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids
    assert ids[: len(fmt.prompt_ids(row["problem"]))] == fmt.prompt_ids(row["problem"])
    special = K.special_ids(tok)
    assert len({special[k] for k in ("think", "end_think", "skip", "sep", "eos", "pad")}) == 6
    assert fmt.encode("[SKIP] <sep> </think>") == [special["skip"], special["sep"], special["end_think"]]
    assert type(tok).__name__ != "PreTrainedTokenizerFast" or tok.padding_side == "left"


def test_traces_have_the_schema_the_redundancy_and_the_seed():
    rows = T.generate(SPEC, 50, seed=3)
    assert set(rows[0]) >= {"problem", "answer", "trace"}
    kinds = [k for r in rows for k in r["kinds"]]
    assert np.mean([k != "comp" for k in kinds]) == pytest.approx(0.75)
    assert all(r["answer"] == r["trace_answer"] for r in rows)  # no errors injected
    assert rows == T.generate(SPEC, 50, seed=3) and rows != T.generate(SPEC, 50, seed=4)
    faulty = T.generate({**SPEC, "error_rate": 0.5, "fix_rate": 0.0}, 200, seed=0)
    assert np.mean([r["answer"] != r["trace_answer"] for r in faulty]) > 0.5  # unfixed errors carry on
    fixed = T.generate({**SPEC, "error_rate": 0.5, "fix_rate": 1.0}, 200, seed=0)
    assert all(r["answer"] == r["trace_answer"] for r in fixed) and any("fix" in r["kinds"] for r in fixed)


def test_token_stats_match_a_hand_computed_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    logprob, entropy, maxprob = G.token_stats(logits, torch.tensor([1]))
    assert float(entropy) == pytest.approx(1.5 * math.log(2), abs=1e-6)   # -(.5 ln .5 + 2 * .25 ln .25)
    assert float(logprob) == pytest.approx(math.log(0.25), abs=1e-6)
    assert float(maxprob) == pytest.approx(0.5, abs=1e-6)
    uniform = G.token_stats(torch.zeros(1, 8), torch.tensor([0]))[1]
    assert float(uniform) == pytest.approx(math.log(8), abs=1e-6)


def test_cached_batched_generation_agrees_with_teacher_forcing(lm, tok):
    """Left padding + KV cache must give the same per-token statistics as one full forward pass."""
    rows = T.generate(SPEC, 4, seed=1)
    prompts = [TagFormat(tok).prompt_ids(r["problem"]) for r in rows]
    prompts[0] = prompts[0][2:]  # unequal lengths exercise the padding
    out = G.generate(lm, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6)
    stats = G.score(lm, [p + t for p, t in zip(prompts, out.tokens)], tok.pad_token_id)
    for p, tokens, ent, lp in zip(prompts, out.tokens, out.entropy, out.logprob):
        i = prompts.index(p)
        assert np.allclose(ent, stats["entropy"][i][len(p):], atol=1e-4)
        assert np.allclose(lp, stats["logprob"][i][len(p):], atol=1e-4)
        assert 1 <= len(tokens) <= 6
    again = G.generate(lm, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6, temperature=1.0, seed=5)
    assert again.tokens == G.generate(lm, prompts, tok.pad_token_id, tok.eos_token_id, 6, temperature=1.0, seed=5).tokens


def test_hook_reads_and_shifts_the_last_position(lm, tok):
    ids = torch.tensor([TagFormat(tok).encode("3 + 1 <think> + 1 = 4")] * 2)
    with H.LayerHook(lm, 0, capture=True) as hook:
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
    again_tok = K.load_tokenizer(tmp_path / "model")
    again = M.build_model({"source": str(tmp_path / "model"), "revision": "main"}, again_tok).eval()
    ids = torch.tensor([TagFormat(again_tok).prompt_ids("3 + 1")])
    with torch.no_grad():
        assert torch.allclose(again(input_ids=ids).logits, lm(input_ids=ids).logits, atol=1e-6)
    from iclr26.core.errors import DataError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError):  # a local directory without config.json is refused, not sent to the hub
        M.build_model({"source": str(tmp_path / "empty")}, tok)


def test_training_lowers_the_loss_and_the_format_parses_what_it_wrote(tok):
    model = M.build_model(TINY, tok, seed=1)
    rows = T.generate(SPEC, 64, seed=2)
    fmt = TagFormat(tok)
    examples = [fmt.training_example(r["problem"], r["trace"], r["answer"]) for r in rows]
    losses = M.train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tok.pad_token_id,
                        steps=30, batch_size=16, lr=5e-3, seed=0)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:3])
    ids, start = examples[0]
    parsed = fmt.parse(ids[start:])
    assert parsed["answer"] == rows[0]["answer"] and parsed["thinking"] == rows[0]["trace"]
    assert fmt.is_correct(parsed["answer"], rows[0]["answer"]) and not fmt.is_correct("", "")
    sep = K.special_ids(tok)["sep"]
    word = fmt.encode("so")[0]
    tokens = [word, sep, word, word, sep, sep, word]
    assert fmt.step_spans(tokens, 0, 7) == [(0, 1), (2, 4), (6, 7)]
    assert fmt.step_texts(tokens, fmt.step_spans(tokens, 0, 7)) == ["so", "so so", "so"]
    thinking = fmt.join_steps(["+ 1 = 3", "[SKIP]"])
    assert fmt.split_steps(thinking) == ["+ 1 = 3", "[SKIP]"] and thinking == T.join_steps(["+ 1 = 3", "[SKIP]"])
    assert fmt.answer_after_prefill(fmt.encode("7")) == "7"
    assert fmt.keyword_ids(["WAIT"]) == fmt.encode("wait")


def test_step_kinds_of_the_chain_task():
    assert [T.step_kind(s) for s in ("+ 1 = 3", "wait - 2 = 1", "so 3", "that + 1", "ok check", "[SKIP]", "+ 1")] == \
        ["comp", "reflect", "redundant", "redundant", "redundant", "other", "other"]
