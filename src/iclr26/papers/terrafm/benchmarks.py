"""Full-scale downstream benchmarks of card 12: the GEO-Bench v1 classification tasks of the README's
kNN table and the Copernicus-Bench classification tasks of its Copernicus-Bench table, read from
their released files, and the frozen-encoder probes on them.

Sources (data.majortom.benchmarks in paper_scale/terrafm/full.yaml; every file a `url` at a pinned
hub commit with a sha256 or md5, fetched by core.acquire.download_pinned):
- GEO-Bench v1 (hub recursix/geo-bench-1.0): one zip per task, `classification_v1.0/<task>.zip`,
  unpacking to `<task>/` with one HDF5 file per sample, `task_specs.pkl`, `band_stats.json` and the
  partitions `default_partition.json`, `0.01x_train_partition.json`, ... (geobench's
  `GeobenchDataset`). A sample file holds one dataset per band, named by the band's name
  ("04 - Red", ...), and an attribute `pickle` = str(pickle.dumps(dict)): per band its BandInfo
  (geobench.dataset.Sentinel2 / Sentinel1 / ...), date, transform (affine.Affine), crs
  (rasterio.crs.CRS); `bands_order`; and `label` (an int, or a 0/1 int64 array for multi-label
  tasks) -- geobench.dataset.write_sample_hdf5 / load_sample_hdf5.
  The geobench package itself cannot be the reader here: its last release for Python 3.11 (1.0.0)
  pins pandas < 2 and huggingface_hub 0.19, below the project's pins. So this module reads the same
  files with h5py, the way load_sample_hdf5 does, and unpickles the metadata with a restricted
  unpickler: numpy arrays, dtypes and scalars and datetime dates are built; the classes of geobench,
  rasterio and affine become inert stand-ins that keep their state (nothing else is loaded).
- Copernicus-Bench (hub wangyi111/Copernicus-Bench; the files torchgeo's CopernicusBench* datasets
  download): EuroSAT-S1 / EuroSAT-S2, zips unpacking to `eurosat_s{1,2}/` with `eurosat-{split}.txt`
  (file names `<Class>_<n>.jpg`, read as .tif) and `all_imgs/<Class>/<Class>_<n>.tif` (multi-band
  GeoTIFF: S1 VV, VH in dB; S2 13 bands B01..B09, B10, B11, B12, B8A); LCZ-S2, `lcz_{split}.h5`
  with `sen2` (N, 32, 32, 10: B02..B08, B8A, B11, B12) and one-hot `label` (N, 17).

Band names are trusted only where the band statistics agree (band_problems, at prepare): GEO-Bench's
m-eurosat names its bands as if B8A were 9th while EuroSAT's tifs store it last, so its spec carries a
band_map (full.yaml). The EuroSAT GeoTIFFs are decoded by tifffile with imagecodecs (LZW / deflate).

Every image is put in the band order of TerraFM's path for it (majortom.S2L2A_BANDS for both S2
paths, B10 dropped; VV, VH for S1) and standardised per band (GEO-Bench: its band_stats.json;
Copernicus-Bench: the training split's mean and sd); a band the task lacks (B01 and B09 of So2Sat
and LCZ) is zero after standardisation, i.e. at its mean.

Protocols (card 12 section 5): GEO-Bench, weighted kNN on frozen CLS features with the full training
split and GEO-Bench's own 1% partition (`0.01x_train`), top-1 accuracy or, for m-bigearthnet
(multi-label), micro F1; Copernicus-Bench, a linear probe on frozen features, overall accuracy.
"""
from __future__ import annotations

import ast
import json
import pickle
import zipfile
from pathlib import Path

import numpy as np

from . import majortom as mt

S2_ORDER = mt.S2L2A_BANDS                     # what both S2 paths of the encoder take (no B10)
S1_ORDER = ("VV", "VH")
EUROSAT_S2_FILE_BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B09", "B10", "B11", "B12", "B8A")
LCZ_FILE_BANDS = ("B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B11", "B12")


def _h5py():
    try:
        import h5py
    except ImportError:
        from iclr26.core.errors import DataError

        raise DataError("reading GEO-Bench samples and Copernicus-Bench LCZ-S2 needs h5py (h5py==3.16.0), "
                        "which this environment lacks") from None
    return h5py


def _tifffile():
    """tifffile, with imagecodecs: tifffile decodes LZW, deflate and the predictors of compressed GeoTIFFs
    only through imagecodecs, so both are required before any file is opened."""
    try:
        import imagecodecs  # noqa: F401
        import tifffile
    except ImportError:
        from iclr26.core.errors import DataError

        raise DataError("reading Copernicus-Bench EuroSAT GeoTIFFs needs tifffile (tifffile==2026.3.3) and "
                        "imagecodecs (imagecodecs==2026.3.6, its LZW / deflate codecs), which this environment "
                        "lacks") from None
    return tifffile


