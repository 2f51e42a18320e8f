"""DART: the differentiable Sinkhorn against POT, the detached UWD plan, RAM on a heavy-tailed
channel, the retrieval protocol. (All stages and resume: tests/test_contract.py.)"""
import numpy as np
import ot
import pytest
import torch

from iclr26.papers.dart import losses
from iclr26.papers.dart.stages import recalls


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
    layout read_split reads, and the features equal those read from the unpacked originals. Needs a
    7z packer: p7zip's `7z`, or py7zr's command line (neither is in the pinned envs yet)."""
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


def test_full_scale_pretrained_encoders_offline(static_server, tmp_path):
    """The full-scale path offline, with small overrides: a ResNet38 (narrow: width 4) with random
    weights saved in the PANNs checkpoint's layout (torchlibrosa front end, classifier, and the
    training script's sampler state, which needs the md5-gated full unpickle) served over loopback
    and fetched md5-pinned by core.acquire; a small BERT and its tokenizer from save_pretrained;
    Clotho-layout clips; prepare (32 kHz waves, BERT ids), then one training step (batch 4 in chunks
    of 2: gradient caching) and one evaluation of each loss; a checkpoint of another shape is one
    error."""
    import hashlib

    from iclr26.core.config import compose_job_config
    from iclr26.core.errors import DataError
    from iclr26.papers.dart import data, encoders, full
    from iclr26.papers.dart.stages import recalls

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
    cfg["train"] = {**cfg["train"], "steps": 1, "chunk": 2, "eval_chunk": 2, "batch_sizes": [4, 4]}
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
    info = full.prepare(raw, prep, cfg, data.SPLITS)
    assert info["development"]["clips"] == 6 and info["evaluation"]["truncated"] == 0
    f = full.load(prep)
    assert f["development_wave"].shape == (6, 12800) and f["evaluation_ids"].shape[:2] == (3, 5)
    assert (f["evaluation_ids"][:, :, 0] == 2).all()                     # [CLS] first
    net = encoders.build(cfg, cfg["text_encoder"]["source"], full.checkpoint_path(raw, cfg))
    assert torch.equal(net.audio.conv_block1.conv1.weight, state["conv_block1.conv1.weight"])
    for method in ("iot", "dart_no_ram", "dart"):
        torch.manual_seed(0)
        a, t, out = full.fit(f, method, 4, 0.5, cfg, 0, raw, log=lambda m: None)
        assert a.shape == (3, 8) and t.shape == (3, 5, 8) and np.isfinite(a).all() and np.isfinite(t).all()
        assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-4) and 0 <= recalls(a, t)["r10_a2t"] <= 100
        assert np.isfinite(out["ram_ratio"]) == (method == "dart")
    state["conv_block1.conv1.weight"] = torch.zeros(8, 1, 3, 3)
    del state["bn0.weight"]
    with pytest.raises(DataError, match="missing .'bn0.weight'.*shape .'conv_block1.conv1.weight"):
        encoders.load_panns(encoders.ResNet38(FRONTEND, 4), state)
    (raw / "encoders" / "ResNet38_mAP=0.434.pth").write_bytes((root / "ResNet38.pth").read_bytes()[:-1] + b"x")
    with pytest.raises(DataError, match="needs a full unpickle|not a PANNs checkpoint"):
        encoders.load_checkpoint(raw / "encoders" / "ResNet38_mAP=0.434.pth", md5)


def test_missing_unpacker_empty_archive_and_empty_split_are_one_error_each(tmp_path):
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
    with pytest.raises(ConfigError, match="data.clotho.source 'hub' is not synthetic or zenodo"):
        run_paper("dart", "smoke", ["data.clotho.source=hub"], seeds=[0])
