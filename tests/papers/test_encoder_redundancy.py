"""Card 14, encoder redundancy: MiniMME in VLMEvalKit's MCQ TSV layout, CUR and IG, the masks, that
masking zeroes exactly the masked encoder, and the full-scale path offline (a real-format TSV with a
larger image and an image-reference row, md5-pinned, served on loopback, acquired and prepared by
the stages). (The smoke pipeline and resume are tests/test_contract.py's.)"""
import base64
import csv
import hashlib
import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from iclr26.papers.encoder_redundancy import analysis, minimme, model, stages


def test_minimme_writes_vlmevalkit_tsv_and_reads_back(tmp_path):
    path = tmp_path / "t.tsv"
    minimme.write_tsv(path, 5, seed=0, noise=0.05)
    with open(path) as f:
        header = next(csv.reader(f, delimiter="\t"))
    assert header == ["index", "image", "question", "A", "B", "C", "D", "answer", "category"]
    tab = minimme.read_tsv(path)
    assert tab["image"].shape == (20, 3, 16, 16) and tab["skipped"] == 0
    assert set(tab["category"]) == set(minimme.CATEGORIES)
    ids = minimme.answer_ids(tab["options"])
    assert (ids >= 0).all()
    right = np.array([minimme.ANSWERS[i] for i in ids[np.arange(20), tab["answer"]]])
    ocr = tab["category"] == "ocr"
    assert set(right[ocr]) <= set(minimme.DIGITS) and set(right[~ocr]).isdisjoint(minimme.DIGITS)


def test_glyph_is_drawn_and_read_only_at_full_resolution():
    img, facts = minimme.draw(np.random.default_rng(1), 0.0)
    band = img[11:16].mean(2)
    assert (band == 0).sum() == sum(r.count("1") for r in minimme.GLYPHS[facts["digit"]])


def test_cur_and_ig_follow_the_project_page_formulas():
    keeps = model.keep_masks(2)
    assert keeps == [(1, 1), (1, 0), (0, 1)] and len(model.keep_masks(4)) == 15
    cat = np.array(["ocr"] * 4 + ["general"] * 4)
    correct = np.array([[1, 1, 1, 1, 1, 1, 1, 0],     # all kept: ocr 1.0, general 0.75
                        [0, 0, 1, 1, 1, 1, 1, 1],     # without encoder b: ocr 0.5, general 1.0
                        [1, 1, 1, 1, 1, 1, 0, 0]])    # without encoder a: ocr 1.0, general 0.5
    rec = analysis.mask_records(correct, cat, keeps, ("a", "b"), "zero", 0)
    cur = {(r["category"], r["encoder"]): r["cur"] for r in rec if r["kind"] == "cur"}
    assert cur[("ocr", "b")] == pytest.approx(0.5) and cur[("ocr", "a")] == pytest.approx(0.0)
    assert cur[("general", "b")] == pytest.approx(-1 / 3) and cur[("general", "a")] == pytest.approx(1 / 3)
    summ = {r["category"]: r for r in rec if r["kind"] == "summary"}
    assert summ["general"]["ig"] == pytest.approx(2 / 3) and summ["general"]["best_gain"] == pytest.approx(0.25)
    assert summ["ocr"]["cur_min"] == pytest.approx(0.0)


def test_zero_mask_removes_exactly_the_masked_encoder():
    cfg = {"model": {"width": 4, "proj_dim": 4, "hidden": 8, "noise_sigma": 0.5}}
    torch.manual_seed(0)
    net = model.build(model.ENCODERS, cfg, 4, len(minimme.ANSWERS)).eval()
    x, q, o = torch.rand(5, 3, 16, 16), torch.zeros(5, dtype=torch.long), torch.arange(4).repeat(5, 1)
    keep = torch.tensor([1, 1, 0, 1])
    gen = lambda: torch.Generator().manual_seed(0)   # noqa: E731
    before = net(x, q, o, keep, "zero", gen())
    with torch.no_grad():
        for p in net.encoders[2].parameters():
            p.add_(1.0)
    assert torch.allclose(before, net(x, q, o, keep, "zero", gen()))
    assert not torch.allclose(before, net(x, q, o, None, "zero", gen()))


def _b64_png(size):
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), 200, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_full_scale_path_offline(static_server, tmp_path):
    root, url = static_server
    rows = [{"index": 0, "image": _b64_png(40), "question": "Which animal?", "hint": "", "A": "cat", "B": "dog",
             "C": "", "D": "", "answer": "B", "category": "coarse_perception", "l2-category": "x", "split": "dev"},
            {"index": 1, "image": "0", "question": "Same image?", "hint": "", "A": "yes", "B": "no", "C": "",
             "D": "", "answer": "A", "category": "coarse_perception", "l2-category": "x", "split": "dev"}]
    with open(root / "MMBench_DEV_EN.tsv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    md5 = hashlib.md5((root / "MMBench_DEV_EN.tsv").read_bytes()).hexdigest()
    spec = {"source": "vlmevalkit",
            "benchmarks": {"MMBench_DEV_EN": {"url": f"{url}/MMBench_DEV_EN.tsv", "md5": md5, "group": "general"}}}
    raw, prep = tmp_path / "raw", tmp_path / "prep"
    raw.mkdir()
    prep.mkdir()
    cfg = {"data": {"minimme": spec}, "model": {"image_size": 16}, "eval": {}}
    job = SimpleNamespace(cfg=cfg, dataset="minimme", out_dir=raw, log=lambda *a, **k: None,
                          raw_dir=lambda ds=None: raw)
    info = stages.acquire(job)
    assert info["files"]["MMBench_DEV_EN"]["sha256"]
    job.out_dir = prep
    out = stages.prepare(job)
    assert out == {"test": 1, "checks": {}}
    arrays = np.load(prep / "arrays.npz", allow_pickle=False)
    assert arrays["test_x"].shape == (1, 3, 16, 16) and list(arrays["test_category"]) == ["general"]
    assert arrays["test_y"][0] == 1
    with pytest.raises(NotImplementedError):
        stages.train(job)
