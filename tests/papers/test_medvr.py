"""Card 02, MedVR: the VQA-RAD-schema generator and loader, the global view erasing the texture,
GRPO's group advantage, CCA's consensus rule, EVR's branching, the seed-batched training, and the
full-scale acquire path offline (a VQA-RAD-layout parquet with
JPEG bytes from a loopback server, sha256-pinned). The smoke pipeline is tests/test_contract.py's."""
import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from iclr26.papers.medvr import agent, data, stages

SPEC = {"image_size": 32, "grid": 4, "pool": 4, "jitter": False, "lesion_size": 3,
        "classes": ["ring", "filled", "plus", "x"], "background": 0.3, "noise": 0.0, "lesion_gain": 1.0,
        "n_train": 40, "n_test": 20}
CFG = {"agent": {"hidden": 8, "pool": 4, "warm_steps": 5, "warm_lr": 3e-3, "warm_batch": 8},
       "train": {"steps": 3, "batch": 4, "group": 4, "lr": 3e-3, "answer_lr": 3e-4, "evr_tau": 0.0, "cca_lambda": 0.5,
                 "cca_min_correct": 1, "cca_agree": 0.5}}


def test_textures_have_equal_intensity_and_differ():
    tex = data.textures(3)
    sums = {k: v.sum() for k, v in tex.items()}
    assert np.allclose(list(sums.values()), 8.0)
    assert len({v.tobytes() for v in tex.values()}) == 4


def test_schema_roundtrip_and_global_view_erases_texture(tmp_path):
    counts = data.write_synthetic(tmp_path, {**SPEC, "background": 0.0}, 0)
    assert counts == {"train": 40, "test": 20}
    table = pq.read_table(tmp_path / "data" / "train-00000-of-00001.parquet")
    assert table.column_names == ["image", "question", "answer"]   # VQA-RAD's columns
    rows = data.load_vqa(tmp_path, "train", 32)
    assert rows["images"].shape == (40, 32, 32) and set(rows["answers"]) <= set(SPEC["classes"])
    glob, crops = agent.views(rows["images"], 4, 4)
    assert glob.shape == (40, 64) and crops.shape == (40, 16, 64)
    # noise-free scans on a black background: the lesion's cell is the brightest crop
    assert (crops.sum(-1).argmax(1) == rows["cells"]).mean() > 0.9
    # two scans differing only in texture have the same global view (the lesion lies in one pool block)
    spec = {**SPEC, "background": 0.0}
    a = data.make_scans(1, {**spec, "classes": ["ring"]}, np.random.default_rng(1))[0]
    b = data.make_scans(1, {**spec, "classes": ["plus"]}, np.random.default_rng(1))[0]
    ga, gb = agent.views(a, 4, 4)[0], agent.views(b, 4, 4)[0]
    assert np.allclose(ga, gb) and not np.allclose(a, b)


def test_group_advantage_and_consensus():
    r = torch.tensor([[1.0, 0.0, 1.0, 0.0, 5.0]])
    valid = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    adv = agent.group_advantage(r, valid)
    assert torch.allclose(adv[0, :4], torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4) and adv[0, 4] == 0
    cells = torch.tensor([[2, 2, 3, 2, 7, 7]])
    correct = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    mode, use = agent.consensus(cells, correct, 16, 3, 0.5)
    assert mode.item() == 2 and use.item()
    mode, use = agent.consensus(cells, correct, 16, 4, 0.5)      # too few correct rollouts
    assert not use.item()
    mode, use = agent.consensus(cells, correct, 16, 3, 0.7)      # 2/3 agree < 0.7
    assert not use.item()


def _arrays(tmp_path):
    data.write_synthetic(tmp_path, {**SPEC, "noise": 0.1}, 0)
    rows = data.load_vqa(tmp_path, "train", 32)
    glob, crops = agent.views(rows["images"], 4, 4)
    vocab = sorted(set(rows["answers"]))
    labels = np.array([vocab.index(a) for a in rows["answers"]])
    return glob, crops, labels, rows["cells"], len(vocab)


def test_seed_block_evr_branching_and_blank_and_oracle_views(tmp_path):
    glob, crops, labels, cells, C = _arrays(tmp_path)
    base, _ = agent.warm_start(glob, crops, cells, labels, C, CFG, 0)
    both = agent.train_arm("outcome_grpo", glob, crops, labels, base, C, CFG, [3, 4])
    one = agent.train_arm("outcome_grpo", glob, crops, labels, base, C, CFG, [3])
    # one weight slice per seed
    assert both["answer"][0].shape[0] == 2 and one["answer"][0].shape[0] == 1
    evr = agent.train_arm("evr", glob, crops, labels, base, C, CFG, [0])   # tau 0: every rollout branches
    assert np.allclose(evr["rollouts_per_question"], 2 * CFG["train"]["group"])
    g = agent.train_arm("global_only", glob, crops, labels, base, C, CFG, [0])
    res = agent.evaluate(g["answer"], g["zoom"], glob, crops, labels, cells, "blank")
    assert np.isnan(res["grounding_hit"]).all() and 0 <= res["accuracy"][0] <= 1
    oracle = agent.evaluate(base, None, glob, crops, labels, cells, "oracle")
    assert oracle["grounding_hit"][0] == 1.0


def test_numpy_forward_matches_torch():
    gen = torch.Generator().manual_seed(0)
    params = agent.init_mlp(2, [5, 4, 3], gen)
    x = torch.randn(2, 6, 5, generator=gen)
    assert np.allclose(agent.mlp(params, x).detach().numpy(), agent.mlp_np(agent.to_np(params), x.numpy()), atol=1e-5)


def test_full_scale_acquire_and_loader_offline(tmp_path, static_server):
    """VQA-RAD's layout: data/test-*.parquet, image {bytes (JPEG), path}, question, answer."""
    folder, base = static_server
    blobs, answers = [], ["yes", "No ", "left"]
    for k in range(3):
        buf = io.BytesIO()
        Image.fromarray((np.random.default_rng(k).random((40, 50, 3)) * 255).astype(np.uint8)).save(buf, format="JPEG")
        blobs.append({"bytes": buf.getvalue(), "path": f"synpic{k}.jpg"})
    name = "data/test-00000-of-00001-abc.parquet"
    where = folder / "datasets/org/vqa/resolve" / ("0" * 40) / "data"
    where.mkdir(parents=True)
    table = pa.table({"image": blobs, "question": ["is it?"] * 3, "answer": answers})
    pq.write_table(table, where / name.split("/")[1])
    sha = hashlib.sha256((where / name.split("/")[1]).read_bytes()).hexdigest()
    spec = {"source": "hub", "hub_id": "org/vqa", "revision": "0" * 40, "endpoint": base,
            "files": {"test": {"file": name, "sha256": sha}}, "image_size": 16}

    class Job:
        cfg = {"data": {"vqa_rad": spec}, "agent": {"pool": 4}}
        dataset = "vqa_rad"
        out_dir = tmp_path / "raw"

    info = stages.acquire(Job)
    assert info["files"]["test"]["sha256"] == sha
    rows = data.load_vqa(Job.out_dir, "test", 16)
    assert rows["images"].shape == (3, 16, 16) and rows["answers"] == ["yes", "no", "left"]
    assert "cells" not in rows   # real data: no lesion cells, grounding is not scored
    spec["files"]["test"]["sha256"] = "f" * 64
    with pytest.raises(Exception, match="sha256"):
        stages.acquire(type("J", (), {**Job.__dict__, "out_dir": tmp_path / "raw2"}))
