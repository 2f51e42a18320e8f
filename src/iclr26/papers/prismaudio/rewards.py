"""The four reward dimensions, computed on generated audio features (log-mel dB, both channels),
and the held-out checks that are never rewards.

Stand-ins for the official reward models (card 2.3, grpo/fast_grpo/rewards.py), each a function
of the generated features and of what the official model compares them with:
- semantic  (MS-CLAP: audio vs CoT caption):  cosine between the clip's mean-centred band profile
            and its class's reference profile (the class mean over the training clips);
- temporal  (Synchformer: audio vs video):    -|onset frame of the audio - onset frame of the video| / frames,
            the audio onset being the first frame whose dB envelope (mean over channels and mel
            bands) reaches half way from its minimum to its maximum;
- spatial   (StereoCRW ITD vs reference):     -|level index - reference pan|, the level index being the
            ILD (mean dB of L minus R over the class's bands in the active frames) mapped to
            (E_L - E_R) / (E_L + E_R) = tanh(ILD ln10 / 20) (exact for a constant-power pan);
- aesthetic (Audiobox Aesthetics, no reference): card 6.3's "-energy in the bands that should be
            silent", relative to the sound: (mean dB in the class's bands - mean dB in the other
            bands) / top_db, which a noise floor or spurious energy lowers.
Mean dB statistics (not power sums or the loudest bin), and generated features clamped to the
range real clips have (`clamp_db`: at most the training clips' maximum, at least the clip's peak
- top_db, as log_mel clamps real clips), so isolated spikes cannot drive a dimension (audit 06 M2).
Weighted sum with the official weights (card 2.3): R = 1.0 sem + 0.6 temp + 0.4 spat + 0.1 aes.

Held-out checks (not optimised): a logistic-regression classifier trained on the training clips'
features (accuracy on generated test audio), and a Frechet distance between generated and real
test features in a PCA space fitted on the training clips.
"""
from __future__ import annotations

import numpy as np

DIMS = ("semantic", "temporal", "spatial", "aesthetic")


def clamp_db(db: np.ndarray, ceiling: float, top_db: float) -> np.ndarray:
    """(B, 2, M, T) generated dB clamped as real clips are: <= ceiling (the training clips' maximum)
    and >= the clip's own peak - top_db (core.audio.log_mel's per-clip top_db)."""
    db = np.minimum(db, ceiling)
    peak = db.reshape(len(db), -1).max(axis=1)[:, None, None, None]
    return np.maximum(db, peak - top_db)


def band_profile(db: np.ndarray) -> np.ndarray:
    """(B, 2, M, T) dB -> (B, M) mean-centred band profile (both channels, all frames)."""
    prof = db.mean(axis=(1, 3))
    return prof - prof.mean(axis=1, keepdims=True)


def onset_frame(db: np.ndarray) -> np.ndarray:
    """(B,) first frame whose dB envelope (mean over channels and bands) reaches half way from the
    envelope's minimum to its maximum."""
    env = db.mean(axis=(1, 2))                                 # (B, T)
    lo, hi = env.min(axis=1, keepdims=True), env.max(axis=1, keepdims=True)
    return (env >= lo + 0.5 * (hi - lo)).argmax(axis=1)


def _bands(db: np.ndarray, bands: np.ndarray | None) -> np.ndarray:
    """(B, M) the given bands, or (None: no class known, full-scale conditions) the clip's loud half."""
    if bands is not None:
        return np.asarray(bands, bool)
    level = db.mean(axis=(1, 3))
    return level >= np.median(level, axis=1, keepdims=True)


