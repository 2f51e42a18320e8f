"""DART's data at every scale: Clotho-layout clips with five captions each.

Tiny/smoke (`synthesise`): `clotho_captions_{development,evaluation}.csv` (file_name,
caption_1..caption_5) and clips `{development,evaluation}/<file_name>` (16 kHz mono wav). A clip
is one sound event (class-specific partials at mel-band centres) with two attributes, loudness
(gain) and distance (high partials attenuated), plus a modality-specific nuisance: in each of a
fixed set of mel bands (`nuisance.bands`, disjoint from the event bands; card 09 section 6.1) a tone
with an independent Student-t amplitude per clip (heavy-tailed, high-variance log-mel channels that
no caption describes: what the reliability-aware marginals should down-weight). Captions: the event
name and attribute words in random order among filler words (5 per clip).
Full (`acquire_zenodo`): Clotho v2.1 from Zenodo record 4783391, each file of the splits the config
lists (`files`: development, validation, evaluation) pinned by its md5 (core.acquire.download_pinned
records its sha256); the `.7z` audio archives are unpacked with py7zr (DEFAULT_UNPACK, pinned in
envs/torch.yaml) or the config's `unpack` command (e.g. p7zip's `7z x`) into the same
`<split>/<file_name>` layout.
`read_split` (model.encoder mlp: tiny, smoke): captions CSV + clips -> log-mel (core.audio) -> audio
features (per-mel mean and std over frames) and tokenised captions. At full scale (model.encoder
pretrained) full.prepare reads the same CSVs and clips (core.audio.read_clip) into 32 kHz waveforms
for ResNet38 and BERT token ids.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from iclr26.core.audio import (
    MelSpec,
    log_mel,
    mel_centres,
    read_clip,
    read_clotho_captions,
    write_clip,
    write_clotho_captions,
)
from iclr26.core.errors import DataError

LOUD = ("quiet", "loud")
DIST = ("nearby", "distant")
FILLER = ("a", "the", "sound", "of", "is", "heard", "with", "some", "and", "in", "background", "there")
SPLITS = ("development", "evaluation")
DEFAULT_UNPACK = ("python", "-m", "py7zr", "x", "{archive}", "{out}")   # py7zr, pinned in the env


def synthesise(cfg: dict, out: Path) -> dict:
    spec = MelSpec.from_cfg(cfg["mel"])
    rng = np.random.default_rng(int(cfg["data_seed"]))
    centres = mel_centres(spec)
    n_events = int(cfg["n_events"])
    nz = cfg["nuisance"]
    nuis = [int(b) for b in nz["bands"]]                 # a fixed set of bands, as card 09 section 6.1
    clean = np.setdiff1d(np.arange(1, spec.n_mels - 1), nuis)
    events = [rng.choice(clean, 3, replace=False) for _ in range(n_events)]
    names = [f"event{e:02d}" for e in range(n_events)]
    t = np.arange(spec.num_samples) / spec.sample_rate
    for split, n in zip(SPLITS, (int(cfg["n_dev"]), int(cfg["n_eval"]))):
        rows = []
        for i in range(n):
            e, loud, dist = int(rng.integers(n_events)), int(rng.integers(2)), int(rng.integers(2))
            amps = np.where(centres[events[e]] > 2000, 0.3 if dist else 1.0, 1.0) * (0.6 if loud else 0.15)
            wave = sum(a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
                       for a, f in zip(amps, centres[events[e]]))
            bursts = np.abs(rng.standard_t(float(nz["df"]), len(nuis))) * float(nz["scale"])
            wave = wave / 3 + sum(b * np.sin(2 * np.pi * centres[k] * t) for b, k in zip(bursts, nuis))
            wave = wave + float(cfg["noise_floor"]) * rng.standard_normal(len(t))
            name = f"clip_{split[:3]}_{i:05d}.wav"
            write_clip(out / split / name, np.clip(wave, -1, 1)[None], spec.sample_rate)
            caps = []
            for _ in range(5):
                words = [names[e], LOUD[loud], DIST[dist], *rng.choice(FILLER, int(rng.integers(3, 7)))]
                rng.shuffle(words)
                caps.append(" ".join(words))
            rows.append((name, caps))
        write_clotho_captions(out / f"clotho_captions_{split}.csv", rows)
    return {"development": int(cfg["n_dev"]), "evaluation": int(cfg["n_eval"])}


def acquire_zenodo(spec: dict, out: Path) -> dict:
    """Download the pinned captions CSVs and audio archives of every split of `files` (development,
    validation, evaluation at full scale) and unpack the clips; returns {file: {url, sha256}} for the
    manifest."""
    from iclr26.core.acquire import download_pinned

    got = {}
    for split in spec["files"]:
        files = spec["files"][split]
        got[f"clotho_captions_{split}.csv"] = download_pinned(files["captions"], out / f"clotho_captions_{split}.csv")
        archive = out / "archives" / files["audio"]["file"]
        got[files["audio"]["file"]] = download_pinned(files["audio"], archive)
        n = extract_7z(archive, out / split, list(spec.get("unpack") or DEFAULT_UNPACK))
        if not n:
            raise DataError(f"dart: {archive.name} holds no .wav clips")
        got[f"{split}_clips"] = n
        if not spec.get("keep_archives", True):
            archive.unlink()
    return got


def extract_7z(archive: Path, dest: Path, command: list[str]) -> int:
    """Unpack the .wav members of a 7z archive into `dest` (flat, by file name, whatever folder the
    archive puts them in) with the unpacking command of the config (`unpack`, default py7zr's
    command line, pinned in envs/torch.yaml; {archive} and {out} are filled in); a `.complete`
    marker makes a repeated acquire skip the work. A command, not an import, so that p7zip's `7z x`
    can replace it from the config."""
    marker = dest / ".complete"
    if marker.exists():
        return int(marker.read_text())
    tmp = dest.parent / f".{dest.name}.extract"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [part.format(archive=archive, out=tmp) for part in command]
    if shutil.which(argv[0]) is None:
        raise DataError(f"dart: the unpacking command {argv[0]!r} (data.clotho.unpack) is not on PATH")
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DataError(f"dart: cannot unpack {archive.name}: {' '.join(argv[:2])} exited {proc.returncode}: {last[0]}")
    dest.mkdir(parents=True, exist_ok=True)
    wavs = [p for p in tmp.rglob("*") if p.is_file() and p.suffix.lower() == ".wav"]
    for w in wavs:
        os.replace(w, dest / w.name)
    shutil.rmtree(tmp, ignore_errors=True)
    marker.write_text(str(len(wavs)))
    return len(wavs)


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def read_split(raw: Path, cfg: dict, split: str) -> tuple[np.ndarray, list[list[str]]]:
    """(audio features (N, 2 n_mels), captions (N lists of 5)) of the clips of `split` on disk."""
    spec = MelSpec.from_cfg(cfg["mel"])
    rows = [r for r in read_clotho_captions(raw / f"clotho_captions_{split}.csv")
            if (raw / split / r["file_name"]).exists()]
    if cfg.get("max_per_split"):
        rows = rows[: int(cfg["max_per_split"])]
    if not rows:
        raise DataError(f"dart: no {split} clips under {raw / split}")
    feats = []
    for start in range(0, len(rows), 256):      # in chunks: full-scale clips are up to 30 s each
        waves = np.stack([read_clip(raw / split / r["file_name"], spec.sample_rate, 1, spec.num_samples)[0]
                          for r in rows[start: start + 256]])
        db = log_mel(waves, spec)
        feats.append(np.concatenate([db.mean(-1), db.std(-1)], axis=1))
    return np.concatenate(feats).astype(np.float32), [r["captions"] for r in rows]
