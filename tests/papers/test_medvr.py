"""Card 02, MedVR: the VQA-RAD-schema generator and loader, the global view erasing the texture,
GRPO's group advantage, CCA's consensus rule and its correctness-gated bonus, EVR's prefix branching,
the seed-batched training, and the full-scale path offline: both VQA-RAD-layout parquets (JPEG bytes)
from a loopback server, sha256-pinned, read by the RGB loader; a tiny Qwen2.5-VL built from its
config (save_pretrained) with LoRA: rollouts with a DeepEyes tool call (the crop of the smart-resized
view re-encoded as a new image), DeepEyes' reward, a real forward/backward and one GRPO update, EVR
branches within the turn budget, CCA's pseudo box, the logged branch and fire rates, and batched
(left-padded) generation equal to one trajectory at a time under greedy decoding.
The smoke pipeline is tests/test_contract.py's."""
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
       "train": {"steps": 3, "batch": 4, "group": 4, "group_matched": 5, "lr": 3e-3, "answer_lr": 3e-4,
                 "evr_tau": 0.0, "cca_lambda": 0.5,
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
    # CCA's bonus: only correct rollouts at the consensus cell (rollout 3 zooms there but is wrong)
    bonus = agent.cca_bonus(cells, correct, torch.ones_like(correct), 16, 3, 0.5)
    assert bonus.tolist() == [[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]]


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
    none = agent.train_arm("evr", glob, crops, labels, base, C, {**CFG, "train": {**CFG["train"], "evr_tau": 1.0}}, [0])
    assert np.allclose(none["rollouts_per_question"], CFG["train"]["group"])   # entropy never exceeds log C
    matched = agent.train_arm("outcome_grpo_matched", glob, crops, labels, base, C, CFG, [0])
    assert np.allclose(matched["rollouts_per_question"], CFG["train"]["group_matched"])
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


def _parquet(folder, name, n, seed):
    blobs = []
    for k in range(n):
        buf = io.BytesIO()
        pixels = (np.random.default_rng(seed + k).random((40, 50, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(buf, format="JPEG")
        blobs.append({"bytes": buf.getvalue(), "path": f"synpic{seed + k}.jpg"})
    answers = ["yes", "No ", "left", "yes"][:n]
    pq.write_table(pa.table({"image": blobs, "question": ["is it?"] * n, "answer": answers}), folder / name)
    return hashlib.sha256((folder / name).read_bytes()).hexdigest()


def test_full_scale_acquire_and_loaders_offline(tmp_path, static_server):
    """VQA-RAD's layout: data/{train,test}-*.parquet, image {bytes (JPEG), path}, question, answer."""
    folder, base = static_server
    where = folder / "datasets/org/vqa/resolve" / ("0" * 40) / "data"
    where.mkdir(parents=True)
    files = {split: {"file": f"data/{split}-00000-of-00001-abc.parquet",
                     "sha256": _parquet(where, f"{split}-00000-of-00001-abc.parquet", n, seed)}
             for split, n, seed in (("train", 4, 0), ("test", 3, 10))}
    spec = {"source": "hub", "hub_id": "org/vqa", "revision": "0" * 40, "endpoint": base, "files": files,
            "image_size": 16}

    class Job:
        cfg = {"data": {"vqa_rad": spec}, "agent": {"pool": 4}, "model": {"source": str(tmp_path)}}
        dataset = "vqa_rad"
        out_dir = tmp_path / "raw"

        @staticmethod
        def raw_dir(ds=None):
            return tmp_path / "raw"

        @staticmethod
        def log(msg, every_s=None):
            pass

    info = stages.acquire(Job)
    assert info["files"]["test"]["sha256"] == files["test"]["sha256"] and "model" not in info   # local model dir
    rows = data.load_vqa(Job.out_dir, "test", 16)
    assert rows["images"].shape == (3, 16, 16) and rows["answers"] == ["yes", "no", "left"]
    assert "cells" not in rows   # real data: no lesion cells, grounding is not scored
    Job.out_dir = tmp_path / "prepared"
    Job.out_dir.mkdir()
    prep = stages.prepare(Job)   # both splits through the VLM's RGB loader, native size
    assert prep["train"]["rows"] == 4 and prep["test"] == {"rows": 3, "closed": 2, "min_side": 40}
    rgb = data.load_vqa_rgb(tmp_path / "raw", "train")
    assert rgb["images"][0].mode == "RGB" and rgb["images"][0].size == (50, 40)
    spec["files"]["test"]["sha256"] = "f" * 64
    with pytest.raises(Exception, match="sha256"):
        stages.acquire(type("J", (), {**Job.__dict__, "out_dir": tmp_path / "raw2"}))


@pytest.fixture(scope="module")
def tiny_vlm_dir(tmp_path_factory):
    from conftest import tiny_qwen25_vl

    text = ('<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 20, 20]}}'
            "</tool_call> <answer>yes</answer> no left system user")
    return tiny_qwen25_vl(tmp_path_factory.mktemp("qwen"), text, max_positions=4096)


def test_full_scale_vlm_zoom_turn_grpo_step_evr_cca(tiny_vlm_dir):
    from iclr26.papers.medvr import vlm

    folder = tiny_vlm_dir
    spec = {"temperature": 1.0, "max_new_tokens": 6, "max_turns": 2, "min_crop": 28,
            "min_pixels": 28 * 28 * 4, "max_pixels": 56 * 56 * 4, "max_length": 4096}
    t = {"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}, "group": 2, "group_matched": 3,
         "batch": 1, "steps": 1, "lr": 1e-2, "grad_clip": 1.0, "evr_tau": 0.0, "cca_lambda": 0.5,
         "cca_min_correct": 1, "cca_agree": 0.0}
    agent = vlm.load_agent(str(folder), spec, t, "cpu")
    image = Image.fromarray((np.random.default_rng(0).random((60, 80, 3)) * 255).astype(np.uint8))
    # a zoom turn: DeepEyes' tool call is given (a random model rarely writes one); the crop of the
    # model's view (80 x 60 smart-resized to 84 x 56) comes back as an image turn
    call = '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 30, 20]}}\n</tool_call>'
    assert vlm.parse_zoom(call) == [0, 0, 30, 20] and vlm.parse_zoom("<tool_call>{bad</tool_call>") is None
    zoomed = agent.rollout(agent.start(image, "is it?"), image, False, True, forced=call)
    assert zoomed.view.size == (84, 56) and len(zoomed.images) == 2 and len(zoomed.texts) == 2
    assert zoomed.boxes[0] == [0, 0, 30, 28] and vlm.zoom(zoomed.view, [0, 0, 30, 20], 28).size == (30, 28)
    # DeepEyes' reward: 0.8 acc + 0.2 format + 1.2 (tool and correct)
    assert vlm.deepeyes_reward(["<answer>Yes</answer>"], "yes", True) == (2.0, 1.0)
    assert vlm.deepeyes_reward(["<answer>yes</answer>"], "yes", False) == (0.8, 1.0)
    assert vlm.deepeyes_reward(["no answer"], "yes", True) == (-0.2, 0.0)
    plain = agent.rollout(agent.start(image, "is it?"), image, False, True)
    zoomed.reward, plain.reward = 1.0, 0.0
    lora = [p for n, p in agent.model.named_parameters() if "lora_B" in n]
    before = [p.detach().clone() for p in lora]
    stats = vlm.grpo_step(agent, torch.optim.SGD(lora, lr=1.0), [[zoomed, plain]], "outcome_grpo", t)
    assert stats["loss"] != 0.0 and any(not torch.equal(a, b) for a, b in zip(before, lora))
    # EVR (tau 0): every rollout branches from its prefix with a forced new zoom; CCA's pseudo box
    trajs = vlm.group_rollouts(agent, image, "is it?", "yes", "medvr", t)
    assert len(trajs) == 4 and [tr.parent for tr in trajs[2:]] == [0, 1]
    assert all(tr.texts[-1].startswith(vlm.TOOL_OPEN) and sum(tr.sampled[:tr.prefix_len]) == 0 for tr in trajs[2:])
    assert all(len(tr.texts) <= spec["max_turns"] for tr in trajs)   # a branch counts its prefix's turns
    for tr, r in zip(trajs, (1.0, 0.0, 1.0, 0.0)):
        tr.reward = tr.acc = r
    adv = vlm.token_advantages(trajs, "medvr", t)
    assert len(adv) == 4 and all(len(a) == len(tr.ids) for a, tr in zip(adv, trajs))
    assert vlm.consensus_box([[0, 0, 10, 10], [0, 0, 12, 10], None], [1, 1, 1], 2, 0.5) == [0, 0, 11, 10]
    res = vlm.evaluate(agent, {"images": [image], "questions": ["is it?"], "answers": ["yes"]}, True)
    assert 0.0 <= res["accuracy"] <= 1.0
    # the mechanisms' rates: every rollout branched (tau 0); CCA fires once a correct rollout has a box
    assert vlm.cca_pseudo(trajs, {**t, "cca_min_correct": 3}) is None
    trajs[0].boxes[0] = [0, 0, 30, 28]
    stats = vlm.grpo_step(agent, torch.optim.SGD(lora, lr=0.0), [trajs], "medvr", t)
    assert stats["evr_branch_rate"] == 1.0 and stats["cca_fire_rate"] == 1.0


def test_batched_generation_equals_one_at_a_time(tiny_vlm_dir):
    """A group's rollouts in one left-padded generate call give the same greedy tokens and entropies
    as one trajectory at a time (different prompt lengths and image sizes, so padding is exercised)."""
    from iclr26.papers.medvr import vlm

    spec = {"temperature": 1.0, "max_new_tokens": 8, "max_turns": 1, "min_crop": 28,
            "min_pixels": 28 * 28 * 4, "max_pixels": 56 * 56 * 4}
    agent = vlm.load_agent(str(tiny_vlm_dir), spec, None, "cpu")
    rng = np.random.default_rng(1)
    images = [Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)) for h, w in ((60, 80), (56, 56))]
    questions = ["is it?", "is there a lesion in the left lung?"]
    one = [agent.rollout(agent.start(im, q), im, True, True) for im, q in zip(images, questions)]
    both = agent.rollouts([agent.start(im, q) for im, q in zip(images, questions)], True, True)
    assert len(one[0].ids) != len(one[1].ids) or one[0].view.size != one[1].view.size
    for a, b in zip(one, both):
        assert a.ids == b.ids and a.sampled == b.sampled and a.texts == b.texts
        assert np.allclose(a.entropy, b.entropy, atol=1e-4)


def test_full_scale_pipeline_offline(workdir, static_server, tiny_vlm_dir):
    """The full scale's stages end to end through the core's runner: the pinned parquets from a
    loopback hub, the tiny Qwen2.5-VL as model.source, one EVR + CCA GRPO step with LoRA, greedy eval."""
    from iclr26.core.io import read_json
    from iclr26.core.job import run_stage

    folder, base = static_server
    where = folder / "datasets/org/vqa/resolve" / ("0" * 40) / "data"
    where.mkdir(parents=True)
    model = tiny_vlm_dir
    overrides = [f"data.vqa_rad.endpoint={base}", "data.vqa_rad.hub_id=org/vqa", f"data.vqa_rad.revision={'0' * 40}",
                 f"model.source={model}", "device=cpu", "vlm.max_new_tokens=4", "vlm.max_turns=2",
                 f"vlm.min_pixels={28 * 28 * 4}", f"vlm.max_pixels={56 * 56 * 4}", "train.steps=1", "train.batch=1",
                 "train.group=2", "train.evr_tau=0.0", "train.lora.r=2", "train.activation_checkpointing=false",
                 "data.vqa_rad.n_test=2"]
    for split, n, seed in (("train", 4, 0), ("test", 3, 10)):
        name = f"{split}-00000-of-00001-abc.parquet"
        overrides += [f"data.vqa_rad.files.{split}.file=data/{name}",
                      f"data.vqa_rad.files.{split}.sha256={_parquet(where, name, n, seed)}"]
    run_stage("acquire", "medvr", "full", overrides, dataset="vqa_rad")
    assert read_json(run_stage("prepare", "medvr", "full", overrides, dataset="vqa_rad"))["info"]["test"]["rows"] == 3
    job = {"method": "medvr", "seed_block": "s0"}
    units = read_json(run_stage("train", "medvr", "full", overrides, **job))["units"]
    assert units["medvr_0"]["rollouts_per_question"] == 4.0   # G 2 + 2 EVR branches (tau 0)
    records = read_json(run_stage("evaluate", "medvr", "full", overrides, **job))["records"]
    assert len(records) == 1 and records[0]["rollouts_per_question"] == 4.0 and 0 <= records[0]["accuracy"] <= 1
    assert records[0]["evr_branch_rate"] == 1.0 and 0 <= records[0]["cca_fire_rate"] <= 1   # tau 0: all branch
    base_row = read_json(run_stage("evaluate", "medvr", "full", overrides, method="base_random_zoom",
                                   seed_block="s0"))["records"]
    assert base_row[0]["rollouts_per_question"] == 1.0
