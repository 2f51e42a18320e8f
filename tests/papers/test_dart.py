"""DART: the differentiable Sinkhorn against POT, the detached UWD plan, RAM on a heavy-tailed
channel, the retrieval protocol. (All stages and resume: tests/test_contract.py.)"""
import numpy as np
import ot
import pytest
import torch

from iclr26.papers.dart import losses
from iclr26.papers.dart.metrics import recalls


def test_sinkhorn_matches_pot():
    rng = np.random.default_rng(0)
    C = rng.random((6, 6))
    a = np.full(6, 1 / 6)
    ours = losses.sinkhorn_log(torch.tensor(a), torch.tensor(a), torch.tensor(C), 0.05, 500).numpy()
    ref = ot.sinkhorn(a, a, C, 0.05, numItermax=5000, method="sinkhorn_log")
    assert np.abs(ours - ref).max() < 1e-6


def test_iot_loss_prefers_matched_pairs():
    torch.manual_seed(0)
    U = torch.nn.functional.normalize(torch.randn(8, 4), dim=1)
    assert losses.iot_loss(U, U) < losses.iot_loss(U, U[torch.randperm(8)])


def test_uwd_plan_is_detached_and_unbalanced():
    """The gradient flows through the channel cost only: it equals that of <C^F, P> with POT's
    plan held fixed; the plan's KL-relaxed marginals do not conserve mass."""
    torch.manual_seed(0)
    U, V = torch.randn(8, 4, requires_grad=True), torch.randn(8, 4)
    losses.uwd_loss(U, V, torch.full((4,), 0.25), 0.05, 1.0, 100).backward()
    C = losses.feature_cost(U, V).detach().double().numpy()
    P = ot.unbalanced.sinkhorn_unbalanced(np.full(4, 0.25), np.full(4, 0.25), C, 0.05, 1.0, numItermax=100)
    U2 = U.detach().clone().requires_grad_(True)
    (losses.feature_cost(U2, V) * torch.as_tensor(P, dtype=torch.float32)).sum().backward()
    assert torch.allclose(U.grad, U2.grad, atol=1e-6) and U.grad.abs().sum() > 0
    assert abs(P.sum() - 1.0) > 1e-3          # KL-relaxed marginals: mass is not conserved


def test_ram_downweights_heavy_tailed_channel():
    torch.manual_seed(0)
    s = torch.randn(256, 4)
    U, V = s.clone(), s + 0.1 * torch.randn(256, 4)
    U[:, 3] = torch.distributions.StudentT(2.0).sample((256,)) * 3
    m = losses.RAM(4, beta=0.0).update(U, V)
    assert m[3] < m[:3].min() and torch.isclose(m.sum(), torch.tensor(1.0))


def test_recall_protocol():
    audio = np.eye(3)
    text = np.stack([np.stack([np.eye(3)[i]] * 5) for i in (0, 2, 1)])   # clips 1 and 2 get each other's captions
    r = recalls(audio, text, ks=(1, 5, 10))
    third = pytest.approx(100 / 3)
    assert r["r1_a2t"] == third and r["r1_t2a"] == third and r["r5_a2t"] == third and r["r10_a2t"] == 100.0


