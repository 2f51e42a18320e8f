"""Image data for the conditioned-init experiment, in one CIFAR-like schema.

Every source ends up as `images.npz` holding
    x_train  uint8  N x 3 x H x W      y_train  int64  N
    x_test   uint8  M x 3 x H x W      y_test   int64  M
so prepare, train and evaluate never care where the images came from. Prepare normalises them and
writes one float32 `.npy` file per array (`save_prepared` / `load_prepared`).

Sources (config `data.images.source`):
  motif_pairs  the card's tiny task (card 01, section 6), drawn from seeded generators;
  cifar10      the real CIFAR-10 archive, downloaded with a sha256 check (full scale).

Motif pairs. Each image is N(0, noise_std^2) noise on a grid of patch x patch cells. Two of
`n_motifs` fixed random N(0, motif_std^2) motifs are pasted into two random cells, and a
distractor motif at `distractor_strength` into a third cell; `paste: add` adds them onto the
noise, `replace` overwrites it. The label is the unordered pair, so 5 motifs give C(5,2) = 10
classes. A class depends on two tokens at once, which is why the card chose it: the model has to
combine information across patches. The motif bank (the task) is fixed by `motif_seed`; the images
are drawn per run seed, from a generator seeded by (`data_seed`, run seed), so every seed is an
independent replicate of the data as well as of the init and the batch order (`seed_datasets`).
A real dataset (CIFAR-10) is one fixed set shared by every seed.
"""
from __future__ import annotations

import functools
import itertools
import pickle
import tarfile
from pathlib import Path

import numpy as np

from iclr26.core.errors import DataError
from iclr26.core.io import atomic_path, sha256_file

# uint8 storage of the float images: pixel = round(value * SCALE + OFFSET). The range +-6.4 covers
# 3.4 standard deviations of noise + motif (sqrt(1.6^2 + 1^2)); the step (0.05) is far below the noise.
UINT8_SCALE = 20.0
UINT8_OFFSET = 128.0

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"


# ----------------------------------------------------------------------------- motif pairs
def motif_bank(n_motifs: int, patch: int, channels: int, motif_std: float, motif_seed: int) -> np.ndarray:
    """`n_motifs` class motifs plus one distractor (the last row), each channels x patch x patch."""
    rng = np.random.default_rng(motif_seed)
    return rng.normal(0.0, motif_std, size=(n_motifs + 1, channels, patch, patch))


def pair_classes(n_motifs: int) -> list[tuple[int, int]]:
    """Class index -> unordered motif pair, in lexicographic order: 0=(0,1), 1=(0,2), ..."""
    return list(itertools.combinations(range(n_motifs), 2))


