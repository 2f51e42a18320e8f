"""Card 19 (Zebra-CoT): the generator, the image tokenizer, the arms' sequences, the held-out split,
and the full-scale path offline (Zebra-CoT-schema parquet shards on a loopback 'hub')."""
from __future__ import annotations

import re

import numpy as np
import pytest

from iclr26.papers.zebra_cot import data, hub, tokens

SPEC = {"grid": [2, 3], "n_ops": 2, "n_objects": [2, 5], "cell_px": 16, "max_add": 2, "targets": ["all", "pair"]}


def test_operations_and_counts():
    grid = np.array([[1, 2, 0], [3, 4, 0], [0, 0, 0]])
    added = data.apply_op(grid, ("add", 2, "blue", "ball"))
    assert added.tolist() == [[1, 2, 4], [3, 4, 4], [0, 0, 0]]           # first empty cells, raster order
    assert data.count(added, ("blue", "ball")) == 3 and data.count(added, (None, None)) == 6
    assert data.apply_op(added, ("remove_color", "blue")).tolist() == [[1, 2, 0], [0, 0, 0], [0, 0, 0]]
    assert data.apply_op(added, ("remove_shape", "cube")).tolist() == [[0, 2, 4], [0, 4, 4], [0, 0, 0]]
    for op in [("add", 1, "red", "cube"), ("add", 2, "blue", "ball"), ("remove_color", "red"),
               ("remove_shape", "ball")]:
        assert len(data.op_text(op).split()) == 4                          # every step of a trace has one length


def test_rows_have_the_real_schema_and_no_counts_in_the_trace(tmp_path):
    rows = data.generate(SPEC, 20, seed=3)
    for row in rows:
        assert {"Question", "Text Reasoning Trace", "Final Answer", "problem_image_1",
                "reasoning_image_1", "reasoning_image_2"} <= set(row)
        assert row["problem_image_1"]["bytes"][:8] == b"\x89PNG\r\n\x1a\n"
        assert row["Question"].startswith("<image_start>[problem_image_1]<image_end>")   # the real rows' layout
        assert "THOUGHT 1:" in row["Text Reasoning Trace"]
        assert "<image_start>[reasoning_image_2]<image_end>" in row["Text Reasoning Trace"]
        trace = re.sub(r"\[\w+\]|THOUGHT \d+|add \d", "", row["Text Reasoning Trace"])
        assert not re.search(r"\d", trace)                                # the state lives in the images
    data.write_parquet(rows, tmp_path / "rows.parquet")
    back = data.read_parquet(tmp_path / "rows.parquet")
    assert back[0]["Question"] == rows[0]["Question"]
    assert back[0]["reasoning_image_2"]["bytes"] == rows[0]["reasoning_image_2"]["bytes"]


def test_vq_tokens_recover_the_scene_of_a_non_square_picture():
    rng = np.random.default_rng(0)
    grids = [rng.integers(0, 5, size=(2, 3)) for _ in range(12)]
    images = [data.decode_image({"bytes": data.render(g, 16)}) for g in grids]
    assert images[0].shape == (32, 48, 3)                                  # rows x cols cells, not square
    spec = {"patches": [2, 3], "pool": 4, "codebook": 8}
    book = tokens.fit_codebook(images, spec, seed=0)
    codes = [tokens.encode_image(im, book, spec) for im in images]
    pairs = {(int(g.flat[i]), c[i]) for g, c in zip(grids, codes) for i in range(6)}
    assert len(pairs) == len({k for k, _ in pairs}) == len({c for _, c in pairs}) == 5   # one code per cell kind
    feats = tokens.patch_features(images[0], 4, 4)                          # a square grid of a wide picture:
    assert feats.shape == (16, 48)                                          # resized, nothing cropped