def test_full_scale_clotho_from_md5_pinned_7z_archives(static_server, tmp_path):
    """The full path offline: Zenodo-layout captions CSVs and .7z audio archives (a folder per split)
    served over loopback, md5-pinned; acquire_zenodo unpacks them with an external command to the
    layout read_split reads, and the features equal those read from the unpacked originals. py7zr's
    command line (pinned in envs/torch.yaml) packs the archives and unpacks them."""
    import hashlib
    import shutil
    import subprocess
    import sys

    from iclr26.core.errors import DataError
    from iclr26.papers.dart import data

    # py7zr (pinned) packs the archives and unpacks them, as the full-scale config does
    pack, unpack = [sys.executable, "-m", "py7zr", "c"], [sys.executable, "-m", "py7zr", "x", "{archive}", "{out}"]
    mel = {"sample_rate": 16000, "n_fft": 512, "hop_length": 480, "n_mels": 16, "f_min": 50.0, "f_max": 8000.0,
           "top_db": 80.0, "frames": 4}
    src = tmp_path / "src"
    data.synthesise({"mel": mel, "data_seed": 1, "n_events": 3, "n_dev": 5, "n_eval": 4, "noise_floor": 0.003,
                     "nuisance": {"df": 2.0, "scale": 0.05, "bands": [3, 7]}}, src)
    root, base = static_server
    files = {}
    for split in data.SPLITS:
        cap, audio = f"clotho_captions_{split}.csv", f"clotho_audio_{split}.7z"
        subprocess.run([*pack, str(root / audio), split], cwd=src, check=True, capture_output=True)
        shutil.copy(src / cap, root)
        md5 = {n: hashlib.md5((root / n).read_bytes()).hexdigest() for n in (cap, audio)}
        files[split] = {"captions": {"url": f"{base}/{cap}", "md5": md5[cap]},
                        "audio": {"file": audio, "url": f"{base}/{audio}", "md5": md5[audio]}}
    spec = {"source": "zenodo", "mel": mel, "files": files, "unpack": unpack}
    got = data.acquire_zenodo(spec, tmp_path / "raw")
    assert got["evaluation_clips"] == 4 and got["development_clips"] == 5
    served = (root / "clotho_audio_evaluation.7z").read_bytes()
    assert got["clotho_audio_evaluation.7z"]["sha256"] == hashlib.sha256(served).hexdigest()
    x, caps = data.read_split(tmp_path / "raw", spec, "evaluation")
    x0, caps0 = data.read_split(src, spec, "evaluation")
    assert caps == caps0 and np.array_equal(x, x0) and x.shape == (4, 32)
    files["evaluation"]["audio"]["md5"] = "0" * 32
    with pytest.raises(DataError, match="md5 mismatch"):
        data.acquire_zenodo(spec, tmp_path / "raw2")
    (root / "clotho_audio_development.7z").write_bytes(b"not a 7z archive")
    files["development"]["audio"]["md5"] = hashlib.md5(b"not a 7z archive").hexdigest()
    with pytest.raises(DataError, match="cannot unpack clotho_audio_development.7z"):
        data.acquire_zenodo(spec, tmp_path / "raw3")


def test_nuisance_share_and_fixed_steps():
    """The precondition's nuisance share is the Jacobian's share on the nuisance inputs (0 when the
    encoder ignores them, 1 when it reads only them); every batch size takes train.steps steps."""
    from iclr26.papers.dart import training

    torch.manual_seed(0)
    net = training.Encoders(6, 5, 16, 4, 3)
    x = torch.randn(20, 6)
    with torch.no_grad():
        net.audio[0].weight[:, [1, 4]] = 0.0
    assert torch.allclose(training.nuisance_share(net, x, [1, 4]), torch.zeros(4))
    assert torch.allclose(training.nuisance_share(net, x, [0, 2, 3, 5]), torch.ones(4))
    assert training.nuisance_share(net, x, []) is None
    cfg = {"data": {"clotho": {"nuisance": {"bands": [2, 5]}, "mel": {"n_mels": 8}}}}
    assert training.nuisance_features(cfg) == [2, 5, 10, 13]
    tcfg = {"steps": 7, "batch_sizes": [8, 64]}
    assert training.total_steps(tcfg, 100) == 7
    with pytest.raises(ValueError):
        training.total_steps(tcfg, 40)


FRONTEND = {"sample_rate": 32000, "window_size": 1024, "hop_size": 320, "mel_bins": 64, "fmin": 50.0, "fmax": 14000.0}


