"""Card 14, encoder redundancy: MiniMME in VLMEvalKit's TSV layouts, the row reader (index references,
hints, malformed answers), CUR and IG with validation-chosen subsets, zero masking, the scorers, and the
full-scale path offline: real-format MCQ / VQA / Y-N TSVs served on loopback, md5-pinned, acquired and
streamed by prepare, then masked evaluation of a tiny transformers DeepseekVLHybridForConditionalGeneration
(a real two-encoder class, SAM + SigLIP) written by save_pretrained. (The smoke pipeline and resume are
tests/test_contract.py's.)"""
import base64
import csv
import hashlib
import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from iclr26.papers.encoder_redundancy import analysis, full, minimme, model, stages


def test_minimme_writes_vlmevalkit_tsv_and_reads_back(tmp_path):
    path = tmp_path / "t.tsv"
    minimme.write_tsv(path, 5, seed=0, noise=0.05)
    with open(path) as f:
        header = next(csv.reader(f, delimiter="\t"))
    assert header[:3] == ["index", "image", "question"] and "answer" in header and "hint" in header
    tab = minimme.to_arrays(path)
    assert tab["x"].shape == (20, 3, 16, 16) and tab["skipped"] == 0
    ocr = tab["category"] == "ocr"
    assert tab["allowed"][ocr].all() and (tab["allowed"][~ocr].sum(1) == 4).all()   # open VQA vs 4 options
    right = np.array([minimme.ANSWERS[i] for i in tab["y"]])
    assert set(right[ocr]) <= set(minimme.DIGITS) and set(right[~ocr]).isdisjoint(minimme.DIGITS)


def test_knowledge_needs_more_than_the_colour():
    fams = {c: {minimme.family(c, r) for r in minimme.RELATIONS} for c in minimme.COLOURS}
    assert all(len(f) == 4 for f in fams.values())   # the colour alone does not tell the family
    sides = {r: {minimme.family(c, r) for c in minimme.COLOURS} for r in minimme.RELATIONS}
    assert all(len(f) == 4 for f in sides.values())   # nor the side alone


def test_glyph_is_drawn():
    img, facts = minimme.draw(np.random.default_rng(1), 0.0)
    assert (img[11:16].mean(2) == 0).sum() == sum(r.count("1") for r in minimme.GLYPHS[facts["digit"]])


def _b64_png(size, value=200):
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)


def _mcq_rows():
    base = {"hint": "", "C": "", "D": "", "category": "coarse_perception", "l2-category": "x", "split": "dev"}
    return [{**base, "index": 10, "image": _b64_png(40), "question": "Which animal?", "hint": "A pet.", "A": "cat",
             "B": "dog", "answer": "B"},
            {**base, "index": 11, "image": "10", "question": "Same image?", "A": "yes", "B": "no", "answer": "A"},
            {**base, "index": 12, "image": _b64_png(30), "question": "Bad answer", "A": "x", "B": "y", "answer": "AB"},
            {**base, "index": 13, "image": _b64_png(30), "question": "No answer", "A": "x", "B": "y", "answer": ""}]


def test_row_reader_resolves_references_and_rejects_bad_answers(tmp_path):
    path = tmp_path / "MMBench_DEV_EN.tsv"
    _write(path, _mcq_rows())
    rows = list(minimme.iter_rows(path))
    assert rows[2] is None and rows[3] is None
    assert rows[1]["image"] == rows[0]["image"] and rows[1]["type"] == "MCQ"
    prompt = minimme.build_prompt(rows[0])
    assert prompt.startswith("Hint: A pet.\nQuestion: Which animal?\nOptions:\nA. cat\nB. dog\n")