# ----------------------------------------------------------------------------- GEO-Bench metadata pickles
class Stand_in:
    """An inert stand-in for a class of geobench, rasterio or affine named in a GEO-Bench pickle:
    it takes any constructor arguments and keeps its pickled state as attributes."""

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.__dict__["args"] = args
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):   # (state, slots)
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["state"] = state


_STAND_INS: dict[tuple[str, str], type] = {}
_STAND_IN_PACKAGES = ("geobench", "rasterio", "affine")
_BUILT = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
          ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
          ("numpy._core.multiarray", "scalar"), ("datetime", "date"), ("datetime", "datetime"),
          ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("copyreg", "_reconstructor"),
          ("builtins", "object"), ("_codecs", "encode")}   # _codecs.encode: bytes in protocol-2 pickles


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _BUILT:
            import warnings

            with warnings.catch_warnings():   # numpy 2 warns on the numpy.core path that numpy 1 pickles name
                warnings.simplefilter("ignore", DeprecationWarning)
                return super().find_class(module, name)
        if module.split(".")[0] in _STAND_IN_PACKAGES:
            key = (module, name)
            if key not in _STAND_INS:
                _STAND_INS[key] = type(name, (Stand_in,), {"__module__": module})
            return _STAND_INS[key]
        from iclr26.core.errors import DataError

        raise DataError(f"a GEO-Bench pickle names {module}.{name}, which this reader does not load")


def unpickle(data: bytes):
    import io

    return _Unpickler(io.BytesIO(data)).load()


def kind(obj) -> str:
    """The class name a stand-in (or a real object) was pickled as: Sentinel2, Classification, ..."""
    return type(obj).__name__


# ----------------------------------------------------------------------------- GEO-Bench
def s2_code(band_name: str) -> str | None:
    """GEO-Bench's Sentinel-2 band name ("08A - Vegetation Red Edge", "04 - Red") -> "B8A", "B04"."""
    head = band_name.split(" - ", 1)[0].strip()
    if not head[:2].isdigit():
        return None
    return "B8A" if head == "08A" else f"B{head[:2]}"


def read_geobench_sample(path: Path, sensor: str) -> tuple[dict[str, np.ndarray], object]:
    """One sample file as load_sample_hdf5 reads it: {band name: raster} of the bands whose BandInfo
    is `sensor` (Sentinel2 / Sentinel1), and the label (int, or a 0/1 array)."""
    h5py = _h5py()
    with h5py.File(path, "r") as fp:
        attrs = unpickle(ast.literal_eval(fp.attrs["pickle"]))
        order = attrs.get("bands_order", list(fp.keys()))
        bands = {}
        label = attrs.get("label")
        for name in order:
            if name.startswith("label"):
                label = np.array(fp[name])
            elif kind(attrs[name]["band_info"]) == sensor:
                bands[name] = np.array(fp[name])
    return bands, label


def task_dir(root: Path) -> Path:
    """The folder of an unpacked GEO-Bench task (the one holding task_specs.pkl)."""
    hits = sorted(Path(root).rglob("task_specs.pkl"))
    if not hits:
        from iclr26.core.errors import DataError

        raise DataError(f"no GEO-Bench task (task_specs.pkl) under {root}")
    return hits[0].parent


def band_problems(stats: dict, band_map: dict | None = None, names=None) -> list[str]:
    """Plausibility of a task's Sentinel-2 band contents from its band_stats.json means, after
    `band_map` (GEO-Bench name's code -> the band the data really hold): the cirrus band B10, where
    present, has the smallest mean of all bands (1375 nm is absorbed by water vapour: tens in L1C
    reflectance x 10^4), and each SWIR band B11, B12 has a mean of at least a quarter of red B04's.
    Scale-free (So2Sat's and Copernicus-Bench's units differ), so it catches a permutation of the band
    names (m-eurosat's B8A stored last), not a scale. `names`: the Sentinel-2 band names of the task
    (So2Sat's Sentinel-1 names "01 - VH.Real", ... would read as B01, ...). Returns the rules broken."""
    band_map = band_map or {}
    means = {}
    for name, entry in stats.items():
        code = s2_code(name) if names is None or name in names else None
        if code is not None and isinstance(entry, dict) and "mean" in entry:
            means[band_map.get(code, code)] = float(entry["mean"])
    problems = []
    if "B10" in means and means["B10"] > min(means.values()):
        low = min(means, key=means.get)
        problems.append(f"B10 (cirrus) mean {means['B10']:.1f} is not the smallest ({low} {means[low]:.1f})")
    for swir in ("B11", "B12"):
        if swir in means and "B04" in means and means[swir] < 0.25 * means["B04"]:
            problems.append(f"{swir} (SWIR) mean {means[swir]:.1f} < a quarter of B04's {means['B04']:.1f}")
    return problems


