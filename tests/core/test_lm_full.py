"""The full-scale language-model path, offline: a hub-layout model directory (byte-level BPE with a
chat template, Qwen2 weights, written by save_pretrained), blank-line steps, \\boxed{} answers graded
by math-verify, and benchmark files read from a local dataset directory or a loopback URL."""
import json

import pytest
import torch

from iclr26.core.errors import ConfigError, DataError
from iclr26.core.io import sha256_file
from iclr26.core.lm import generate as generation
from iclr26.core.lm.benchmarks import fetch_splits
from iclr26.core.lm.formats import ChatFormat, make_format
from iclr26.core.lm.model import build_model
from iclr26.core.lm.tokenizer import load_tokenizer
from iclr26.core.runtime import pick_device


@pytest.fixture(scope="module")
def chat(hub_model_dir):
    tok = load_tokenizer(hub_model_dir)
    return make_format({"kind": "chat", "system": "Please reason step by step, and put your final answer within "
                        "\\boxed{}.", "answer_tokens": 4}, tok)


def test_chat_prompt_opens_the_thinking_span_with_the_models_template(chat):
    ids = chat.prompt_ids("What is 1 + 1?")
    text = chat.tokenizer.decode(ids)
    assert text.startswith("<｜begin▁of▁sentence｜>Please reason step by step")
    assert text.endswith("<｜User｜>What is 1 + 1?<｜Assistant｜><think>\n")
    user_only = make_format({"kind": "chat", "user": "[Math Problem]\n\n{problem}"}, chat.tokenizer)
    assert "[Math Problem]\n\nWhat is 1 + 1?" in user_only.tokenizer.decode(user_only.prompt_ids("What is 1 + 1?"))
    with pytest.raises(ConfigError, match="format.kind must be tags or chat"):
        make_format({"kind": "xml"}, chat.tokenizer)


def test_blank_lines_split_steps_on_tokens_merged_or_not(chat):
    thinking = "Let me compute 3 + 4 = 7.\n\nWait, check again: 3 + 4 = 7.\n\nSo the answer is 7."
    tokens = chat.encode(thinking)
    spans = chat.step_spans(tokens, 0, len(tokens))
    assert chat.step_texts(tokens, spans) == chat.split_steps(thinking) == [
        "Let me compute 3 + 4 = 7.", "Wait, check again: 3 + 4 = 7.", "So the answer is 7."]
    assert chat.join_steps(["a", "[SKIP]", "b"]) == "a\n\n[SKIP]\n\nb"
    newline = chat.encode("\n")
    split = chat.encode("One.") + newline + newline + chat.encode("Two.") + newline * 3 + chat.encode("Three")
    assert chat.step_texts(split, chat.step_spans(split, 0, len(split))) == ["One.", "Two.", "Three"]
    assert chat.ends_step(chat.encode("One.") + newline + newline) and not chat.ends_step(chat.encode("One.") + newline)
    assert not chat.ends_step(chat.encode("One.") + newline * 3)   # one boundary, steered once
    assert chat.ends_step(chat.encode("One.\n\n")) and not chat.ends_step(chat.encode("One"))


def test_batched_encoding_in_the_chat_format_gives_the_ids_of_one_at_a_time(chat):
    problems = ["What is 1 + 1?", "Compute 3 times 2."]
    thinkings = ["Let me compute 1 + 1 = 2.\n\nWait, check again.", "3 times 2 is 6.\n\n[SKIP]"]
    assert chat.prompt_ids_many(problems) == [chat.prompt_ids(p) for p in problems]
    assert chat.prefill_ids_many(problems, thinkings) == [chat.prefill_ids(p, t) for p, t in zip(problems, thinkings)]
    examples = chat.training_examples(problems, thinkings, ["2", "6"])
    assert examples == [chat.training_example(p, t, a) for p, t, a in zip(problems, thinkings, ["2", "6"])]
    assert chat.tokenizer.decode(examples[1][0][examples[1][1]:]).startswith("3 times 2 is 6.")