def test_arms_and_scaffolding_sequences():
    row = data.generate(SPEC, 1, seed=1)[0]
    codes = {c: [0, 1, 1, 2, 0, 0] for c in data.image_columns(row)}
    ex = tokens.example(*data.segments(row), row["Final Answer"], codes, 5)
    assert len(ex["steps"]) == 2 and "THOUGHT" not in ex["prompt"] and "<image_start>" not in "".join(ex["prompt"])
    p0, t_answer = tokens.target(ex, "answer_only")
    _, t_text = tokens.target(ex, "text_trace")
    _, t_cot = tokens.target(ex, "text_cot")
    _, t_inter = tokens.target(ex, "interleaved")
    assert p0.count(tokens.BOI) == 1 and t_answer == ["ANSWER", ":", row["Final Answer"]]
    assert tokens.BOI not in t_text and t_inter.count(tokens.BOI) == 2 and tokens.BOI not in t_cot
    assert [w for w in t_inter if not w.startswith("<")] == t_text          # same words, images added
    state = ["state", ":", "k0", "3", "k1", "2", "k2", "1", "k3", "0", "k4", "0"]   # the picture's counts in words
    assert t_cot[: t_cot.index("state") + len(state)][-len(state):] == state and t_cot.count("state") == 2
    p2, t2 = tokens.target(ex, "interleaved", given=2)
    assert p2.count(tokens.BOI) == 3 and t2[-3:] == t_answer and tokens.BOI not in t2
    c1, _ = tokens.target(ex, "text_cot", given=1)
    assert c1.count("state") == 1 and tokens.BOI not in c1[len(ex["prompt"]):]
    parsed = tokens.parse(["x", "<boi>", "<img_1>", "<eoi>", "ANSWER", ":", "4"])
    assert parsed == {"answer": "4", "images": [["<img_1>"]]}


def test_baselines_majority_and_question_only_lookup():
    from iclr26.papers.zebra_cot.stages import baselines

    def ex(question, answer):
        return {"prompt": ["<boi>", "<img_0>", "<eoi>", *question.split()], "answer": ["ANSWER", ":", answer]}

    train = [ex("q a", "1"), ex("q a", "1"), ex("q b", "2"), ex("q c", "1")]
    test = [ex("q a", "1"), ex("q b", "2"), ex("q b", "3"), ex("q z", "1")]
    out = baselines(train, test)
    assert out["majority"] == 0.5 and out["lookup"] == 0.75                # unseen question -> majority answer


def test_held_out_split_is_a_stable_hash():
    picks = [hub.is_test("cfg", "s.parquet", i, 0.2) for i in range(2000)]
    assert 0.15 < np.mean(picks) < 0.25
    assert picks == [hub.is_test("cfg", "s.parquet", i, 0.2) for i in range(2000)]
    parts = [hub.part_of("cfg", "s.parquet", i, 0.2) for i in range(2000)]
    assert [p == "test" for p in parts] == picks and 0.15 < np.mean([p == "val" for p in parts]) < 0.25


def test_a_config_without_parquet_files_fails_loudly(tmp_path, monkeypatch):
    spec = {"hub_id": "x/y", "revision": "0" * 40, "configs": ["A - B"], "test_fraction": 0.1,
            "max_train_per_config": 5, "max_test_per_config": 2}
    monkeypatch.setattr(hub, "shards_of", lambda spec, config, endpoint: [])   # an empty hub listing
    with pytest.raises(ValueError, match="no parquet files"):
        hub.acquire(spec, tmp_path, log=lambda *a: None)