def read_geobench_task(root: Path, spec: dict) -> dict[str, np.ndarray]:
    """A GEO-Bench classification task as arrays: `train_x` / `test_x` (N, C, H, W) float32 in the
    encoder's band order and standardised with band_stats.json, `train_y` / `test_y` (class index,
    or (N, n_classes) 0/1 for a multi-label task), `low_idx` (the rows of the training split in the
    task's `low_partition`), `band_check` (the rules band_problems finds broken, "" if none).
    `spec["band_map"]` ({code of GEO-Bench's name: the band the data hold}) corrects a task whose band
    names do not match its data; `spec["band_check"]` "raise" (default) stops on an implausible band
    content, "report" only records it (a task whose contents are known not to fit, printed)."""
    from iclr26.core.errors import DataError

    folder = task_dir(root)
    specs = unpickle((folder / "task_specs.pkl").read_bytes())
    label_type = specs.label_type
    multilabel = kind(label_type) == "MultiLabelClassification"
    if kind(label_type) not in ("Classification", "MultiLabelClassification"):
        raise DataError(f"{folder.name}: label type {kind(label_type)}, not a classification task")
    default = json.loads((folder / "default_partition.json").read_text())
    low = set(json.loads((folder / f"{spec['low_partition']}_partition.json").read_text())["train"])
    stats = json.loads((folder / "band_stats.json").read_text())
    band_map = dict(spec.get("band_map") or {})
    s2_names = set(read_geobench_sample(folder / f"{default['train'][0]}.hdf5", "Sentinel2")[0])
    problems = band_problems(stats, band_map, s2_names)
    if problems and spec.get("band_check", "raise") == "raise":
        raise DataError(f"{folder.name}: band contents do not fit the band names (band_stats.json means, "
                        f"band_map {band_map}): {'; '.join(problems)}")
    if spec["modality"] not in ("s2l1c", "s2l2a"):   # the tasks' S1 bands (So2Sat) are Lee-filtered complex parts
        raise ValueError(f"GEO-Bench tasks are read through an S2 path, got modality {spec['modality']!r}")
    out = {"n_classes": np.array(int(label_type.n_classes)), "multilabel": np.array(multilabel)}
    for split in ("train", "test"):
        xs, ys = [], []
        for name in default[split]:
            bands, label = read_geobench_sample(folder / f"{name}.hdf5", "Sentinel2")
            xs.append(arrange(bands, stats, band_map))
            ys.append(np.asarray(label, np.int64))
        out[f"{split}_x"], out[f"{split}_y"] = np.stack(xs), np.stack(ys)
    out["low_idx"] = np.array([i for i, n in enumerate(default["train"]) if n in low], np.int64)
    if len(out["low_idx"]) != len(low):   # every name of the low-label partition is a default training sample
        raise DataError(f"{folder.name}: {len(low) - len(out['low_idx'])} of the {len(low)} samples of "
                        f"{spec['low_partition']}_partition.json are not in the default training split")
    out["band_check"] = np.array("; ".join(problems))
    return out


def arrange(bands: dict[str, np.ndarray], stats: dict, band_map: dict | None = None) -> np.ndarray:
    """Sentinel-2 bands (by GEO-Bench name) -> (12, H, W) in S2_ORDER, each standardised with its
    band_stats.json entry; a band the sample lacks is zeros (its mean), B10 is dropped. `band_map`
    ({code of the name: the band the data hold}) places a band by its content where the names are wrong."""
    order = S2_ORDER
    band_map = band_map or {}
    size = max(b.shape[0] for b in bands.values())
    out = np.zeros((len(order), size, size), np.float32)
    for name, raster in bands.items():
        key = s2_code(name)
        key = band_map.get(key, key)
        if key in order:
            if raster.shape[0] != size:   # bands at their native resolution: nearest neighbour to the largest
                raster = mt.on_grid([raster, np.zeros((size, size), raster.dtype)], None)[0]
            out[order.index(key)] = (raster.astype(np.float32) - stats[name]["mean"]) / (stats[name]["std"] + 1e-6)
    return out