def test_cur_ig_and_validation_chosen_subset():
    keeps = model.keep_masks(2)
    assert keeps == [(1, 1), (1, 0), (0, 1)] and len(model.keep_masks(4)) == 15
    cat = np.array(["ocr"] * 4 + ["general"] * 4)
    test = np.array([[1, 1, 1, 1, 1, 1, 1, 0],     # all kept: ocr 1.0, general 0.75
                     [0, 0, 1, 1, 1, 1, 1, 1],     # without encoder b: ocr 0.5, general 1.0
                     [1, 1, 1, 1, 1, 1, 0, 0]])    # without encoder a: ocr 1.0, general 0.5
    val = np.array([[1, 1, 1, 1, 1, 1, 1, 1],
                    [1, 1, 1, 1, 0, 0, 0, 0],      # validation prefers keeping b on general
                    [1, 1, 1, 1, 1, 1, 1, 1]])
    rec = analysis.mask_records(test, cat, val, cat, keeps, ("a", "b"), "zero", 0, {"ocr": 0.1, "general": 0.25})
    cur = {(r["category"], r["encoder"]): r["cur"] for r in rec if r["kind"] == "cur"}
    assert cur[("ocr", "b")] == pytest.approx(0.5) and cur[("ocr", "a")] == pytest.approx(0.0)
    assert cur[("general", "b")] == pytest.approx(-1 / 3) and cur[("general", "a")] == pytest.approx(1 / 3)
    summ = {r["category"]: r for r in rec if r["kind"] == "summary"}
    assert summ["general"]["ig"] == pytest.approx(2 / 3)
    # the subset chosen on validation (keep b) scores 0.5 on test: gain -0.25, not the test-best +0.25
    assert summ["general"]["best_gain"] == pytest.approx(-0.25) and summ["general"]["kept"] == "b"
    assert summ["general"]["cur_cap"] == pytest.approx(1 - 0.25 / 0.75)


def test_zero_mask_removes_exactly_the_masked_encoder():
    torch.manual_seed(0)
    encs = [model.Encoder(k, 4, 0.5) for k in model.ENCODERS]
    head = model.Head(16, 4, 8, 4, len(minimme.ANSWERS)).eval()
    x = torch.rand(5, 3, 16, 16)
    q, allowed = torch.zeros(5, dtype=torch.long), torch.ones(5, len(minimme.ANSWERS), dtype=torch.bool)

    def out():
        z = torch.cat([e(x, torch.Generator().manual_seed(0)) for e in encs], 1)
        return head(model.mask_features(z, (1, 1, 0, 1), 4), q, allowed)

    before = out()
    with torch.no_grad():
        for p in encs[2].parameters():
            p.add_(1.0)
    assert torch.allclose(before, out())
    with torch.no_grad():
        for p in encs[1].parameters():
            p.add_(1.0)
    assert not torch.allclose(before, out())


def test_scorers():
    opts = {"A": "cat", "B": "dog"}
    assert full.mcq_choice("B", opts) == "B" and full.mcq_choice("The answer is B.", opts) == "B"
    assert full.mcq_choice("a dog", opts) == "B" and full.mcq_choice("A or B", opts) is None
    assert full.anls("hello", ["hello"]) == 1.0 and full.anls("xyz", ["hello"]) == 0.0
    # VLMEvalKit anls_compute + hit_calculate: 1 - min distance, zeroed below 0.5 (0.5 itself is kept);
    # "Hello  World" vs "hello world": case and whitespace are normalised
    assert full.anls("Hello  World", ["hello world"]) == 1.0 and full.anls("ab", ["ac"]) == 0.5
    assert full.relaxed("10.2", ["10"]) == 1.0 and full.relaxed("12", ["10"]) == 0.0