def test_boxed_answers_are_graded_by_math_verify(chat):
    assert ChatFormat.extract("so the answer is \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert ChatFormat.is_correct(ChatFormat.extract("x = \\boxed{0.5}"), "\\frac{1}{2}")
    assert not ChatFormat.is_correct(ChatFormat.extract("\\boxed{3}"), "4")
    assert not ChatFormat.is_correct("", "4")
    end = chat.end_think_id
    tokens = chat.encode("First, 5 + 7 = 12.\n\n") + [end] + chat.encode("The final answer is $\\boxed{12}$.")
    parsed = chat.parse(tokens + [chat.tokenizer.eos_token_id])
    assert parsed["thinking"].startswith("First") and parsed["thinking_tokens"] == tokens.index(end)
    assert chat.is_correct(parsed["answer"], "12")
    assert chat.answer_after_prefill(chat.encode("\\boxed{7}")) == "7"
    assert chat.tokenizer.decode(chat.prefill_ids("Q", "step")).endswith("<think>\nstep\n</think>\n\n")


def test_a_hub_model_samples_and_its_keywords_are_found(hub_model_dir):
    tok = load_tokenizer(hub_model_dir)
    model = build_model({"source": str(hub_model_dir), "revision": "main"}, tok, device="cpu")
    assert tok.convert_tokens_to_ids("</think>") != tok.unk_token_id   # the hub tokenizer's own markers
    fmt = make_format({"kind": "chat"}, tok)
    out = generation.generate(model, [fmt.prompt_ids("Q")], tok.pad_token_id, tok.eos_token_id, max_new_tokens=5,
                     temperature=0.6, top_p=0.95, seed=0)
    assert 1 <= len(out.tokens[0]) <= 5 and all(0 <= e for e in out.entropy[0])
    assert sorted(fmt.keyword_ids(["wait", "HMM"])) == fmt.keyword_ids(["hmm", "wait"])
    with pytest.raises(ConfigError, match="none of the keywords"):
        fmt.keyword_ids(["zzzzqqq"])


def test_nucleus_sampling_keeps_only_the_top_mass():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    gen = torch.Generator().manual_seed(0)
    picks = {int(generation._pick(logits, 1.0, 0.5, gen, None)[0]) for _ in range(50)}
    assert picks == {0}
    picks = {int(generation._pick(logits, 1.0, 0.8, gen, None)[0]) for _ in range(200)}
    assert picks == {0, 1}


def test_device_cuda_without_a_gpu_is_one_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="device=cuda but torch sees no GPU"):
        pick_device("cuda")


def test_benchmark_files_from_a_dataset_directory_and_a_checksummed_url(hub_dataset_dir, tmp_path, static_server):
    splits = {"test": {"hub_id": str(hub_dataset_dir), "revision": "main", "file": "test.jsonl"},
              "train": {"hub_id": str(hub_dataset_dir), "file": "deepscaler.json", "limit": 5, "sample_seed": 1}}
    info = fetch_splits(splits, tmp_path / "a")
    test = [json.loads(line) for line in (tmp_path / "a" / "test.jsonl").read_text().splitlines()]
    assert len(test) == 9 and test[0]["problem"] == "What is 0 + 0?" and test[0]["answer"] == "0"
    assert test[0]["level"] == 1 and info["test"]["sha256"] == sha256_file(hub_dataset_dir / "test.jsonl")
    assert info["train"]["rows"] == 5
    assert fetch_splits(splits, tmp_path / "b") == info   # the seeded subset is the same subset

    root, base = static_server
    (root / "aime.jsonl").write_bytes((hub_dataset_dir / "test.jsonl").read_bytes())
    url = f"{base}/aime.jsonl"
    got = fetch_splits({"test": {"url": url, "sha256": sha256_file(hub_dataset_dir / "test.jsonl")}}, tmp_path / "c")
    assert got["test"]["rows"] == 9
    with pytest.raises(DataError, match="sha256 mismatch"):
        fetch_splits({"test": {"url": url, "sha256": "0" * 64}}, tmp_path / "d")
    with pytest.raises(DataError, match="needs columns 'question' and 'answer'"):
        fetch_splits({"test": {"hub_id": str(hub_dataset_dir), "file": "test.jsonl",
                               "fields": {"problem": "question"}}}, tmp_path / "e")
    import pandas as pd

    pd.DataFrame(test).to_parquet(tmp_path / "test.parquet")           # the hub's converted layout
    parquet = fetch_splits({"test": {"hub_id": str(tmp_path), "file": "test.parquet"}}, tmp_path / "g")
    assert parquet["test"]["rows"] == 9
    assert (tmp_path / "g" / "test.jsonl").read_text() == (tmp_path / "a" / "test.jsonl").read_text()
    with pytest.raises(DataError, match="does not exist"):
        fetch_splits({"test": {"hub_id": str(hub_dataset_dir), "file": "missing.jsonl"}}, tmp_path / "f")


def test_bad_benchmark_specs_are_one_clear_error(hub_dataset_dir, tmp_path):
    with pytest.raises(DataError, match="a split needs url, or hub_id and file"):
        fetch_splits({"test": {"file": "test.jsonl"}}, tmp_path / "a")
    with pytest.raises(DataError, match="test: test.jsonl has sha256 [0-9a-f]{64}, the config pins 0{64}"):
        fetch_splits({"test": {"hub_id": str(hub_dataset_dir), "file": "test.jsonl", "sha256": "0" * 64}},
                     tmp_path / "b")
    (tmp_path / "rows.csv").write_text("problem,answer\n1+1,2\n")
    with pytest.raises(DataError, match="rows.csv: expected .jsonl, .json or .parquet"):
        fetch_splits({"test": {"hub_id": str(tmp_path), "file": "rows.csv"}}, tmp_path / "c")
    assert not (tmp_path / "c" / "test.jsonl").exists()


def test_an_unreachable_hub_dataset_is_one_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)   # no network in tests
    with pytest.raises(DataError, match=r"cannot fetch test.jsonl of dataset org/no-such-dataset \(revision main\)"):
        fetch_splits({"test": {"hub_id": "org/no-such-dataset", "revision": "main", "file": "test.jsonl"}}, tmp_path)
