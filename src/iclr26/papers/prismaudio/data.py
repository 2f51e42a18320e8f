"""PrismAudio's data at every scale: VGGSound-layout clips plus per-clip condition files.

Tiny/smoke (`synthesise`): a seeded generator writes real 16 kHz stereo clips in VGGSound's layout
(`vggsound.csv` rows (YouTube ID, start s, label, split); `clips/<ytid>_<start>.wav`) and, per clip,
the condition file PrismAudio's feature extractor writes (`features/<clip>.npz`: video_features,
sync_features, text_features, caption_cot) plus the reference the temporal and spatial rewards
compare with (the onset frame and the pan, as the official rewards use the reference video/audio).
- Each class is a fixed set of partials at mel-band centres (class-specific spectral pattern); a
  clip's sound starts at onset frame o with an exponential decay, is panned with constant power so
  that its interaural level index (E_L - E_R) / (E_L + E_R) equals the pan p, over a noise floor.
- The video features show the class (a class code), the moment of impact (a motion envelope
  peaking at frame o; sync_features = its magnitude) and the horizontal position p, with noise:
  timing and position are only in the video, as in real V2A.
- Training clips are imperfect (card 6.1: in-the-wild misalignment): the audio onset jittered,
  the pan randomised and a loud noise floor for part of the items; test clips are clean.

Full scale (`vggsound_rows` + core.audio.extract_tar_audio): the real vggsound.csv and clips
from the hub mirror's shards; conditions from the label and the reference clip (stages.py).
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from iclr26.core.audio import MelSpec, mel_centres, vggsound_clip_name, write_clip, write_vggsound_csv
from iclr26.core.io import save_arrays

LABELS = ("dog barking", "church bell ringing", "car engine starting", "bird chirping", "hammering",
          "playing drum kit", "rain on surface", "people clapping", "cat meowing", "chainsaw sawing")
SECTIONS = ("sem", "temp", "spat", "aes")
TEXT_DIM = 8   # per CoT section


def class_partials(n_classes: int, bands_per_class: int, spec: MelSpec, seed: int) -> np.ndarray:
    """(n_classes, bands_per_class) partial frequencies: distinct band sets per class."""
    rng = np.random.default_rng(seed)
    centres = mel_centres(spec)
    usable = np.arange(1, spec.n_mels - 1)
    chosen, seen = [], set()
    while len(chosen) < n_classes:
        bands = tuple(sorted(rng.choice(usable, bands_per_class, replace=False)))
        if bands not in seen:
            seen.add(bands)
            chosen.append(bands)
    return centres[np.array(chosen)]


def render(freqs: np.ndarray, onset: int, pan: float, floor: float, spec: MelSpec, decay_s: float,
           rng: np.random.Generator) -> np.ndarray:
    """One stereo clip (2, samples): partials from onset frame `onset` (the sound starts a quarter
    window into that frame's window), constant-power pan with level index = pan, white noise floor."""
    n = spec.num_samples
    t = np.arange(n) / spec.sample_rate
    start = onset * spec.hop_length + spec.n_fft // 4
    env = np.where(np.arange(n) >= start, np.exp(-np.clip(t - start / spec.sample_rate, 0, None) / decay_s), 0.0)
    phases = rng.uniform(0, 2 * np.pi, len(freqs))
    tone = sum(np.sin(2 * np.pi * f * t + ph) for f, ph in zip(freqs, phases)) / len(freqs)
    mono = 0.5 * env * tone
    gains = np.sqrt([(1 + pan) / 2, (1 - pan) / 2])
    return (gains[:, None] * mono[None] + floor * rng.standard_normal((2, n))).astype(np.float32)


def token_vector(token: str) -> np.ndarray:
    """A fixed embedding per CoT token (the text encoder stand-in): seeded by the token's crc32."""
    return np.random.default_rng(zlib.crc32(token.encode())).standard_normal(TEXT_DIM)


def cot_text(label: str, onset: int, frames: int, pan: float) -> str:
    """The decomposed CoT: one short section per dimension (semantic, temporal, spatial, aesthetic)."""
    when = ("early", "middle", "late")[min(2, 3 * onset // frames)]
    side = "left" if pan > 1 / 3 else "right" if pan < -1 / 3 else "centre"
    return f"sem: {label} | temp: onset {when} | spat: {side} | aes: clean"


def text_features(cot: str) -> np.ndarray:
    """(4 * TEXT_DIM,) mean token embedding of each CoT section, in SECTIONS order."""
    parts = dict(p.strip().split(":", 1) for p in cot.split("|"))
    return np.concatenate([np.mean([token_vector(w) for w in parts[s].split()], 0) for s in SECTIONS])


def video_features(code: np.ndarray, onset: int, pan: float, frames: int, dims: int, noise: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(frames, dims) video features and (frames,) sync features of one clip."""
    f = np.arange(frames)
    motion = np.where(f >= onset, np.exp(-(f - onset) / 2.0), 0.0)
    video = np.zeros((frames, dims))
    video[:, : len(code)] = code[None] * (0.5 + motion[:, None])
    video[:, len(code)] = pan
    video += noise * rng.standard_normal(video.shape)
    sync = motion + noise * rng.standard_normal(frames)
    return video.astype(np.float32), sync.astype(np.float32)


def synthesise(cfg: dict, out_dir: Path) -> dict:
    """Write the tiny VGGSound-layout dataset into out_dir; returns a summary."""
    spec = MelSpec.from_cfg(cfg["mel"])
    n_classes = int(cfg["n_classes"])
    labels = LABELS[:n_classes]
    rng = np.random.default_rng(int(cfg["data_seed"]))
    partials = class_partials(n_classes, int(cfg["bands_per_class"]), spec, int(cfg["data_seed"]))
    codes = rng.standard_normal((n_classes, int(cfg["video"]["code_dims"])))
    codes /= np.linalg.norm(codes, axis=1, keepdims=True)
    corrupt, floors = cfg["corrupt"], cfg["noise_floor"]
    rows, summary = [], {"train": 0, "test": 0, "corrupted_onset": 0, "corrupted_pan": 0, "noisy": 0}
    for split, n in (("train", int(cfg["n_train"])), ("test", int(cfg["n_test"]))):
        for i in range(n):
            c = int(rng.integers(n_classes))
            onset = int(rng.integers(0, int(cfg["max_onset"]) + 1))
            pan = float(rng.uniform(-1, 1))
            a_onset, a_pan, floor = onset, pan, float(floors["clean"])
            if split == "train":
                if rng.random() < corrupt["onset_jitter_prob"]:
                    a_onset = int(np.clip(onset + rng.choice([-1, 1]) * rng.integers(1, corrupt["onset_jitter"] + 1),
                                          0, spec.frames - 2))
                    summary["corrupted_onset"] += 1
                if rng.random() < corrupt["pan_random_prob"]:
                    a_pan = float(rng.uniform(-1, 1))
                    summary["corrupted_pan"] += 1
                if rng.random() < corrupt["noisy_prob"]:
                    floor = float(floors["noisy"])
                    summary["noisy"] += 1
            ytid = f"syn{zlib.crc32(f'{split}{i}'.encode()):08x}"
            start = int(rng.integers(0, 290))
            clip = vggsound_clip_name(ytid, start)
            write_clip(out_dir / "clips" / f"{clip}.wav", render(partials[c], a_onset, a_pan, floor, spec,
                                                                   float(cfg["decay_s"]), rng), spec.sample_rate)
            video, sync = video_features(codes[c], onset, pan, spec.frames, int(cfg["video"]["dims"]),
                                         float(cfg["video"]["noise"]), rng)
            cot = cot_text(labels[c], onset, spec.frames, pan)
            save_arrays(out_dir / "features" / f"{clip}.npz", video_features=video, sync_features=sync,
                        text_features=text_features(cot).astype(np.float32), caption_cot=np.array(cot),
                        onset_frame=np.int64(onset), pan=np.float32(pan))
            rows.append((ytid, start, labels[c], split))
            summary[split] += 1
    write_vggsound_csv(out_dir / "vggsound.csv", rows)
    return summary
