"""The four reward dimensions, computed on generated audio features (log-mel dB, both channels),
and the held-out checks that are never rewards.

Stand-ins for the official reward models (card 2.3, grpo/fast_grpo/rewards.py), each a function
of the generated features and of what the official model compares them with:
- semantic  (MS-CLAP: audio vs CoT caption):  cosine between the clip's mean-centred band profile
            and its class's reference profile (the class mean over the training clips);
- temporal  (Synchformer: audio vs video):    -|onset frame of the audio - onset frame of the video| / frames,
            the audio onset being the first frame whose energy reaches half the clip's peak;
- spatial   (StereoCRW ITD vs reference):     -|(E_L - E_R) / (E_L + E_R) - reference pan|;
- aesthetic (Audiobox Aesthetics, no reference): dynamic range (peak dB - median dB) / top_db,
            which a noise floor lowers.
Weighted sum with the official weights (card 2.3): R = 1.0 sem + 0.6 temp + 0.4 spat + 0.1 aes.

Held-out checks (not optimised): a logistic-regression classifier trained on the training clips'
features (accuracy on generated test audio), and a Frechet distance between generated and real
test features in a PCA space fitted on the training clips.
"""
from __future__ import annotations

import numpy as np

DIMS = ("semantic", "temporal", "spatial", "aesthetic")


def band_profile(db: np.ndarray) -> np.ndarray:
    """(B, 2, M, T) dB -> (B, M) mean-centred band profile (both channels, all frames)."""
    prof = db.mean(axis=(1, 3))
    return prof - prof.mean(axis=1, keepdims=True)


def onset_frame(db: np.ndarray) -> np.ndarray:
    """(B,) first frame whose total power reaches half the clip's peak frame power."""
    energy = (10.0 ** (db / 10.0)).sum(axis=(1, 2))          # (B, T)
    return (energy >= 0.5 * energy.max(axis=1, keepdims=True)).argmax(axis=1)


def level_index(db: np.ndarray) -> np.ndarray:
    """(B,) (E_L - E_R) / (E_L + E_R) over the whole clip."""
    power = (10.0 ** (db / 10.0)).sum(axis=(2, 3))            # (B, 2)
    return (power[:, 0] - power[:, 1]) / power.sum(axis=1)


def dynamic_range(db: np.ndarray, top_db: float) -> np.ndarray:
    flat = db.reshape(len(db), -1)
    return (flat.max(axis=1) - np.median(flat, axis=1)) / top_db


def scores(db: np.ndarray, label: np.ndarray, onset: np.ndarray, pan: np.ndarray, templates: np.ndarray,
           top_db: float) -> dict[str, np.ndarray]:
    """Per-clip scores of every dimension and the raw errors: {semantic, temporal, spatial,
    aesthetic, onset_err (frames), pan_err}."""
    prof = band_profile(db)
    tmpl = templates[label]
    sem = (prof * tmpl).sum(1) / (np.linalg.norm(prof, axis=1) * np.linalg.norm(tmpl, axis=1) + 1e-8)
    onset_err = np.abs(onset_frame(db) - onset).astype(float)
    pan_err = np.abs(level_index(db) - pan)
    return {"semantic": sem, "temporal": -onset_err / db.shape[-1], "spatial": -pan_err,
            "aesthetic": dynamic_range(db, top_db), "onset_err": onset_err, "pan_err": pan_err}


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