def test_fed_image_accuracy_is_the_greedy_drawing_after_the_gold_prefix():
    """The gate's part a (one teacher-forced pass) equals drawing each step's image greedily after the
    gold steps before it (decoded one row at a time, no padding)."""
    import torch

    from iclr26.core.lm.generate import generate
    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.lm.tokenizer import build_tokenizer
    from iclr26.papers.zebra_cot.arms import ImageGrammar, decode, fed_image_acc, image_vocab
    from iclr26.papers.zebra_cot.stages import all_words, encode_rows

    torch.manual_seed(0)
    rows = data.generate({**SPEC, "targets": ["all"]}, 16, seed=5)
    vq = {"patches": [2, 3], "pool": 4, "codebook": 8}
    book = tokens.fit_codebook([data.decode_image(r[c]) for r in rows[:20] for c in data.image_columns(r)], vq, 0)
    ex, _ = encode_rows(rows, book, vq)
    tok = build_tokenizer(sorted({w for e in ex for w in all_words(e)} | set(map(tokens.code_word, range(len(book))))
                                 | {tokens.BOI, tokens.EOI}))
    model = build_model({"source": None, "config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                                    "num_key_value_heads": 2, "intermediate_size": 64,
                                                    "max_position_embeddings": 128}}, tok, seed=0)
    seqs, starts = [], []
    for e in ex[:8]:   # memorised: most of their images are drawn right, the unseen rows' mostly not
        p, t = tokens.target(e, "interleaved")
        seqs.append(tok.convert_tokens_to_ids(p + t) + [tok.eos_token_id])
        starts.append(len(p))
    train_lm(model, seqs, starts, tok.pad_token_id, 80, 8, 1e-2, 0, warmup=5)
    model.eval()
    test = ex
    fed = fed_image_acc(model, tok, test, {"eval": {"batch_size": 4}})
    greedy = []
    for e in test:
        for k, step in enumerate(e["steps"]):
            prompt = tok.convert_tokens_to_ids(tokens.target(e, "interleaved", k)[0] + step["text"])
            out = generate(model, [prompt], tok.pad_token_id, tok.eos_token_id, len(step["image"]),
                           batch_size=1).tokens[0]
            greedy.append(list(out[: len(step["image"])]) == tok.convert_tokens_to_ids(step["image"]))
    print(f"fed {fed['fed_image_acc']:.3f} greedy {np.mean(greedy):.3f} over {len(greedy)} steps")
    assert 0 < np.mean(greedy) < 1 and abs(fed["fed_image_acc"] - np.mean(greedy)) <= 1 / len(greedy) + 1e-9
    assert fed["fed_token_acc"] is None   # no grammar: no per-token numbers

    grammar = image_vocab(tok, test)
    grammar["code_set"] = set(grammar["codes"])
    assert grammar["length"] == 6 and len(grammar["codes"]) == len(book)
    fed = fed_image_acc(model, tok, test, {"eval": {"batch_size": 4}}, grammar)
    copy = []   # the copy-the-previous-image baseline by hand: the prompt's image, then the previous step's
    for e in test:
        before = e["prompt"][e["prompt"].index(tokens.BOI) + 1: e["prompt"].index(tokens.EOI)]
        for step in e["steps"]:
            copy += [a == b for a, b in zip(before, step["image"][1:-1])]
            before = step["image"][1:-1]
    assert fed["copy_token_acc"] == pytest.approx(np.mean(copy))
    assert 0 < fed["copy_token_acc"] < 1
    assert fed["fed_token_acc"] >= fed["fed_image_acc"]   # an image drawn whole has every code right

    class CodeHungry:   # the trained model with image codes pushed up: unconstrained, it writes them anywhere
        def __init__(self, lm):
            self.lm, self.config, self.device = lm, lm.config, lm.device

        def parameters(self):
            return self.lm.parameters()

        def __call__(self, **kw):
            out = self.lm(**kw)
            out.logits[..., grammar["codes"]] += 5.0
            return out

    hungry = CodeHungry(model)
    cfg = {"eval": {"max_new_tokens": 40, "batch_size": 16, "image_grammar": False}}
    free = decode(hungry, tok, test, "interleaved", 0, cfg, grammar)
    assert free["malformed"] > 0          # unconstrained, it breaks the grammar
    for arm in ("interleaved", "text_trace"):
        tight = decode(hungry, tok, test, arm, 0, {"eval": {**cfg["eval"], "image_grammar": True}}, grammar)
        assert tight["malformed"] == 0, arm
    prompts = [tok.convert_tokens_to_ids(tokens.target(e, "interleaved")[0]) for e in test]
    out = generate(ImageGrammar(hungry, grammar, True), prompts, tok.pad_token_id, tok.eos_token_id, 40).tokens
    boi, eoi = grammar["boi"], grammar["eoi"]
    drawn = [r[r.index(boi) + 1:r.index(boi) + 2 + grammar["length"]] for r in out if boi in r]
    assert drawn and all(d[-1] == grammar["eoi"] and len(d) == grammar["length"] + 1 for d in drawn)
    for row in out:   # every image: exactly `length` codes, then image-end
        for at in [i for i, t in enumerate(row) if t == boi]:
            span = row[at + 1: at + 2 + grammar["length"]]
            assert len(span) < grammar["length"] + 1 or (set(span[:-1]) <= grammar["code_set"] and span[-1] == eoi)
    text = generate(ImageGrammar(hungry, grammar, False), prompts, tok.pad_token_id, tok.eos_token_id, 40).tokens
    assert not any(t in grammar["code_set"] or t in (boi, eoi) for row in text for t in row)