# ----------------------------------------------------------------------------- Copernicus-Bench
def unzip(archive: Path, dest: Path) -> Path:
    """Unpack a zip once (a marker file records completion); returns dest."""
    done = dest / ".unpacked"
    if not done.exists():
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
        done.write_text(archive.name)
    return dest


def read_eurosat(root: Path, modality: str, split: str) -> tuple[np.ndarray, list[str]]:
    """Copernicus-Bench EuroSAT-S1 / -S2 (torchgeo CopernicusBenchEuroSATS1/S2's layout): images
    (N, C, 64, 64) in the encoder's band order (S1 in dB as stored; S2 without B10) and class names."""
    tifffile = _tifffile()
    lists = sorted(Path(root).rglob(f"eurosat-{split}.txt"))
    if not lists:
        from iclr26.core.errors import DataError

        raise DataError(f"no eurosat-{split}.txt under {root}")
    base = lists[0].parent / "all_imgs"
    file_bands = S1_ORDER if modality == "s1rtc" else EUROSAT_S2_FILE_BANDS
    order = S1_ORDER if modality == "s1rtc" else S2_ORDER
    take = [file_bands.index(b) for b in order]
    xs, names = [], []
    for line in lists[0].read_text().split():
        file = line.strip().replace(".jpg", ".tif")
        cls = file.split("_")[0]
        img = tifffile.imread(base / cls / file)
        if img.ndim == 3 and img.shape[0] != len(file_bands):   # pixel-interleaved GeoTIFF: (H, W, C)
            img = img.transpose(2, 0, 1)
        xs.append(img[take].astype(np.float32))
        names.append(cls)
    return np.stack(xs), names


