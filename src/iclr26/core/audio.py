"""Audio shared by the audio papers: clips on disk, log-mel features, the datasets' layouts.

- Clips are read and written through soundfile (libsndfile: wav, flac, ogg); a clip is a float32
  array (channels, samples). Resampling and log-mel features use torchaudio's transforms, so the
  tiny generators' synthetic clips and real clips go through the same code.
- VGGSound: `vggsound.csv` has no header, one row per clip: YouTube ID, start second, label, split
  (train | test). A clip file is named `<YouTube ID>_<start, 6 digits>.<ext>` (the naming of the
  common VGGSound releases, e.g. `---g-f_I2yQ_000001.mp4`).
- Clotho (v2.1): `clotho_captions_<split>.csv` with a header `file_name,caption_1..caption_5`,
  clips in `<split>/<file_name>` (wav, 44.1 kHz mono).
- Archives: VGGSound's hub mirror ships tar.gz shards of videos; `extract_tar_audio` reads the
  clips a CSV names out of a shard, decoding audio files with soundfile and video files with the
  `ffmpeg` binary (the only codec path here for mp4; it must be on PATH at full scale).
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from .errors import DataError

AUDIO_EXTS = (".wav", ".flac", ".ogg")
VIDEO_EXTS = (".mp4", ".mkv", ".webm", ".avi")


# ----------------------------------------------------------------------------- clips
def write_clip(path: str | Path, wave: np.ndarray, sample_rate: int, subtype: str = "PCM_16") -> Path:
    """Write a (channels, samples) float array in [-1, 1] as a sound file (format from the suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim == 1:
        wave = wave[None]
    sf.write(str(path), np.clip(wave, -1.0, 1.0).T, int(sample_rate), subtype=subtype)
    return path


def read_clip(source, sample_rate: int | None = None, channels: int | None = None,
              num_samples: int | None = None) -> np.ndarray:
    """A clip as float32 (channels, samples): resampled to `sample_rate` (torchaudio), mono
    duplicated / extra channels dropped to `channels`, cropped or zero-padded to `num_samples`.
    `source` is a path or a binary file object."""
    try:
        data, rate = sf.read(source if not isinstance(source, Path) else str(source), dtype="float32",
                             always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as err:
        raise DataError(f"cannot read audio {getattr(source, 'name', source)}: {err}") from None
    wave = data.T
    if sample_rate is not None and rate != sample_rate:
        import torch
        import torchaudio.functional as AF

        wave = AF.resample(torch.from_numpy(np.ascontiguousarray(wave)), int(rate), int(sample_rate)).numpy()
    if channels is not None:
        if wave.shape[0] < channels:
            wave = np.repeat(wave[:1], channels, axis=0)
        wave = wave[:channels]
    if num_samples is not None:
        if wave.shape[1] < num_samples:
            wave = np.pad(wave, ((0, 0), (0, num_samples - wave.shape[1])))
        wave = wave[:, :num_samples]
    return np.ascontiguousarray(wave, dtype=np.float32)


# ----------------------------------------------------------------------------- features
@dataclass(frozen=True)
class MelSpec:
    sample_rate: int = 16000
    n_fft: int = 512
    hop_length: int = 480
    n_mels: int = 16
    f_min: float = 50.0
    f_max: float = 8000.0
    top_db: float = 80.0
    frames: int = 16              # frames kept per clip (center=False: the clip's first `frames` windows)

    @property
    def num_samples(self) -> int:
        """Samples a clip needs for exactly `frames` windows."""
        return self.n_fft + self.hop_length * (self.frames - 1)

    @classmethod
    def from_cfg(cls, cfg: dict) -> MelSpec:
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


def log_mel(waves: np.ndarray, spec: MelSpec) -> np.ndarray:
    """Log-mel power in dB of (..., samples) waves: (..., n_mels, frames), torchaudio's
    MelSpectrogram (HTK mel scale, power 2, no centring) and AmplitudeToDB with `top_db` per clip."""
    import torch
    import torchaudio.transforms as T

    waves = torch.as_tensor(np.asarray(waves, dtype=np.float32))
    mel = T.MelSpectrogram(sample_rate=spec.sample_rate, n_fft=spec.n_fft, hop_length=spec.hop_length,
                           n_mels=spec.n_mels, f_min=spec.f_min, f_max=spec.f_max, center=False, power=2.0)
    power = mel(waves)[..., : spec.frames]
    lead = power.shape[:-2]
    flat = power.reshape(-1, *power.shape[-2:])
    db = T.AmplitudeToDB(stype="power", top_db=None)(flat.clamp_min(1e-10))
    # top_db per clip (all channels together): torchaudio's own top_db acts on a whole batch at once
    peak = db.flatten(1).max(1).values[:, None, None]
    db = torch.maximum(db, peak - spec.top_db)
    if power.shape[-1] < spec.frames:
        raise DataError(f"clip too short for {spec.frames} mel frames ({waves.shape[-1]} samples)")
    return db.reshape(*lead, *db.shape[-2:]).numpy()


def mel_centres(spec: MelSpec) -> np.ndarray:
    """Centre frequency (Hz) of each mel band of `spec` (HTK mel scale, as MelSpectrogram's default)."""
    import torchaudio.functional as AF

    fb = AF.melscale_fbanks(spec.n_fft // 2 + 1, spec.f_min, spec.f_max, spec.n_mels, spec.sample_rate)
    freqs = np.linspace(0, spec.sample_rate / 2, spec.n_fft // 2 + 1)
    return freqs[fb.numpy().argmax(0)]


# ----------------------------------------------------------------------------- VGGSound
def vggsound_clip_name(ytid: str, start: int | float) -> str:
    return f"{ytid}_{int(start):06d}"


def write_vggsound_csv(path: str | Path, rows: Iterable[tuple[str, int, str, str]]) -> Path:
    """Rows (YouTube ID, start s, label, split), no header: the layout of VGGSound's vggsound.csv."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        for ytid, start, label, split in rows:
            writer.writerow([ytid, int(start), label, split])
    return path


def read_vggsound_csv(path: str | Path) -> list[dict]:
    """[{ytid, start, label, split, clip}] from a VGGSound CSV (a header row, if any, is skipped)."""
    out = []
    with open(path, newline="") as handle:
        for row in csv.reader(handle):
            if len(row) < 4 or not row[1].strip().lstrip("-").isdigit():
                continue  # header or blank
            ytid, start, label, split = row[0], int(row[1]), row[2].strip(), row[3].strip()
            out.append({"ytid": ytid, "start": start, "label": label, "split": split,
                        "clip": vggsound_clip_name(ytid, start)})
    if not out:
        raise DataError(f"{path}: no VGGSound rows (YouTube ID, start, label, split)")
    return out


# ----------------------------------------------------------------------------- Clotho
CLOTHO_CAPTIONS = 5


def write_clotho_captions(path: str | Path, rows: Iterable[tuple[str, list[str]]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file_name", *(f"caption_{i + 1}" for i in range(CLOTHO_CAPTIONS))])
        for name, captions in rows:
            if len(captions) != CLOTHO_CAPTIONS:
                raise ValueError(f"{name}: Clotho has {CLOTHO_CAPTIONS} captions per clip, got {len(captions)}")
            writer.writerow([name, *captions])
    return path


def read_clotho_captions(path: str | Path) -> list[dict]:
    """[{file_name, captions: [5 str]}] from a Clotho captions CSV."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        wanted = [f"caption_{i + 1}" for i in range(CLOTHO_CAPTIONS)]
        if reader.fieldnames is None or "file_name" not in reader.fieldnames or \
                any(w not in reader.fieldnames for w in wanted):
            raise DataError(f"{path}: not a Clotho captions CSV (file_name, caption_1..caption_5)")
        return [{"file_name": row["file_name"], "captions": [row[w] for w in wanted]} for row in reader]


# ----------------------------------------------------------------------------- archives
def decode_video_audio(data: bytes, sample_rate: int, channels: int) -> np.ndarray:
    """The audio track of a video file's bytes, through the ffmpeg binary (wav on stdout)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise DataError("decoding video needs the ffmpeg binary on PATH (VGGSound shards hold mp4 files)")
    proc = subprocess.run([ffmpeg, "-v", "error", "-i", "pipe:0", "-vn", "-ac", str(channels), "-ar",
                           str(sample_rate), "-f", "wav", "pipe:1"], input=data, capture_output=True, check=False)
    if proc.returncode != 0:
        raise DataError(f"ffmpeg failed: {proc.stderr.decode(errors='replace')[:200]}")
    return read_clip(io.BytesIO(proc.stdout), sample_rate, channels)


def extract_tar_audio(archive: str | Path, wanted: set[str], out_dir: str | Path, sample_rate: int,
                      channels: int) -> dict[str, Path]:
    """Write every clip of a tar(.gz) whose stem is in `wanted` as `<out_dir>/<stem>.wav` (resampled
    to `sample_rate`, `channels` channels); returns {stem: path}. Clips already written are kept,
    so an interrupted extraction resumes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    found = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = Path(member.name)
            stem, ext = name.stem, name.suffix.lower()
            if stem not in wanted or ext not in AUDIO_EXTS + VIDEO_EXTS:
                continue
            dest = out_dir / f"{stem}.wav"
            if not dest.exists():
                data = tar.extractfile(member).read()
                wave = read_clip(io.BytesIO(data), sample_rate, channels) if ext in AUDIO_EXTS \
                    else decode_video_audio(data, sample_rate, channels)
                tmp = dest.with_name(dest.stem + ".part.wav")
                write_clip(tmp, wave, sample_rate)
                tmp.replace(dest)
            found[stem] = dest
    return found