def level_index(db: np.ndarray, bands: np.ndarray | None = None, active_db: float = 20.0) -> np.ndarray:
    """(B,) level index tanh(ILD ln10 / 20), ILD = mean over the `bands` (B, M) (None: all) and the
    active frames (the bands' mean level within `active_db` of its loudest frame) of dB L - dB R.
    bands None: the clip's louder half of the bands."""
    m = _bands(db, bands)[:, None, :, None]                    # (B, 1, M, 1)
    w = m.sum(axis=2)                                          # (B, 1, 1)
    level = (db * m).sum(axis=2) / w                           # (B, 2, T) per channel
    mono = level.mean(axis=1)                                  # (B, T)
    active = mono >= mono.max(axis=1, keepdims=True) - active_db
    ild = ((level[:, 0] - level[:, 1]) * active).sum(axis=1) / active.sum(axis=1)
    return np.tanh(ild * np.log(10.0) / 20.0)


def off_band_range(db: np.ndarray, bands: np.ndarray, top_db: float) -> np.ndarray:
    """(B,) (mean dB in the class's bands - mean dB in the other bands) / top_db."""
    m = np.asarray(bands, bool)[:, None, :, None]
    on = (db * m).sum(axis=(1, 2, 3)) / (m.sum(axis=(1, 2, 3)) * db.shape[1] * db.shape[3])
    off = (db * ~m).sum(axis=(1, 2, 3)) / ((~m).sum(axis=(1, 2, 3)) * db.shape[1] * db.shape[3])
    return (on - off) / top_db


def class_bands(templates: np.ndarray) -> np.ndarray:
    """(C, M) the bands a class's sound occupies: above the mean of its reference profile."""
    return templates > 0


def scores(db: np.ndarray, label: np.ndarray, onset: np.ndarray, pan: np.ndarray, templates: np.ndarray,
           top_db: float) -> dict[str, np.ndarray]:
    """Per-clip scores of every dimension and the raw errors: {semantic, temporal, spatial,
    aesthetic, onset_err (frames), pan_err}. `db` is already clamped (clamp_db) for generated audio."""
    prof = band_profile(db)
    tmpl = templates[label]
    bands = class_bands(templates)[label]
    sem = (prof * tmpl).sum(1) / (np.linalg.norm(prof, axis=1) * np.linalg.norm(tmpl, axis=1) + 1e-8)
    onset_err = np.abs(onset_frame(db) - onset).astype(float)
    pan_err = np.abs(level_index(db, bands) - pan)
    return {"semantic": sem, "temporal": -onset_err / db.shape[-1], "spatial": -pan_err,
            "aesthetic": off_band_range(db, bands, top_db), "onset_err": onset_err, "pan_err": pan_err}


def weighted(score: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """The multi-dimensional reward: sum of weight x score over the dimensions in `weights`."""
    return sum(float(w) * score[d] for d, w in weights.items())


def class_templates(db: np.ndarray, label: np.ndarray, n_classes: int) -> np.ndarray:
    prof = band_profile(db)
    return np.stack([prof[label == c].mean(0) for c in range(n_classes)])


# ----------------------------------------------------------------------------- held-out checks
def fit_checks(x_train: np.ndarray, label: np.ndarray, pca_dims: int, seed: int) -> dict[str, np.ndarray]:
    """Classifier weights and PCA basis, fitted on the (normalised, flattened) training features."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    flat = x_train.reshape(len(x_train), -1)
    clf = LogisticRegression(max_iter=300, C=0.1).fit(flat, label)
    pca = PCA(pca_dims, random_state=seed).fit(flat)
    return {"clf_coef": clf.coef_, "clf_intercept": clf.intercept_, "clf_classes": clf.classes_,
            "pca_mean": pca.mean_, "pca_components": pca.components_}


def heldout_accuracy(checks: dict, x: np.ndarray, label: np.ndarray) -> float:
    logits = x.reshape(len(x), -1) @ checks["clf_coef"].T + checks["clf_intercept"]
    return float((checks["clf_classes"][logits.argmax(1)] == label).mean())


def frechet_distance(checks: dict, x: np.ndarray, x_ref: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to two feature sets in the PCA space."""
    from scipy import linalg

    def project(a):
        return (a.reshape(len(a), -1) - checks["pca_mean"]) @ checks["pca_components"].T

    a, b = project(x), project(x_ref)
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(s1 @ s2)
    covmean = np.real(covmean)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * covmean))