def _tiny_bert(tmp_path, words, dropout=0.1):
    """A small BertModel (BertConfig) and a WordPiece tokenizer over `words`, written with
    save_pretrained into one folder, as a hub snapshot holds them."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path / "bert"
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(words))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=dropout,
                         attention_probs_dropout_prob=dropout)).save_pretrained(folder)
    return folder


def test_panns_logmel_matches_panns_stft_and_librosa_mel_filters():
    """PANNs' front end written independently in numpy (torchlibrosa's formulation: reflect-padded
    frames times a periodic-Hann DFT, power, librosa's Slaney mel filters with area normalisation,
    10 log10 with amin 1e-10) equals encoders.PannsLogmel (torchaudio) at small sizes."""
    from iclr26.papers.dart.encoders import PannsLogmel

    sr, n_fft, hop, n_mels, fmin, fmax = 8000, 64, 16, 8, 50.0, 3500.0
    x = np.random.default_rng(0).standard_normal(400).astype(np.float32)
    pad = np.pad(x, n_fft // 2, mode="reflect")
    frames = np.stack([pad[i: i + n_fft] for i in range(0, len(pad) - n_fft + 1, hop)])
    n = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    dft = np.exp(-2j * np.pi * np.outer(n, np.arange(n_fft // 2 + 1)) / n_fft)
    power = np.abs((frames * window) @ dft) ** 2                       # (frames, bins)

    def mel(f):       # Slaney: linear below 1 kHz, logarithmic above
        f = np.asarray(f, dtype=float)
        return np.where(f < 1000, f * 3 / 200, 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def hz(m):
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp((np.log(6.4) / 27) * (m - 15)))

    edges = hz(np.linspace(mel(fmin), mel(fmax), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (freqs[None] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None]) / (edges[2:] - edges[1:-1])[:, None]
    fb = np.maximum(0, np.minimum(lower, upper)) * (2 / (edges[2:] - edges[:-2]))[:, None]
    ref = 10 * np.log10(np.maximum(power @ fb.T, 1e-10))
    ours = PannsLogmel(sr, n_fft, hop, n_mels, fmin, fmax)(torch.as_tensor(x)[None])[0, 0].numpy()
    assert ours.shape == ref.shape and np.abs(ours - ref).max() < 1e-3


def test_gradient_caching_equals_chunked_backprop_and_updates_bn_once(tmp_path):
    """full.step_grads with chunks: the no-grad pass, the loss gradient w.r.t. the embeddings and
    the replayed chunks (same dropout and SpecAugment draws) give the gradient of a plain chunked
    forward-backward, and batch norm's running statistics move once per chunk, not twice."""
    import copy

    from transformers import BertModel

    from iclr26.papers.dart import encoders, full, losses

    folder = _tiny_bert(tmp_path, ["a", "b", "c"], dropout=0.2)
    torch.manual_seed(1)
    audio = encoders.ResNet38(FRONTEND, 4, 0.2, 0.2, {"time_drop_width": 4, "time_stripes": 1,
                                                     "freq_drop_width": 4, "freq_stripes": 1})
    net = encoders.JointEncoders(audio, BertModel.from_pretrained(folder, add_pooling_layer=False), 8).train()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)     # PANNs zero-inits the residual branches' last BN
    ref = copy.deepcopy(net)
    waves = torch.randn(6, 12800)
    ids = torch.randint(5, 8, (6, 5))
    ids[:, 0] = 2
    mask = torch.ones_like(ids)

    def loss_fn(U, V):
        return losses.iot_loss(U, V) + 0.3 * losses.uwd_loss(U, V, torch.full((8,), 1 / 8)), None

    torch.manual_seed(5)
    full.step_grads(net, waves, ids, mask, 2, "cpu", loss_fn, False)
    torch.manual_seed(5)
    U, V = zip(*[(ref.enc_audio(waves[s:s + 2]), ref.enc_text(ids[s:s + 2], mask[s:s + 2])) for s in (0, 2, 4)])
    loss_fn(torch.cat(U), torch.cat(V))[0].backward()
    grads = [(a.grad, b.grad) for a, b in zip(net.parameters(), ref.parameters()) if a.grad is not None]
    scale = max(float(b.abs().max()) for _, b in grads)      # (BERT's key bias has a zero gradient: noise only)
    assert len(grads) > 50 and all(torch.allclose(a, b, rtol=1e-4, atol=1e-6 * scale) for a, b in grads)
    stats = [(a, b) for (k, a), b in zip(net.state_dict().items(), ref.state_dict().values()) if "running" in k]
    assert stats and all(torch.allclose(a, b, atol=1e-6) for a, b in stats)