def test_malformed_and_the_gate_part_a_per_scale():
    from iclr26.core.config import compose_job_config
    from iclr26.papers.zebra_cot.arms import gate_part_a, malformed

    g = {"boi": 1, "eoi": 2, "codes": [5, 6], "code_set": {5, 6}, "length": 2}
    assert not malformed([9, 1, 5, 6, 2, 9], g, True)
    assert malformed([1, 5, 2], g, True) and malformed([1, 5, 9, 2], g, True) and malformed([1, 5, 6], g, True)
    assert not malformed([1, 5], g, True, ended=False)   # cut by max_new_tokens inside an image
    assert malformed([9, 5], g, True) and malformed([9, 2], g, True) and malformed([1, 5, 6, 2], g, False)
    result = {"fed_image_acc": 0.5, "fed_token_acc": 0.8, "copy_token_acc": 0.6}
    tiny, full = (compose_job_config("zebra_cot", scale)["gate"] for scale in ("tiny", "full"))
    assert gate_part_a(tiny, result) == (0.5, tiny["min_image_acc"])
    assert gate_part_a(full, result) == (0.8, pytest.approx(0.6 + full["token_over_copy"]))
    assert "copy-the-previous-image" in full["part_a_text"]


def tiny_anole(path, rows, n_codes: int = 16):
    """A Chameleon-architecture model (Anole's) small enough for a test, saved with its processor by
    save_pretrained: a word-level tokenizer over the rows' words, the image-start/end and image
    tokens named as Chameleon's vocabulary map names them (IMGIMG<digits as letters>Z), and a VQ-VAE
    that turns a 32 x 32 picture into 4 x 4 = 16 codes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        ChameleonConfig,
        ChameleonForConditionalGeneration,
        ChameleonImageProcessor,
        ChameleonProcessor,
        PreTrainedTokenizerFast,
    )

    image_names = ["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(i)) + "Z" for i in range(n_codes)]
    specials = ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<racm3:break>", "<eoss>"]
    pre = pre_tokenizers.Whitespace()
    texts = [t for r in rows for t in (r["Question"], r["Text Reasoning Trace"])]
    texts.append("ANSWER: " + " ".join(map(str, range(13))))
    words = sorted({w for t in texts for w, _ in pre.pre_tokenize_str(t)} - set(specials))
    vocab = {w: i for i, w in enumerate(specials + image_names + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>")
    processor = ChameleonProcessor(image_processor=ChameleonImageProcessor(size={"shortest_edge": 32},
                                                                           crop_size={"height": 32, "width": 32}),
                                   tokenizer=tokenizer, image_seq_length=16)
    config = ChameleonConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                             pad_token_id=3, bos_token_id=1, eos_token_id=2, vocabulary_map=vocab,
                             vq_config={"embed_dim": 8, "num_embeddings": n_codes, "latent_channels": 32,
                                        "resolution": 32, "base_channels": 32, "channel_multiplier": [1, 1, 1, 1],
                                        "num_res_blocks": 1})
    ChameleonForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


@pytest.mark.filterwarnings("ignore")
def test_anole_loss_trains_and_draws_image_tokens(tmp_path):
    """The full-scale model path on a saved Chameleon: pictures become VQ-VAE codes between the
    image-start/end ids; the stock forward masks image-token logits (it cannot draw), InterleavedLM
    does not; the loss counts image-token targets, and LoRA adapters behind activation checkpointing
    get gradients."""
    import torch

    from iclr26.papers.zebra_cot import anole

    rows = data.generate({"grid": [3, 4], "n_ops": 2, "n_objects": [2, 8], "cell_px": 16}, 4, seed=0)
    spec = {"source": str(tiny_anole(tmp_path / "anole", rows)), "kind": "anole", "dtype": "float32"}
    processor = anole.processor_of(spec)
    lm = anole.load(spec, 0, "cpu")
    ex = anole.encode_rows(rows, lm, processor, log=lambda *a: None)
    image_ids = set(lm.lm.model.vocabulary_mapping.image_tokens)
    step = ex[0]["steps"][0]["image"]
    assert step[0] == processor.image_start_token_id and step[-1] == processor.image_end_token_id
    assert len(step) == 18 and set(step[1:-1]) <= image_ids                      # 16 codes as BPE ids
    prompt, target = tokens.target(ex[0], "interleaved")
    ids = torch.tensor([prompt + target])
    with torch.no_grad():
        stock = lm.lm(input_ids=ids).logits[0, -1, sorted(image_ids)]
        ours = lm(input_ids=ids).logits[0, -1, sorted(image_ids)]
    assert (stock <= torch.finfo(stock.dtype).min / 2).all() and torch.isfinite(ours).all()
    with torch.no_grad():   # image tokens are targets: ignoring them changes the loss
        mask = torch.ones_like(ids)
        full = anole.interleaved_loss(lm, ids, mask, [len(prompt)])
        text_only = ids.clone()
        text_only[0, [i for i, t in enumerate(ids[0].tolist()) if t in image_ids]] = -1
        logits = lm(input_ids=ids).logits[0, :-1]
        labels = ids[0, 1:].clone()
        labels[: len(prompt) - 1] = -100
        labels[text_only[0, 1:] == -1] = -100
        text_loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)
        assert abs(float(full) - float(text_loss)) > 1e-4
    tcfg = {"steps": 2, "batch_size": 4, "micro_batch_size": 2, "lr": 1e-2, "warmup": 1,
            "activation_checkpointing": True, "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    tuned = anole.load(spec, 0, "cpu", tcfg)
    seqs, starts = [], []
    for e in ex:
        p, t = tokens.target(e, "interleaved")
        seqs.append(p + t + [processor.tokenizer.eos_token_id])
        starts.append(len(p))
    losses = anole.train(tuned, seqs, starts, processor.tokenizer.pad_token_id, tcfg, seed=0)
    assert len(losses) == 2 and all(np.isfinite(losses))
    lora_b = [p for n, p in tuned.lm.named_parameters() if "lora_B" in n]
    assert lora_b and all(float(p.detach().abs().sum()) > 0 for p in lora_b)   # zero-initialised, then trained
    assert not any(p.requires_grad for n, p in tuned.lm.named_parameters() if "lora_" not in n)
    tok = anole.tokenizer_of(spec, processor)
    parsed = tok.parse_output(ex[0]["steps"][0]["text"] + step + ex[0]["answer"] + [tok.eos_token_id])
    assert parsed == {"answer": rows[0]["Final Answer"], "images": [step[1:-1]]}


@pytest.mark.filterwarnings("ignore")
def test_full_scale_path_offline(workdir, static_server):
    """scale=full against a loopback hub: two configs' parquet shards (real column names, images as
    {bytes, path} structs, non-square pictures, more reasoning images than tiny) are streamed at the
    pinned commit and checked against their sha256 (one config listed through the hub's tree API,
    whose LFS oid is the sha256; the other given in data.counting.shards), split by the hash,
    tokenized by a saved Chameleon (Anole's architecture: its tokenizer and VQ-VAE), and every arm
    fine-tunes it (LoRA, the interleaved loss) and decodes."""
    import json
    from urllib.parse import quote

    import pandas as pd

    from iclr26.core.io import sha256_file
    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    rev = "f6d1defc169d19180a69f517925ed6cbb06a1c97"
    repo = root / "datasets" / "multimodal-reasoning-lab" / "Zebra-CoT"
    configs = ["3D Visual Reasoning - Multi-Hop Objects Counting", "Visual Logic & Strategic Games - Maze"]
    given = []
    for i, config in enumerate(configs):
        rows = data.generate({"grid": [3, 4], "n_ops": 3, "n_objects": [2, 8], "cell_px": 16}, 30, seed=i)
        path = f"{config}/train-00000-of-00001.parquet"
        target = repo / "resolve" / rev / path
        target.parent.mkdir(parents=True, exist_ok=True)
        data.write_parquet(rows, target)
        sha, size = sha256_file(target), target.stat().st_size
        if i == 0:   # listed: GET /api/datasets/<repo>/tree/<rev>/<config>?recursive=True
            tree = root / "api" / "datasets" / "multimodal-reasoning-lab" / "Zebra-CoT" / "tree" / rev / config
            tree.parent.mkdir(parents=True, exist_ok=True)
            tree.write_text(json.dumps([{"type": "file", "path": path, "size": size, "oid": "0" * 40,
                                         "lfs": {"oid": sha, "size": size, "pointerSize": 134}},
                                        {"type": "file", "path": f"{config}/README.md", "size": 3, "oid": "1" * 40}]))
        else:
            given.append(f'{{path:"{path}",sha256:"{sha}"}}')
    assert quote(configs[0], safe="")   # the listing URL quotes the config name; the server unquotes it
    model_dir = tiny_anole(workdir / "tiny_anole", data.generate({"grid": [3, 4], "n_ops": 3, "n_objects": [2, 8],
                                                                  "cell_px": 16}, 40, seed=9))
    overrides = ["device=cpu", "threads=1", f"data.counting.endpoint={base}", f"model.source={model_dir}",
                 "model.dtype=float32", "train.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}",
                 f"data.counting.configs=[{','.join(repr(c) for c in configs)}]".replace("'", '"'),
                 f"data.counting.shards=[{','.join(given)}]", "data.counting.test_fraction=0.2",
                 "data.counting.max_train_per_config=20", "data.counting.max_test_per_config=4",
                 "image_tokenizer.patches=4", "image_tokenizer.codebook=8", "image_tokenizer.fit_rows=10",
                 "train.steps=2", "train.batch_size=4", "train.micro_batch_size=2", "train.warmup=1",
                 "train.max_length=400", "eval.max_new_tokens=8", "eval.n_test=6", "eval.batch_size=8"]
    records = pd.DataFrame(load_records(run_paper("zebra_cot", "full", overrides, seeds=[0, 1, 2],   # 3: claim tests
                                                  methods=["lookup", "text_trace", "interleaved"])))
    assert set(records["method"]) == {"lookup", "text_trace", "interleaved"}
    assert sorted(records[records["method"] == "interleaved"]["k"].unique()) == [0, 1, 2]   # Q, 1MT, 2MT
    assert records["accuracy"].between(0, 1).all()
    inter = records[records["method"] == "interleaved"]
    assert inter["fed_image_acc"].between(0, 1).all() and inter["gate_margin"].notna().all()
    assert inter["fed_token_acc"].between(0, 1).all() and inter["copy_token_acc"].between(0, 1).all()
    assert (records.loc[records["method"] != "lookup", "malformed"] == 0).all()   # constrained decoding at full
    text = records[records["method"] == "text_trace"]
    assert inter["supervised_tokens"].ge(text["supervised_tokens"].max() + 36).all()   # >= 2 images of 18 tokens
    test_rows = data.read_parquet(workdir / "data/full/zebra_cot/raw/counting/test.parquet")
    assert {r["config"] for r in test_rows} <= set(configs) and 0 < len(test_rows) <= 8
    val_rows = data.read_parquet(workdir / "data/full/zebra_cot/raw/counting/val.parquet")
    assert {r["config"] for r in val_rows} <= set(configs) and 0 < len(val_rows) <= 8