def read_lcz(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Copernicus-Bench LCZ-S2 (torchgeo CopernicusBenchLCZS2): `sen2` (N, 32, 32, 10) and one-hot
    `label` -> images (N, 12, 32, 32) in the encoder's S2 order (B01, B09 zero) and class indices."""
    h5py = _h5py()
    path = sorted(Path(root).rglob(f"lcz_{split}.h5"))[0]
    with h5py.File(path, "r") as f:
        sen2 = np.asarray(f["sen2"], np.float32)
        y = np.asarray(f["label"]).argmax(1)
    x = np.zeros((len(sen2), len(S2_ORDER), *sen2.shape[1:3]), np.float32)
    for j, b in enumerate(LCZ_FILE_BANDS):
        x[:, S2_ORDER.index(b)] = sen2[..., j]
    x[:, [S2_ORDER.index("B01"), S2_ORDER.index("B09")]] = np.nan   # absent: zero after standardising
    return x, y


def read_copernicus_task(root: Path, spec: dict) -> dict[str, np.ndarray]:
    """A Copernicus-Bench classification task as arrays (train / test), standardised per band with
    the training split's mean and sd; absent bands zero."""
    if spec["reader"] == "eurosat":
        (tr, tr_names), (te, te_names) = (read_eurosat(root, spec["modality"], s) for s in ("train", "test"))
        classes = sorted(set(tr_names))
        y_tr, y_te = (np.array([classes.index(c) for c in n]) for n in (tr_names, te_names))
        n_classes = len(classes)
    elif spec["reader"] == "lcz":
        (tr, y_tr), (te, y_te) = (read_lcz(root, s) for s in ("train", "test"))
        n_classes = int(spec["n_classes"])
    else:
        raise ValueError(f"unknown Copernicus-Bench reader {spec['reader']!r}")
    import warnings

    with warnings.catch_warnings():   # an absent band (all NaN) has no mean: it becomes zero below
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(tr, (0, 2, 3), keepdims=True)
        sd = np.nanstd(tr, (0, 2, 3), keepdims=True) + 1e-6
    std = [np.nan_to_num((x - mean) / sd).astype(np.float32) for x in (tr, te)]
    return {"train_x": std[0], "test_x": std[1], "train_y": y_tr, "test_y": y_te,
            "n_classes": np.array(n_classes), "multilabel": np.array(False), "low_idx": np.arange(len(y_tr))}


# ----------------------------------------------------------------------------- acquire / prepare
def acquire(spec: dict, out: Path, log=print) -> dict:
    """Every benchmark task's files (core.acquire.download_pinned: pinned commit in the URL, sha256 or
    md5 checked), zips unpacked next to them: out/<benchmark>/<task>/."""
    from iclr26.core.acquire import download_pinned

    info = {}
    for bench, tasks in spec.items():
        for task, tspec in tasks.items():
            where = Path(out) / bench / task
            got = []
            for f in tspec["files"]:
                path = where / f["url"].rsplit("/", 1)[1]
                got.append(download_pinned(f, path))
                if path.suffix == ".zip":
                    unzip(path, where)
            log(f"{bench}/{task}: {len(got)} file(s)")
            info[f"{bench}/{task}"] = got
    return info


def prepare(spec: dict, raw: Path, out: Path, log=print) -> dict:
    """Each task as arrays (read_geobench_task / read_copernicus_task) in out/<benchmark>_<task>.npz
    (images stored as float16: standardised values)."""
    from iclr26.core.io import save_arrays

    info = {}
    for bench, tasks in spec.items():
        for task, tspec in tasks.items():
            read = read_geobench_task if bench == "geobench" else read_copernicus_task
            arrays = read(Path(raw) / bench / task, tspec)
            for k in ("train_x", "test_x"):
                arrays[k] = arrays[k].astype(np.float16)
            save_arrays(Path(out) / f"{bench}_{task}.npz", **arrays)
            check = str(arrays.pop("band_check", ""))
            info[f"{bench}/{task}"] = {"train": int(len(arrays["train_y"])), "test": int(len(arrays["test_y"])),
                                       "low": int(len(arrays["low_idx"])), "n_classes": int(arrays["n_classes"]),
                                       **({"band_check": check} if check else {})}
            log(f"{bench}/{task}: {info[f'{bench}/{task}']}")
    return info


# ----------------------------------------------------------------------------- probes
def features(net, x: np.ndarray, modality: str, size: int | None, batch: int = 64) -> np.ndarray:
    """Frozen CLS features, each image resized (bilinear) to size x size px first (None: as is)."""
    import torch
    import torch.nn.functional as F

    net.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            xb = torch.from_numpy(np.asarray(x[i:i + batch], np.float32))
            if size and xb.shape[-1] != size:
                xb = F.interpolate(xb, size=(size, size), mode="bilinear", align_corners=False)
            out.append(net.encoder({modality: xb}).numpy())
    return np.concatenate(out)


def knn_multilabel(train_x, train_y, test_x, k: int, temperature: float) -> np.ndarray:
    """DINO's weighted kNN for multi-label targets: the weighted mean of the neighbours' 0/1 label
    vectors (weights exp(cos / T)), a label predicted where it exceeds 1/2."""
    from sklearn.neighbors import NearestNeighbors

    k = min(k, len(train_x))
    dist, ind = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(train_x).kneighbors(test_x)
    w = np.exp((1 - dist) / temperature)
    score = (w[:, :, None] * train_y[ind]).sum(1) / w.sum(1, keepdims=True)
    return (score > 0.5).astype(np.int64)


def linear_probe(train_x, train_y, test_x, max_iter: int, seed: int) -> np.ndarray:
    """A linear classifier on standardised frozen features (scikit-learn's multinomial logistic
    regression, L2, C = 1)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter, random_state=seed))
    return clf.fit(train_x, train_y).predict(test_x)


def evaluate_task(f_tr: np.ndarray, f_te: np.ndarray, arrays: dict, tspec: dict, ev: dict, seed: int) -> list[dict]:
    """One record per label setting: `score` (top-1 / OA, or micro F1 for a multi-label task), `micro_f1`
    (for a single-label task it equals the accuracy), and `oa` as well where the score is an accuracy."""
    from sklearn.metrics import f1_score

    from . import probe

    y_tr, y_te = arrays["train_y"], arrays["test_y"]
    multilabel, n_cls = bool(arrays["multilabel"]), int(arrays["n_classes"])
    settings = [("full", np.arange(len(y_tr)))]
    if tspec["protocol"] == "knn":
        settings.append(("low", arrays["low_idx"]))
    records = []
    for labels, keep in settings:
        if tspec["protocol"] == "linear":
            pred = linear_probe(f_tr[keep], y_tr[keep], f_te, ev["linear_max_iter"], seed)
        elif multilabel:
            pred = knn_multilabel(f_tr[keep], y_tr[keep], f_te, ev["k"], ev["temperature"])
        else:
            pred = probe.knn_predict(f_tr[keep], y_tr[keep], f_te, ev["k"], ev["temperature"], n_cls)
        f1 = float(f1_score(y_te, pred, average="micro", zero_division=0))
        if multilabel:
            rec = {"score": f1, "score_name": "micro_f1", "micro_f1": f1}
        else:
            acc = float((pred == y_te).mean())
            rec = {"score": acc, "score_name": "top1" if tspec["protocol"] == "knn" else "oa", "oa": acc,
                   "micro_f1": f1}
        records.append({"labels": labels, "n_labels": int(len(keep)), "protocol": tspec["protocol"], **rec})
    return records