def test_full_scale_pretrained_encoders_offline(static_server, tmp_path, monkeypatch):
    """The full-scale path offline, with small overrides: a ResNet38 (narrow: width 4) with random
    weights saved in the PANNs checkpoint's layout (torchlibrosa front end, classifier, and the
    training script's sampler state: numpy arrays, which weights_only reads with numpy's globals
    allowed) served over loopback and fetched md5-pinned by core.acquire; a small BERT and its
    tokenizer from save_pretrained; Clotho-layout clips; prepare (32 kHz waves, BERT ids), then one
    training step (batch 4 in chunks of 2: gradient caching) and one evaluation of each loss; a
    checkpoint of another shape is one error."""
    import hashlib
    import shutil

    from iclr26.core.config import compose_job_config
    from iclr26.core.errors import DataError
    from iclr26.papers.dart import data, encoders, full
    from iclr26.papers.dart.metrics import recalls

    cfg = compose_job_config("dart", "full")
    mel = {"sample_rate": 16000, "n_fft": 512, "hop_length": 480, "n_mels": 16, "f_min": 50.0, "f_max": 8000.0,
           "top_db": 80.0, "frames": 12}
    raw = tmp_path / "raw"
    data.synthesise({"mel": mel, "data_seed": 1, "n_events": 3, "n_dev": 6, "n_eval": 3, "noise_floor": 0.003,
                     "nuisance": {"df": 2.0, "scale": 0.05, "bands": [3, 7]}}, raw)
    words = {w for split in data.SPLITS for line in (raw / f"clotho_captions_{split}.csv").read_text().splitlines()[1:]
             for w in data.tokens(line.replace(",", " "))}
    cfg["text_encoder"] = {**cfg["text_encoder"], "source": str(_tiny_bert(tmp_path, words))}
    cfg["model"] = {**cfg["model"], "d": 8, "audio": {**cfg["model"]["audio"], "width": 4, "max_seconds": 0.4}}
    cfg["device"] = "cpu"
    cfg["train"] = {**cfg["train"], "epochs": 2, "chunk": 2, "eval_chunk": 2, "batch_sizes": [4, 4]}
    assert full.splits(cfg) == ("development", "validation", "evaluation")
    # a validation split in Clotho's layout, of 2 clips (evaluation has 3), so the scores can say which split they saw
    import csv

    with open(raw / "clotho_captions_evaluation.csv", newline="") as handle:
        rows = list(csv.reader(handle))[:3]
    (raw / "validation").mkdir()
    for row in rows[1:]:
        shutil.copy(raw / "evaluation" / row[0], raw / "validation" / row[0])
    with open(raw / "clotho_captions_validation.csv", "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    cfg["data"]["clotho"] = {**cfg["data"]["clotho"], "min_clips": {"development": 6, "validation": 2, "evaluation": 3}}
    served = encoders.ResNet38(FRONTEND, 4).state_dict()
    state = {k: v for k, v in served.items() if not k.startswith("logmel.")}
    state.update({"spectrogram_extractor.stft.conv_real.weight": torch.zeros(513, 1, 1024),
                  "spectrogram_extractor.stft.conv_imag.weight": torch.zeros(513, 1, 1024),
                  "logmel_extractor.melW": torch.zeros(513, 64), "fc1.weight": torch.zeros(128, 128),
                  "fc1.bias": torch.zeros(128), "fc_audioset.weight": torch.zeros(527, 128),
                  "fc_audioset.bias": torch.zeros(527)})
    with torch.no_grad():
        state["conv_block1.conv1.weight"] = torch.randn_like(state["conv_block1.conv1.weight"])
    root, base = static_server
    torch.save({"iteration": 0, "model": state, "sampler": {"indexes": np.arange(3), "pointer": 0}},
               root / "ResNet38.pth")
    md5 = hashlib.md5((root / "ResNet38.pth").read_bytes()).hexdigest()
    cfg["data"]["clotho"] = {**cfg["data"]["clotho"],
                             "panns": {"file": "ResNet38_mAP=0.434.pth", "url": f"{base}/ResNet38.pth", "md5": md5}}
    got = full.acquire_encoders(cfg, raw)
    assert got["panns"]["sha256"] == hashlib.sha256((root / "ResNet38.pth").read_bytes()).hexdigest()
    prep = tmp_path / "prepared"
    prep.mkdir()
    info = full.prepare(raw, prep, cfg, full.splits(cfg))
    assert info["development"]["clips"] == 6 and info["evaluation"]["truncated"] == 0
    assert info["evaluation"]["missing"] == 0 and info["validation"]["clips"] == 2
    f = full.load(prep)
    assert f["development_wave"].shape == (6, 12800) and f["evaluation_ids"].shape[:2] == (3, 5)
    assert f["validation_wave"].shape == (2, 12800)
    assert (f["evaluation_ids"][:, :, 0] == 2).all()                     # [CLS] first
    net = encoders.build(cfg, cfg["text_encoder"]["source"], full.checkpoint_path(raw, cfg))
    assert torch.equal(net.audio.conv_block1.conv1.weight, state["conv_block1.conv1.weight"])
    assert full.run_steps(cfg["train"], 6, 4) == (16, 8)            # 2 caption-epochs of 30 pairs at batch 4
    from iclr26.papers.dart import metrics

    scored = []   # the clips of every split fit() scores: only validation's 2 ever (never the test split's 3)
    monkeypatch.setattr(metrics, "recalls", lambda a, t: scored.append(len(a)) or recalls(a, t))
    for method in ("iot", "dart_no_ram", "dart"):
        torch.manual_seed(0)
        a, t, out = full.fit(f, method, 4, 0.5, cfg, 0, raw, log=lambda m: None)
        assert scored and set(scored) == {2}
        scored.clear()
        assert a.shape == (3, 8) and t.shape == (3, 5, 8) and np.isfinite(a).all() and np.isfinite(t).all()
        assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-4) and 0 <= recalls(a, t)["r10_a2t"] <= 100
        assert np.isfinite(out["ram_ratio"]) == (method == "dart")
        # the validation split scored after each caption-epoch; the kept epoch is the best (ties: the later)
        steps, scores = zip(*out["validation"])
        assert steps == (8, 16) and out["steps"] == 16
        assert out["selected_step"] == max(zip(scores, steps))[1]
        assert np.isfinite(out["grad_iot_late"]) and out["grad_iot_late"] > 0
        assert np.isfinite(out["grad_uwd_late"]) == (method != "iot") == np.isfinite(out["grad_ratio_late"])
    with pytest.raises(DataError, match="train.select is validation but the prepared data has no validation"):
        full.fit({k: v for k, v in f.items() if not k.startswith("validation")}, "iot", 4, 0.0, cfg, 0, raw)
    (raw / "evaluation" / sorted(p.name for p in (raw / "evaluation").glob("*.wav"))[0]).unlink()
    prep2 = tmp_path / "prepared2"
    prep2.mkdir()
    with pytest.raises(DataError, match=r"2 evaluation clips .*fewer than data.clotho.min_clips.evaluation = 3 "
                                        r"\(1 of the CSV's 3 missing"):
        full.prepare(raw, prep2, cfg, full.splits(cfg))
    state["conv_block1.conv1.weight"] = torch.zeros(8, 1, 3, 3)
    del state["bn0.weight"]
    with pytest.raises(DataError, match="missing .'bn0.weight'.*shape .'conv_block1.conv1.weight"):
        encoders.load_panns(encoders.ResNet38(FRONTEND, 4), state)
    # (a file whose md5 is not the pin is no longer refused when read: the md5 used to decide whether it
    # might be unpickled in full, and nothing is now; tests/test_no_code_from_data.py plants an object)
    ckpt = raw / "encoders" / "ResNet38_mAP=0.434.pth"
    ckpt.write_bytes((root / "ResNet38.pth").read_bytes()[:1000])          # truncated: one error naming the file
    with pytest.raises(DataError, match=f"cannot read the PANNs checkpoint ResNet38_mAP=0.434.pth .*{md5}"):
        encoders.load_checkpoint(ckpt, md5)
    ckpt.unlink()
    with pytest.raises(DataError, match=f"PANNs checkpoint .*ResNet38_mAP=0.434.pth is missing .md5 {md5}"):
        encoders.build(cfg, cfg["text_encoder"]["source"], ckpt)


