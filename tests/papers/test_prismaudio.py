"""PrismAudio: the synthetic clips carry what the rewards measure, the SDE step and its log-prob,
Fast-GRPO's window and branching, per-prompt advantages, and the offline full-scale path.
(All stages, determinism and a kill at the first unit: tests/test_contract.py.)"""
import math
import tarfile

import numpy as np
import pandas as pd
import pytest
import torch

from iclr26.core.audio import MelSpec, log_mel, write_clip, write_vggsound_csv
from iclr26.core.io import sha256_file
from iclr26.papers.prismaudio import data, flow, rewards


def test_clean_clips_score_their_onset_and_pan():
    spec = MelSpec()
    rng = np.random.default_rng(0)
    freqs = data.class_partials(4, 3, spec, 0)
    onsets, pans = np.array([0, 3, 7, 11]), np.array([-0.8, -0.2, 0.4, 0.9])
    waves = np.stack([data.render(freqs[i], o, p, 0.002, spec, 0.15, rng)
                      for i, (o, p) in enumerate(zip(onsets, pans))])
    db = log_mel(waves, spec)
    tmpl = rewards.class_templates(db, np.arange(4), 4)
    bands = rewards.class_bands(tmpl)
    assert np.array_equal(rewards.onset_frame(db), onsets)
    assert np.abs(rewards.level_index(db, bands) - pans).max() < 0.06
    assert np.abs(rewards.level_index(db) - pans).max() < 0.2                  # no class known (full scale)
    noisy = log_mel(np.stack([data.render(freqs[1], 3, -0.2, 0.05, spec, 0.15, rng)]), spec)
    # a noise floor lowers the aesthetic score (energy in the bands that should be silent)
    assert rewards.off_band_range(noisy, bands[1:2], 80.0)[0] < rewards.off_band_range(db[1:2], bands[1:2], 80.0)[0]
    s = rewards.scores(db, np.arange(4), onsets, pans, tmpl, 80.0)
    assert np.allclose(s["semantic"], 1.0) and np.all(s["onset_err"] == 0)
    # clamping: generated spikes are capped at the training maximum and sub-floor bins lifted to peak - top_db
    spiky = db[:1].copy()
    spiky[0, 0, 0, 0], spiky[0, 1, 5, 3] = db.max() + 40.0, db.max() - 200.0
    clamped = rewards.clamp_db(spiky, float(db.max()), 80.0)
    assert clamped.max() == db.max() and clamped.min() >= db.max() - 80.0 - 1e-6
    assert np.array_equal(rewards.clamp_db(db, float(db.max()), 80.0), db)   # real clips are unchanged
    # one loud spike on the left cannot move the level index or the onset (robust statistics)
    spike = db[1:2].copy()
    spike[0, 0, bands[1].argmax(), 0] = db.max()
    spike = rewards.clamp_db(spike, float(db.max()), 80.0)
    assert abs(rewards.level_index(spike, bands[1:2])[0] - pans[1]) < 0.1
    assert rewards.onset_frame(spike)[0] == onsets[1]


def test_sde_step_mean_logprob_and_ode_limit():
    x, v = torch.randn(5, 7), torch.randn(5, 7)
    sig, nxt = torch.tensor(0.6), torch.tensor(0.5)
    s, std = flow.sde_std(sig, nxt, 0.7, 0.9)
    assert torch.isclose(s, 0.7 * torch.sqrt(sig / (1 - sig))) and torch.isclose(std, s * math.sqrt(0.1))
    mean = flow.sde_mean(x, v, sig, nxt, s)
    assert torch.allclose(flow.sde_mean(x, v, sig, nxt, torch.tensor(0.0)), x + (nxt - sig) * v)  # a = 0: Euler
    y = mean + std * torch.randn(5, 7)
    ref = torch.distributions.Normal(mean, std).log_prob(y).mean(-1)
    assert torch.allclose(flow.gaussian_logp(y, mean, std), ref, atol=1e-5)
    s1, _ = flow.sde_std(torch.tensor(1.0), torch.tensor(0.9), 0.7, 0.9)   # sigma = 1 uses sigma_max
    assert torch.isclose(s1, 0.7 * torch.sqrt(torch.tensor(1.0 / 0.1)))