def test_scorers_follow_vlmevalkit():
    """Each case quotes the VLMEvalKit function it follows (open-compass/VLMEvalKit at 0a04a1d)."""
    # vqa_eval.process_line(method='vqa_score') + hit_calculate('TextVQA'):
    #   for each gt i: acc = min(1, len([g for j, g in enumerate(gts) if j != i and g == pred]) / 3); mean
    ten = ["stop"] * 3 + ["halt"] * 7
    assert full.score({"type": "VQA", "answer": ten}, "stop", "vqa") == pytest.approx(0.9)
    assert full.score({"type": "VQA", "answer": ["stop"] * 4 + ["halt"] * 6}, "stop", "vqa") == 1.0
    assert full.score({"type": "VQA", "answer": ["stop"] + ["halt"] * 9}, "stop", "vqa") == pytest.approx(0.3)
    assert full.score({"type": "VQA", "answer": ["halt"] * 10}, "stop", "vqa") == 0.0
    # process_answer: punctuation, number words, articles ("The Two." -> "2")
    assert full.process_answer("The Two.") == "2" and full.process_answer("a dog!") == "dog"
    assert full.vqa_score("Two", ["2"] * 10) == 1.0
    # yorn.YOrN_Extraction: 'yes' in words and 'no' not in words -> Yes; both or neither -> Unknown
    assert full.yorn_extraction("The answer is yes.") == "Yes" and full.yorn_extraction("No, it is not.") == "No"
    assert full.yorn_extraction("yes or no") == "Unknown" and full.yorn_extraction("maybe") == "Unknown"
    assert full.score({"type": "VQA", "answer": ["Yes"]}, "The answer is yes.", "yes_no") == 1.0
    assert full.score({"type": "VQA", "answer": ["No"]}, "The answer is yes.", "yes_no") == 0.0
    assert full.chance({"type": "VQA", "answer": ["Yes"]}, "yes_no") == 0.5
    assert full.chance({"type": "VQA", "answer": ["x"]}, "vqa") == 0.0
    assert full.chance({"type": "MCQ", "options": {"A": 1, "B": 2, "C": 3, "D": 4}}) == 0.25
    # vqa_eval.relaxed_correctness: "if text.endswith('%'): return float(text.rstrip('%')) / 100.0";
    # within 5% of a non-zero target, else case-insensitive exact match; max over answers (ChartQA)
    assert full.relaxed("50%", ["0.5"]) == 1.0 and full.relaxed("0.5", ["50%"]) == 1.0
    assert full.relaxed("50", ["0.5"]) == 0.0 and full.relaxed("0", ["0"]) == 1.0
    assert full.relaxed("Blue", ["blue"]) == 1.0 and full.relaxed("1,000", ["1000"]) == 0.0
    # process_line(method='accuracy') (GQA): strip + lower exact match, no punctuation handling
    assert full.score({"type": "VQA", "answer": ["Yes"]}, " yes ", "accuracy") == 1.0
    assert full.score({"type": "VQA", "answer": ["yes"]}, "yes.", "accuracy") == 0.0
    # default branch (here: MathVista / MMMU open answers): process_answer equality
    assert full.score({"type": "VQA", "answer": ["3.5"]}, "3.5.", "exact") == 1.0
    with pytest.raises(ValueError, match="unknown metric"):
        full.score({"type": "VQA", "answer": ["x"]}, "x", "nope")