def test_missing_unpacker_empty_archive_and_empty_split_are_one_error_each(tmp_path, workdir):
    import zipfile

    from iclr26.core.errors import ConfigError, DataError
    from iclr26.core.job import run_paper
    from iclr26.papers.dart import data

    archive = tmp_path / "clips.7z"
    archive.write_bytes(b"x")
    with pytest.raises(DataError, match="the unpacking command 'no-such-7z' .* is not on PATH"):
        data.extract_7z(archive, tmp_path / "a", ["no-such-7z", "x", "{archive}"])
    zipped = tmp_path / "empty.zip"          # an archive that unpacks to no .wav member
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("readme.txt", "no clips")
    unzip = ["python", "-m", "zipfile", "-e", "{archive}", "{out}"]
    assert data.extract_7z(zipped, tmp_path / "b", unzip) == 0
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "clotho_captions_evaluation.csv").write_text(
        "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\nabsent.wav,a,b,c,d,e\n")
    with pytest.raises(DataError, match="dart: no evaluation clips under"):
        data.read_split(tmp_path / "raw", {"mel": {}}, "evaluation")
    # refused when the config is composed (its schema), before acquire runs
    with pytest.raises(ConfigError, match=r"config key 'data.clotho.source' = 'hub' is not allowed: one of synthetic, "
                                          r"zenodo"):
        run_paper("dart", "smoke", ["data.clotho.source=hub"], seeds=[0])