def test_fast_window_branches_and_counts():
    torch.manual_seed(0)
    net = flow.FlowNet(6, 3, 16, 2)
    cond = torch.randn(3, 3)
    cfg = {"n_steps": 8, "noise_level": 0.7, "window": 2, "window_max": 4, "prefixes": 2}
    gen = torch.Generator().manual_seed(1)
    fast = flow.rollout(net, cond, 4, "fast", cfg, gen)
    start = fast.steps[0][0]
    assert [i for i, *_ in fast.steps] == [start, start + 1] and 0 <= start <= 4
    assert fast.nfe == 3 * 2 * start + 3 * 4 * (8 - start)
    x_start = fast.steps[0][1]                                   # the branch point: 2 copies of each prefix
    assert torch.equal(x_start[0], x_start[1]) and not torch.equal(x_start[1], x_start[2])
    assert not torch.equal(fast.x0[0], fast.x0[1])              # the SDE window makes the copies differ
    full = flow.rollout(net, cond, 4, "flow", cfg, gen)
    assert len(full.steps) == 8 and full.nfe == 3 * 4 * 8


def test_advantages_per_prompt():
    r = np.array([1.0, 2.0, 3.0, 10.0, 10.0, 10.0])
    a = flow.advantages(r, 3, 5.0, False)
    assert np.allclose(a[:3].mean(), 0) and np.allclose(a[3:], 0) and a[2] > a[0]
    assert np.abs(flow.advantages(np.array([0.0, 0.0, 1e3]), 3, 1.0, False)).max() <= 1.0


def test_grpo_update_moves_policy_towards_reward():
    torch.manual_seed(0)
    base = flow.FlowNet(4, 2, 32, 2)
    cfg = {"n_steps": 4, "noise_level": 0.7, "window": 2, "window_max": 2, "prefixes": 2, "group": 8, "prompts": 8,
           "iterations": 25, "minibatches": 2, "lr": 3e-3, "clip_range": 0.2, "adv_clip": 5.0, "beta": 0.0,
           "global_std": False, "max_grad_norm": 1.0}
    prompts = {"cond": torch.randn(16, 2)}
    policy, counts, curve = flow.train_grpo(base, prompts, lambda x, rows: x[:, 0], "fast", cfg, 0)
    assert counts["grad_steps"] == 50 and counts["nfe_bwd"] == 25 * 64 * 2
    gen = torch.Generator().manual_seed(5)
    before = flow.sample_ode(base, prompts["cond"], 4, gen, 4)[:, 0].mean()
    gen = torch.Generator().manual_seed(5)
    after = flow.sample_ode(policy, prompts["cond"], 4, gen, 4)[:, 0].mean()
    assert after > before + 0.1


