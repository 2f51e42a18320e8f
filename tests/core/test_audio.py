"""core.audio: clips through soundfile, torchaudio log-mel, the VGGSound and Clotho layouts, tar shards."""
import tarfile

import numpy as np
import pytest

from iclr26.core.audio import (
    MelSpec,
    extract_tar_audio,
    log_mel,
    mel_centres,
    read_clip,
    read_clotho_captions,
    read_vggsound_csv,
    vggsound_clip_name,
    write_clip,
    write_clotho_captions,
    write_vggsound_csv,
)
from iclr26.core.errors import DataError


def test_clip_roundtrip_resample_and_channels(tmp_path):
    t = np.arange(8000) / 8000
    wave = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.25 * np.sin(2 * np.pi * 440 * t)]).astype(np.float32)
    write_clip(tmp_path / "a.wav", wave, 8000)
    back = read_clip(tmp_path / "a.wav")
    assert back.shape == (2, 8000) and np.abs(back - wave).max() < 1e-3          # PCM_16
    up = read_clip(tmp_path / "a.wav", sample_rate=16000, channels=2, num_samples=20000)
    assert up.shape == (2, 20000) and np.all(up[:, 16000:] == 0)                   # 1 s resampled, then padded
    write_clip(tmp_path / "m.flac", wave[0], 8000)
    mono = read_clip(tmp_path / "m.flac", channels=2)
    assert mono.shape == (2, 8000) and np.array_equal(mono[0], mono[1])
    with pytest.raises(DataError):
        read_clip(tmp_path / "missing.wav")


def test_log_mel_puts_a_tone_in_its_band():
    spec = MelSpec()
    t = np.arange(spec.num_samples) / spec.sample_rate
    band = 6
    wave = np.sin(2 * np.pi * mel_centres(spec)[band] * t)[None].astype(np.float32)
    db = log_mel(wave, spec)
    assert db.shape == (1, spec.n_mels, spec.frames)
    assert (db[0].mean(1).argmax()) == band
    assert db.max() - db.min() <= spec.top_db + 1e-4


def test_vggsound_csv_layout(tmp_path):
    rows = [("---g-f_I2yQ", 1, "people marching", "test"), ("abc", 30, "dog barking, growling", "train")]
    path = write_vggsound_csv(tmp_path / "vggsound.csv", rows)
    assert path.read_text().splitlines()[0] == "---g-f_I2yQ,1,people marching,test"
    back = read_vggsound_csv(path)
    assert [(r["ytid"], r["start"], r["label"], r["split"]) for r in back] == [tuple(r) for r in rows]
    assert back[0]["clip"] == vggsound_clip_name("---g-f_I2yQ", 1) == "---g-f_I2yQ_000001"


def test_clotho_captions_layout(tmp_path):
    captions = [f"c{i}" for i in range(5)]
    path = write_clotho_captions(tmp_path / "clotho_captions_development.csv", [("a b.wav", captions)])
    assert path.read_text().splitlines()[0] == "file_name,caption_1,caption_2,caption_3,caption_4,caption_5"
    assert read_clotho_captions(path) == [{"file_name": "a b.wav", "captions": ["c0", "c1", "c2", "c3", "c4"]}]
    (tmp_path / "bad.csv").write_text("name,text\nx,y\n")
    with pytest.raises(DataError):
        read_clotho_captions(tmp_path / "bad.csv")


def test_extract_tar_audio_reads_named_clips_and_resumes(tmp_path):
    for name in ("x_000001", "y_000002"):
        write_clip(tmp_path / "src" / f"{name}.wav", np.full((1, 4410), 0.1, np.float32), 44100)
    with tarfile.open(tmp_path / "shard.tar.gz", "w:gz") as tar:
        for f in sorted((tmp_path / "src").iterdir()):
            tar.add(f, arcname=f"video/{f.name}")
    got = extract_tar_audio(tmp_path / "shard.tar.gz", {"x_000001"}, tmp_path / "clips", 16000, 2)
    assert list(got) == ["x_000001"] and read_clip(got["x_000001"]).shape == (2, 1600)
    stamp = got["x_000001"].stat().st_mtime_ns
    again = extract_tar_audio(tmp_path / "shard.tar.gz", {"x_000001"}, tmp_path / "clips", 16000, 2)
    assert again["x_000001"].stat().st_mtime_ns == stamp