def _ids(item) -> tuple[str, ...]:
    """The ids a deviation's text starts with: '[schedule] ...' or '[sinkhorn] [tiny-size] ...'."""
    import re

    text = item if isinstance(item, str) else item["what"]
    head = re.match(r"^((?:\[[a-z0-9-]+\]\s*)+)", text)
    return tuple(re.findall(r"\[([a-z0-9-]+)\]", head.group(1))) if head else ()


def test_full_config_restates_every_tiny_deviation():
    """Hydra replaces lists, so full.yaml's deviations replace the tiny ones (audit 09c finding 1):
    every tiny deviation carries an id, and every id is restated (or explicitly replaced) by a full
    deviation carrying it; a post-hoc tiny deviation stays post hoc, with its date, at full."""
    from iclr26.core.config import compose_job_config

    tiny, full = (compose_job_config("dart", scale) for scale in ("tiny", "full"))
    assert tiny["deviations"] != full["deviations"]                      # the scale's list replaced the base one
    for cfg in (tiny, full):
        ids = [i for d in cfg["deviations"] for i in _ids(d)]
        assert all(_ids(d) for d in cfg["deviations"]) and len(ids) == len(set(ids))
    at_full = {i: d for d in full["deviations"] for i in _ids(d)}
    for d in tiny["deviations"]:
        for i in _ids(d):
            assert i in at_full, f"tiny deviation [{i}] is neither restated nor replaced at full scale"
            if isinstance(d, dict) and d.get("post_hoc"):
                assert at_full[i].get("post_hoc") == d["post_hoc"], f"[{i}] is post hoc at tiny, not at full"
    assert {"iot-baseline", "schedule", "nuisance", "lambda", "not-run", "loss-choices"} <= set(at_full)
    assert "EMA" in at_full["loss-choices"]["what"] and "detached" in at_full["loss-choices"]["what"]
    # the full schedule as stated: m-LTM's 10 caption-epochs, constant lr, selection on validation
    from iclr26.papers.dart import full as full_path

    t = full["train"]
    assert t["epochs"] == 10 and t["select"] == "validation" and "lr_decay_at" not in t
    assert [full_path.run_steps(t, full["data"]["clotho"]["n_dev"], b)[0] for b in t["batch_sizes"]] == [6000, 750]
    assert "6,000 Adam steps at batch 32, 750 at batch 256" in at_full["schedule"]["what"]
    assert tuple(full["data"]["clotho"]["files"]) == ("development", "validation", "evaluation")