def motif_pair_images(n: int, spec: dict, bank: np.ndarray, rng: np.random.Generator):
    """Draw `n` float images (n x C x H x W) and labels; spec is the `data.images` config."""
    size, patch, noise_std = spec["image_size"], spec["patch"], spec["noise_std"]
    grid = size // patch
    classes = np.array(pair_classes(spec["n_motifs"]))
    images = rng.normal(0.0, noise_std, size=(n, bank.shape[1], size, size))
    labels = rng.integers(0, len(classes), size=n)
    # three distinct cells per image: first motif, second motif, distractor
    cells = np.argsort(rng.random((n, grid * grid)), axis=1)[:, :3]
    sources = [bank[classes[labels, 0]], bank[classes[labels, 1]],
               spec["distractor_strength"] * np.broadcast_to(bank[-1], (n, *bank.shape[1:]))]
    rows, add = np.arange(n), spec["paste"] == "add"
    for slot, pasted in enumerate(sources):
        for r in range(patch):          # pixel by pixel of the cell, all images at once
            for c in range(patch):
                y = (cells[:, slot] // grid) * patch + r
                x = (cells[:, slot] % grid) * patch + c
                images[rows, :, y, x] = pasted[:, :, r, c] + (images[rows, :, y, x] if add else 0.0)
    return images, labels.astype(np.int64)


def to_uint8(images: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(images * UINT8_SCALE + UINT8_OFFSET), 0, 255).astype(np.uint8)


def generate_motif_pairs(spec: dict, seed: int) -> dict[str, np.ndarray]:
    """The tiny dataset of run seed `seed`: a training pool (each sample streamed once) and a test set."""
    bank = motif_bank(spec["n_motifs"], spec["patch"], 3, spec["motif_std"], spec["motif_seed"])
    train_rng, test_rng = (np.random.default_rng([spec["data_seed"], seed, k]) for k in (0, 1))
    x_train, y_train = motif_pair_images(spec["n_train"], spec, bank, train_rng)
    x_test, y_test = motif_pair_images(spec["n_test"], spec, bank, test_rng)
    return {"x_train": to_uint8(x_train), "y_train": y_train, "x_test": to_uint8(x_test), "y_test": y_test,
            "motifs": bank}


def seed_datasets(spec: dict, seeds) -> dict[int, str]:
    """{run seed: the folder (under the raw and prepared dirs) holding that seed's data}.

    Generated sources draw one dataset per seed (folder `s<seed>`); a real dataset is one set
    for every seed (folder ''). Acquire and prepare make every folder; train and evaluate read
    their seed's.
    """
    if spec["source"] == "motif_pairs":
        return {int(seed): f"s{int(seed)}" for seed in seeds}
    return {int(seed): "" for seed in seeds}


# ----------------------------------------------------------------------------- CIFAR-10 (full scale)
class _CifarUnpickler(pickle.Unpickler):
    """CIFAR-10's python batches are dicts of bytes, lists of ints and one uint8 array: the unpickler
    builds numpy's array and nothing else, so a batch naming any other class or function (which a
    plain pickle.load would call) is refused and no code from the file runs."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct")}   # numpy 1 (the archive's) and numpy 2 names

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise DataError(f"a CIFAR-10 batch names {module}.{name}, which this reader does not build")
        import warnings

        with warnings.catch_warnings():   # numpy 2 warns on the numpy.core path that numpy 1 pickles name
            warnings.simplefilter("ignore", DeprecationWarning)
            return super().find_class(module, name)


def read_cifar10(archive: Path, sha256: str | None = CIFAR10_SHA256) -> dict[str, np.ndarray]:
    """The official python-pickle archive -> the common schema (uint8 N x 3 x 32 x 32).
    Only an archive matching its sha256 pin is read, and then only with an unpickler that builds
    numpy arrays and plain data (_CifarUnpickler): no code from the file runs even if the pin is wrong."""
    digest = sha256_file(archive)
    if not sha256 or digest != sha256:
        raise DataError(f"{archive}: sha256 {digest} does not match the pin ({sha256}); refusing to unpickle it")

    def batches(tar, names):
        xs, ys = [], []
        for name in names:
            with tar.extractfile(f"cifar-10-batches-py/{name}") as handle:
                entry = _CifarUnpickler(handle, encoding="bytes").load()
            xs.append(np.asarray(entry[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(entry[b"labels"], dtype=np.int64))
        return np.concatenate(xs), np.concatenate(ys)

    with tarfile.open(archive, "r:gz") as tar:
        x_train, y_train = batches(tar, [f"data_batch_{i}" for i in range(1, 6)])
        x_test, y_test = batches(tar, ["test_batch"])
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


# ----------------------------------------------------------------------------- prepare
PREPARED = ("train_x", "train_y", "test_x", "test_y")


def channel_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of the training images (float64, in uint8 units)."""
    pixels = x_train.transpose(1, 0, 2, 3).reshape(x_train.shape[1], -1).astype(np.float64)
    return pixels.mean(axis=1), pixels.std(axis=1)


def normalise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return ((x.astype(np.float32) - mean[None, :, None, None]) / std[None, :, None, None]).astype(np.float32)


def prepared_arrays(raw: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:
    """Images normalised by the training pool's per-channel mean/std, and the stats of the split."""
    mean, std = channel_stats(raw["x_train"])
    arrays = {f"{split}_x": normalise(raw[f"x_{split}"], mean, std) for split in ("train", "test")}
    arrays.update({f"{split}_y": raw[f"y_{split}"] for split in ("train", "test")})
    stats = {"mean": mean.tolist(), "std": std.tolist(), "n_train": len(raw["y_train"]),
             "n_test": len(raw["y_test"]), "train_class_counts": np.bincount(raw["y_train"]).tolist()}
    return arrays, stats


def save_prepared(directory: Path, arrays: dict[str, np.ndarray]) -> None:
    # one .npy per array, not an .npz: a large training pool is then memory-mapped, not read whole
    for name in PREPARED:
        with atomic_path(directory / f"{name}.npy") as tmp, open(tmp, "wb") as handle:
            np.save(handle, arrays[name], allow_pickle=False)  # a handle: np.save would append .npy


def load_prepared(directory: Path) -> dict[str, np.ndarray]:
    if not all((directory / f"{name}.npy").exists() for name in PREPARED):
        raise DataError(f"{directory} has no prepared data; run the prepare stage first")
    return {name: np.load(directory / f"{name}.npy", mmap_mode="r") for name in PREPARED}


# ----------------------------------------------------------------------------- the training stream
def batch_indices(n_pool: int, batch_size: int, seed: int, step: int, stream: int = 0) -> np.ndarray:
    """Pool indices of training batch `step` for `seed`: a pure function of (seed, step, stream).

    Each epoch is a fresh seeded permutation of the pool, so a resumed run needs nothing but
    the step to continue the same stream. At tiny scale steps * batch <= pool: one epoch, so
    every sample is seen once (the card's streaming regime, no repeated data). `stream` 1 is
    another order of the same pool (weight selection's teacher).
    """
    epoch, index = divmod(step, n_pool // batch_size)
    return epoch_order(n_pool, seed, epoch, stream)[index * batch_size:(index + 1) * batch_size]


@functools.lru_cache(maxsize=2)
def epoch_order(n_pool: int, seed: int, epoch: int, stream: int = 0) -> np.ndarray:
    """The seeded permutation of the pool for one epoch (read-only). Cached: every step of the epoch
    slices the same permutation, drawn once instead of once per step."""
    order = np.random.default_rng([seed, epoch, stream] if stream else [seed, epoch]).permutation(n_pool)
    order.flags.writeable = False
    return order


def augment(x: np.ndarray, seed: int, step: int, pad: int = 4) -> np.ndarray:
    """Random crop (zero padding `pad`) and horizontal flip, as for CIFAR (full scale only).

    Drawn from a generator seeded by (seed, step), so a resumed run sees the same augmentations.
    """
    rng = np.random.default_rng([seed, step, 7])
    n, _, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, n))
    flip = rng.random(n) < 0.5
    out = np.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop[:, :, ::-1] if flip[i] else crop
    return out