def test_full_scale_path_offline(workdir, static_server):
    """scale=full with vggsound.csv, a tar.gz shard of clips (wav members in the VGGSound naming) and
    an 'official' file on a loopback server (sha256 checked): prepare reads the real layout, derives
    the conditions, every arm runs."""
    from iclr26.core.job import load_records, run_paper

    root, base = static_server
    spec, rng = MelSpec(), np.random.default_rng(0)
    freqs = data.class_partials(3, 3, spec, 0)
    rows = []
    (root / "src").mkdir()
    for i in range(36):
        c, split = i % 3, "test" if i % 4 == 0 else "train"
        ytid = f"-yt{i:02d}x"
        wave = data.render(freqs[c], int(rng.integers(0, 10)), float(rng.uniform(-1, 1)), 0.002, spec, 0.15, rng)
        write_clip(root / "src" / f"{ytid}_{i:06d}.wav", wave[:1].repeat(2, 0) * 0.9 + wave * 0.1, 44100)
        rows.append((ytid, i, data.LABELS[c], split))
    write_vggsound_csv(root / "vggsound.csv", rows + [("notinshard", 5, data.LABELS[0], "train")])
    with tarfile.open(root / "vggsound_00.tar.gz", "w:gz") as tar:
        for f in sorted((root / "src").iterdir()):
            tar.add(f, arcname=f"vggsound/{f.name}")
    (root / "vae.ckpt").write_bytes(b"weights")
    shard = f'{{file: vggsound_00.tar.gz, url: "unused", sha256: {sha256_file(root / "vggsound_00.tar.gz")}}}'
    official = f'{{file: vae.ckpt, url: "unused", sha256: {sha256_file(root / "vae.ckpt")}}}'
    overrides = ["threads=1", "seed_batch=3", f"data.vggsound.base_url={base}", f"data.vggsound.shards=[{shard}]",
                 f"data.vggsound.official.files=[{official}]", "data.vggsound.n_classes=3",
                 "model.hidden=16", "model.depth=1", "pretrain.steps=5", "pretrain.batch=8",
                 "grpo.iterations=1", "grpo.prompts=2", "grpo.group=4", "grpo.n_steps=4", "grpo.window_max=2",
                 "eval.pca_dims=3"]
    records = pd.DataFrame(load_records(run_paper("prismaudio", "full", overrides, seeds=[0, 1, 2],
                                                  methods=["base", "fast_grpo"])))
    assert set(records["method"]) == {"base", "fast_grpo"} and len(records) == 6
    assert records["heldout_acc"].between(0, 1).all() and (records["fd"] >= 0).all()
    assert (records.loc[records["method"] == "fast_grpo", "nfe_bwd"] > 0).all()
    raw = workdir / "data" / "full" / "prismaudio" / "raw" / "vggsound"
    assert len(list((raw / "clips").glob("*.wav"))) == 36 and (raw / "official" / "vae.ckpt").exists()
    assert not (raw / "shards" / "vggsound_00.tar.gz").exists()      # keep_shards: false


def test_full_scale_labels_are_the_most_frequent_present(tmp_path):
    from iclr26.papers.prismaudio.stages import _labels

    rows = [(f"a{i}", i, "rare", "train") for i in range(2)] + [(f"b{i}", i, "zz common", "train") for i in range(4)] \
        + [(f"c{i}", i, "absent", "train") for i in range(9)] + [(f"d{i}", i, "mid", "test") for i in range(3)]
    write_vggsound_csv(tmp_path / "vggsound.csv", rows)
    (tmp_path / "clips").mkdir()
    for ytid, start, label, _ in rows:
        if label != "absent":                       # listed in the CSV but not in the shards
            (tmp_path / "clips" / f"{ytid}_{start:06d}.wav").write_bytes(b"")
    assert _labels(tmp_path, {"n_classes": 2}) == ["zz common", "mid"]


def test_a_bad_sampler_or_grouping_is_one_error():
    net, cond, gen = flow.FlowNet(6, 3, 16, 2), torch.zeros(2, 3), torch.Generator().manual_seed(0)
    cfg = {"n_steps": 4, "noise_level": 0.7, "window": 2, "window_max": 2, "prefixes": 2}
    with pytest.raises(ValueError, match="unknown GRPO sampler 'sde'"):
        flow.rollout(net, cond, 4, "sde", cfg, gen)
    with pytest.raises(ValueError, match="group 3 is not a multiple of prefixes 2"):
        flow.rollout(net, cond, 3, "fast", cfg, gen)


def test_a_split_without_clips_and_an_unknown_source_are_one_error_each(workdir, tmp_path):
    from iclr26.core.errors import ConfigError, DataError
    from iclr26.core.job import run_paper
    from iclr26.papers.prismaudio import stages

    write_vggsound_csv(tmp_path / "vggsound.csv", [("-abc", 0, data.LABELS[0], "test")])   # no clip on disk
    with pytest.raises(DataError, match=r"prismaudio: no test clips under .*clips"):
        stages.read_split(tmp_path, {"mel": {}}, "test", [data.LABELS[0]])
    with pytest.raises(ConfigError, match=r"config key 'data.vggsound.source' = 'youtube' is not allowed: one of "
                                          r"synthetic, hub"):   # refused when composed (its schema), before acquire
        run_paper("prismaudio", "smoke", ["data.vggsound.source=youtube"], seeds=[0], methods=["base"])