def test_resnet38_full_width_matches_panns_names_and_shapes():
    """ResNet38 at width 64 against the key names and shapes of PANNs' ResNet38 (audioset_tagging_cnn
    pytorch/models.py: bn0; conv_block1 = ConvBlock(1, 64); resnet = _ResNet(_ResnetBasicBlock,
    [3, 4, 6, 3]) whose stride-2 blocks downsample by Sequential(AvgPool2d, conv1x1, BN);
    conv_block_after1 = ConvBlock(512, 2048); then fc1, fc_audioset, which are skipped), enumerated here
    from that structure, not from our model: 246 checkpoint keys, 239 of them the trunk's."""
    from iclr26.papers.dart import encoders

    def bn(name, c):
        return {f"{name}.weight": (c,), f"{name}.bias": (c,), f"{name}.running_mean": (c,),
                f"{name}.running_var": (c,), f"{name}.num_batches_tracked": ()}

    def conv_block(name, c_in, c_out):
        return {f"{name}.conv1.weight": (c_out, c_in, 3, 3), f"{name}.conv2.weight": (c_out, c_out, 3, 3),
                **bn(f"{name}.bn1", c_out), **bn(f"{name}.bn2", c_out)}

    want = {**bn("bn0", 64), **conv_block("conv_block1", 1, 64), **conv_block("conv_block_after1", 512, 2048)}
    inplanes = 64
    for i, (planes, blocks, stride) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), (1, 2, 2, 2))):
        for j in range(blocks):
            name = f"resnet.layer{i + 1}.{j}"
            c_in = inplanes if j == 0 else planes
            want.update({f"{name}.conv1.weight": (planes, c_in, 3, 3), **bn(f"{name}.bn1", planes),
                         f"{name}.conv2.weight": (planes, planes, 3, 3), **bn(f"{name}.bn2", planes)})
            if j == 0 and (stride != 1 or inplanes != planes):
                k = 1 if stride == 2 else 0                  # AvgPool2d first in a stride-2 downsample
                want.update({f"{name}.downsample.{k}.weight": (planes, inplanes, 1, 1),
                             **bn(f"{name}.downsample.{k + 1}", planes)})
        inplanes = planes
    skipped = {"spectrogram_extractor.stft.conv_real.weight", "spectrogram_extractor.stft.conv_imag.weight",
               "logmel_extractor.melW", "fc1.weight", "fc1.bias", "fc_audioset.weight", "fc_audioset.bias"}
    assert len(want) == 239 and len(want) + len(skipped) == 246
    assert all(k.startswith(encoders.SKIPPED) for k in skipped)
    model = encoders.ResNet38(FRONTEND, 64)
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith("logmel.")}
    assert ours == want
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 68_507_072
    assert model.out_dim == 2048