def test_item_bootstrap_intervals():
    """One greedy pass: the summary metrics get 95% intervals over items resampled within benchmarks."""
    rng = np.random.default_rng(0)
    n = 400
    cat = np.array(["b1", "b2"] * (n // 2))
    base = rng.random(n) < 0.8
    test = np.stack([base, base & (rng.random(n) < 0.5), base])   # keeps (1,1), (1,0), (0,1)
    keeps = [(1, 1), (1, 0), (0, 1)]
    groups = {"b1": ("b1",), "b2": ("b2",), "overall": ("b1", "b2")}
    ch = {"b1": 0.0, "b2": 0.0}
    lohi = full.item_intervals(test, cat, test, cat, keeps, ("e1", "e2"), ch, groups, 200, 0)
    rec = {r["category"]: r for r in analysis.mask_records(test, cat, test, cat, keeps, ("e1", "e2"), "zero", 0, ch,
                                                            groups=groups) if r["kind"] == "summary"}
    lo, hi = lohi[("overall", "cur_max")]
    assert lo < rec["overall"]["cur_max"] < hi and 0.3 < lo and hi < 0.7   # masking e2 halves accuracy: CUR ~0.5
    assert lohi[("overall", "cur_min")] == (0.0, 0.0)


def test_multi_image_rows(tmp_path):
    """VLMEvalKit image_base.py reads a multi-image cell with toliststr: a list literal of base64 images."""
    a, b = _b64_png(10), _b64_png(10, 30)
    path = tmp_path / "MMMU_DEV_VAL.tsv"
    _write(path, [{"index": 1, "image": str([a, b]), "question": "Compare <image 1> and <image 2>", "A": "x",
                   "B": "y", "answer": "A", "category": "art"},
                  {"index": 2, "image": a, "question": "One", "A": "x", "B": "y", "answer": "B", "category": "art"}])
    rows = list(minimme.iter_rows(path))
    assert rows[0]["images"] == [a, b] and rows[0]["image"] == a and rows[1]["images"] == [a]
    info = minimme.write_items(path, tmp_path / "prep" / "MMMU_DEV_VAL.jsonl", "knowledge")
    assert info == {"items": 2, "skipped": 0}
    items = [json.loads(line) for line in open(tmp_path / "prep" / "MMMU_DEV_VAL.jsonl")]
    assert items[0]["images"] == ["MMMU_DEV_VAL/1.img", "MMMU_DEV_VAL/1_1.img"]
    px = [np.asarray(minimme.decode_image_file(tmp_path / "prep" / f))[0, 0, 0] for f in items[0]["images"]]
    assert px[0] != px[1]
    with pytest.raises(NotImplementedError, match="Eagle-X4/X5"):
        full.family("eagle")


def _tiny_deepseek_vl(path):
    """A two-encoder transformers model (SAM high-res + SigLIP low-res) and its processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        DeepseekVLHybridConfig,
        DeepseekVLHybridForConditionalGeneration,
        DeepseekVLHybridImageProcessor,
        DeepseekVLHybridProcessor,
        PreTrainedTokenizerFast,
    )

    special = ["<unk>", "<bos>", "<eos>", "<image_placeholder>", "<pad>"]
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(["Question: Which animal? Options: A. cat B. dog yes no 0 1 2"] * 20, trainers.BpeTrainer(
        vocab_size=120, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                  unk_token="<unk>", extra_special_tokens={"image_token": "<image_placeholder>"})
    cfg = DeepseekVLHybridConfig(
        text_config={"model_type": "llama", "vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                     "max_position_embeddings": 256, "bos_token_id": tok.bos_token_id,
                     "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id},
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 32,
                       "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        high_res_vision_config={"model_type": "sam_vision_model", "hidden_size": 16, "output_channels": 8,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64, "patch_size": 16,
                                "global_attn_indexes": [1], "window_size": 2, "mlp_dim": 32},
        image_token_id=tok.convert_tokens_to_ids("<image_placeholder>"))
    torch.manual_seed(0)
    net = DeepseekVLHybridForConditionalGeneration(cfg)
    with torch.no_grad():   # a non-zero SAM mixing weight so that both branches reach the aligner
        net.model.high_res_vision_alpha.fill_(0.5)
    template = ("{% for m in messages %}User: {% for c in m['content'] %}{% if c['type'] == 'image' %}"
                "<image_placeholder>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
                "{% if add_generation_prompt %}Assistant:{% endif %}")
    proc = DeepseekVLHybridProcessor(
        image_processor=DeepseekVLHybridImageProcessor(size={"height": 32, "width": 32},
                                                       high_res_size={"height": 64, "width": 64}),
        tokenizer=tok, chat_template=template, num_image_tokens=16)
    net.save_pretrained(path)
    proc.save_pretrained(path)


def test_full_scale_path_offline(static_server, tmp_path):
    root, url = static_server
    _write(root / "MMBench_DEV_EN.tsv", _mcq_rows())
    _write(root / "TextVQA_VAL.tsv", [
        {"index": 0, "image": _b64_png(48, 90), "question": "What is written?", "answer": "['stop', 'stop', 'stop']",
         "category": "textvqa"},
        {"index": 1, "image": _b64_png(48, 30), "question": "What brand?", "answer": "['acme', 'acme']",
         "category": "textvqa"}])
    _write(root / "MME.tsv", [
        {"index": 0, "image": _b64_png(20), "question": "Is it grey?", "answer": "Yes", "category": "color"},
        {"index": 1, "image": "0", "question": "Is it red?", "answer": "No", "category": "color"}])
    groups = {"MMBench_DEV_EN": ("general", "mcq"), "MME": ("general", "yes_no"), "TextVQA_VAL": ("ocr", "vqa")}
    benches = {b: {"url": f"{url}/{b}.tsv", "md5": hashlib.md5((root / f"{b}.tsv").read_bytes()).hexdigest(),
                   "group": g, "metric": m} for b, (g, m) in groups.items()}
    _tiny_deepseek_vl(tmp_path / "dsvl")
    raw, prep, run = tmp_path / "raw", tmp_path / "prep", tmp_path / "run"
    for d in (raw, prep, run):
        d.mkdir()
    cfg = {"data": {"minimme": {"source": "vlmevalkit", "benchmarks": benches}}, "device": "cpu",
           "model": {"image_size": 16, "run": ["dsvl"],
                     "checkpoints": {"dsvl": {"source": str(tmp_path / "dsvl"), "revision": None,
                                              "family": "deepseek_vl_hybrid", "dtype": "float32"},
                                     "x5": {"source": "NVEagle/Eagle-X5-7B", "revision": None, "family": "eagle"}}},
           "eval": {"batch_size": 2, "max_new_tokens": 3, "max_items": None, "sampling": None, "n_boot": 20}}
    job = SimpleNamespace(cfg=cfg, dataset="minimme", out_dir=raw, log=lambda *a, **k: None, seeds=[0],
                          raw_dir=lambda ds=None: raw, prepared_dir=lambda ds=None: prep,
                          units=lambda keys, work: {k: work(k) for k in keys})
    info = stages.acquire(job)
    assert info["files"]["MME"]["sha256"] and info["models"]["dsvl"]["local"]
    job.out_dir = prep
    out = stages.prepare(job)["benchmarks"]
    assert out["MMBench_DEV_EN"] == {"items": 2, "skipped": 2} and out["MME"]["items"] == 2
    items = [json.loads(line) for line in open(prep / "MMBench_DEV_EN.jsonl")]
    assert items[1]["image"] == "MMBench_DEV_EN/11.img" and (prep / items[1]["image"]).read_bytes()[:4] == b"\x89PNG"
    assert json.loads(open(prep / "TextVQA_VAL.jsonl").readline())["answer"] == ["stop"] * 3
    job.out_dir = run
    assert stages.train(job)["snapshots"]["dsvl"] == str(tmp_path / "dsvl")

    # masking: a pre-hook zeroes exactly the masked branch at the aligner's input
    runner = full.DeepseekVLHybrid(str(tmp_path / "dsvl"), "cpu", "float32")
    seen = []
    runner.model.model.aligner.register_forward_hook(lambda m, a, o: seen.append([t.clone() for t in a]))
    img = minimme.decode_image_file(prep / items[0]["image"])
    answers = {}
    for keep in model.keep_masks(2):
        runner.set_keep(keep)
        answers[keep] = runner.generate([img], [items[0]["prompt"]], 3, None, 0)
    (low_all, high_all), (low_1, high_1), (low_2, high_2) = seen[0], seen[1], seen[2]
    # keeps: (1,1) all; (1,0) SAM kept, SigLIP masked; (0,1) SAM masked, SigLIP kept
    assert torch.equal(high_1, high_all) and not low_1.any() and low_all.abs().sum() > 0
    assert torch.equal(low_2, low_all) and not high_2.any() and high_all.abs().sum() > 0
    assert all(isinstance(a[0], str) for a in answers.values())

    res = stages.evaluate(job)["records"]
    assert len(list(run.glob("dsvl__*__*__s0.jsonl"))) == 3 * 3   # 3 kept subsets x 3 benchmarks
    summ = {r["category"]: r for r in res if r["kind"] == "summary"}
    assert {"general", "ocr", "overall", "MME", "TextVQA_VAL"} <= set(summ)
    assert {r["checkpoint"] for r in res} == {"dsvl"} and {r["world"] for r in res} == {"asymmetric"}
    curs = [r for r in res if r["kind"] == "cur" and r["category"] == "overall"]
    assert [r["encoder"] for r in curs] == list(full.DeepseekVLHybrid.encoders)
    # one greedy pass: the claims' intervals are item-bootstrap ones on the summary records (test fit)
    assert {f"{m}_{e}" for m in full.INTERVAL_METRICS for e in ("lo", "hi")} <= set(summ["overall"])
    # a multi-image row is decoded into all its images, one placeholder each
    two = runner.generate([[img, img], img], ["first", "second"], 2, None, 0)
    assert len(two) == 2 and all(isinstance(t, str) for t in two)
    cfg["model"]["run"] = ["x5"]
    with pytest.raises(NotImplementedError, match="Eagle-X4/X5"):
        stages.evaluate(job)


def _plain_marker(rng, sy, sx, relation):
    """The generator's original one-by-one rejection loop (the reference for minimme._first_marker)."""
    cy, cx = sy + 3, sx + 3
    for _ in range(200):
        my, mx = int(rng.integers(0, 10)), int(rng.integers(0, 15))
        dy, dx = my + 1 - cy, mx + 1 - cx
        outside = my + 2 <= sy or my >= sy + 6 or mx + 2 <= sx or mx >= sx + 6
        rel = ("left" if dx < 0 else "right") if abs(dx) > abs(dy) + 1 else \
              ("above" if dy < 0 else "below") if abs(dy) > abs(dx) + 1 else None
        if outside and rel == relation:
            return my, mx
    return None


def test_marker_sampling_equals_the_one_by_one_loop():
    cases = [(sy, sx, rel) for sy in (0, 2, 5) for sx in (0, 4, 10) for rel in minimme.RELATIONS]
    assert (0, 4, "above") in cases   # no room above: all 200 tries fail (None), as in the loop
    for seed, (sy, sx, rel) in enumerate(cases):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        got, want = minimme._first_marker(a, sy, sx, rel), _plain_marker(b, sy, sx, rel)
        assert got == want
        assert a.bit_generator.state == b.bit_generator.state   # the generator ends where the loop's does
    assert minimme._first_marker(np.random.default_rng(0), 0, 4, "above") is None


def _plain_pretrain(enc, head, data, t, seed):
    """Stage 1 as first written: the view recomputed per batch, single-tensor AdamW."""
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=t["lr"],
                            weight_decay=t["weight_decay"], foreach=False)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=t["lr"], total_steps=t["pretrain_steps"], pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    enc.train()
    head.train()
    for _ in range(t["pretrain_steps"]):
        idx = torch.randint(0, len(data["y"]), (t["batch_size"],), generator=gen)
        out = head(enc(data["x"][idx], gen), data["q"][idx], data["allowed"][idx])
        loss = torch.nn.functional.cross_entropy(out, data["y"][idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()


@pytest.mark.parametrize("view", ["native", "full"])
def test_pretrain_with_cached_views_and_foreach_adam_equals_the_plain_loop(tmp_path, view):
    minimme.write_tsv(tmp_path / "t.tsv", 30, seed=0, noise=0.05)
    tab = minimme.to_arrays(tmp_path / "t.tsv")
    data = {k: torch.as_tensor(tab[k]) for k in ("x", "q", "allowed", "y")}
    cfg = {"model": {"width": 4, "proj_dim": 4, "hidden": 8, "noise_sigma": 0.5},
           "train": {"pretrain_steps": 6, "steps": 6, "batch_size": 16, "lr": 1e-2, "weight_decay": 0.01}}
    for i, kind in enumerate(model.ENCODERS):   # noisy (native) keeps its per-batch noise draws
        nets = []
        for _ in range(2):
            torch.manual_seed(i)
            nets.append((model.Encoder(kind, 4, 0.5, view), stages._head(cfg, 1)))
        model.pretrain_encoder(*nets[0], data, cfg, 7 + i)
        _plain_pretrain(*nets[1], data, cfg["train"], 7 + i)
        new = [p for m in nets[0] for p in m.parameters()]
        old = [p for m in nets[1] for p in m.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(new, old)), kind


def test_per_encoder_features_slice_to_the_variant_concatenation():
    cfg = {"model": {"width": 4, "noise_sigma": 0.5}}
    encs = stages._encoders(cfg, "native", 3)
    x = torch.rand(50, 3, 16, 16)
    each = stages._enc_feats(encs, x, 5)
    for used in ([0, 1, 2, 3], [0, 2], [3], [1, 3]):
        assert torch.equal(torch.cat([each[i] for i in used], 1), stages._feats([encs[i] for i in used], x, 5))
