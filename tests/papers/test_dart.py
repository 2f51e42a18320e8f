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
