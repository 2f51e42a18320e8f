"""Card 12, TerraFM: the Major-TOM schema the generator writes and the loader reads, the long-tailed
labels, the encoder's fusion, the DINO loss and dual centering, the kNN probe, and the full-scale
path offline (metadata and parts at a pinned revision on a loopback server that honours HTTP
Range, read row group by row group). (The smoke pipeline and resume are tests/test_contract.py's.)"""
import functools
import http.server
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from iclr26.papers.terrafm import majortom as mt
from iclr26.papers.terrafm import model, probe

GEN = {"tile_px": 16, "label_grid": 4, "dominant_share": 0.75, "zipf_exponent": 1.3, "spectral_sep": 0.2,
       "texture_amp": 0.15, "illumination": [0.6, 1.4], "noise": 0.02, "s1_texture_db": 1.5, "s1_offset_db": 1.5,
       "speckle_looks": 4, "atmosphere": 0.06, "cloud_prob": 0.5, "l1c_regions": ["pretrain"],
       "n_cells": {"pretrain": 12, "downstream": 12}}
SPEC = {"data_seed": 0, "n_classes": 11, "chip_px": 8, "train_fraction": 0.5, "generator": GEN}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("majortom")
    mt.write_synthetic(root, GEN, seed=3)
    return root


def test_generator_writes_the_major_tom_schema(raw):
    s2 = pq.read_table(raw / "Core-S2L2A" / "images" / "part_00001.parquet")
    assert s2.column_names == ["product_id", "grid_cell", "product_datetime", "thumbnail", "cloud_mask",
                               *mt.S2L2A_BANDS]
    assert pa.types.is_binary(s2.schema.field("B04").type)
    band = mt.read_tif_bytes(s2.column("B04")[0].as_py())
    assert band.dtype == np.uint16 and band.shape == (16, 16) and band.max() > 100   # reflectance x 10^4
    l1c = pq.read_table(raw / "Core-S2L1C" / "images" / "part_00001.parquet")
    assert "B10" in l1c.column_names and l1c.num_rows == 12                          # pretraining cells only
    assert mt.read_tif_bytes(l1c.column("cloud_mask")[0].as_py()).dtype == np.uint8
    s1 = pq.read_table(raw / "Core-S1RTC" / "images" / "part_00001.parquet")
    vv = mt.read_tif_bytes(s1.column("vv")[0].as_py())
    assert vv.dtype == np.float32 and (vv > 0).all() and vv.max() < 10                # linear backscatter
    assert {"vv", "vh", "grid_cell", "product_datetime"} <= set(s1.column_names)


def test_loader_converts_units_and_resamples_native_resolutions(raw, tmp_path):
    l2a = mt.read_collection(raw, "s2l2a")
    s1 = mt.read_collection(raw, "s1rtc")
    l1c = mt.read_collection(raw, "s2l1c")
    cell = sorted(l1c)[0]
    assert l2a[cell].shape == (12, 16, 16) and l2a[cell].max() <= 1.0               # DN / 10^4
    assert l1c[cell].shape == (12, 16, 16)                                           # B10 dropped
    table = pq.read_table(raw / "Core-S1RTC" / "images" / "part_00001.parquet").to_pylist()
    row = next(r for r in table if r["grid_cell"] == cell)
    np.testing.assert_allclose(s1[cell][0], 10 * np.log10(mt.read_tif_bytes(row["vv"])), rtol=1e-5)
    # Major-TOM keeps 20 m / 60 m bands at native size: the loader puts them on the 10 m grid
    bands = mt.on_grid([np.ones((12, 12), np.uint16), np.full((2, 2), 5, np.uint16)], tile_px=8)
    assert [b.shape for b in bands] == [(8, 8), (8, 8)] and np.allclose(bands[1], 5)


def test_band_tiffs_agree_with_pillow_both_ways():
    """The generator's own TIFF writer and fast reader against Pillow's codec: Pillow reads what we
    write, and we read what Pillow writes (uncompressed: the fast path; deflate: Pillow's path)."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    for a in (rng.integers(0, 10000, (16, 16)).astype(np.uint16), rng.random((7, 5)).astype(np.float32),
              rng.integers(0, 255, (9, 9)).astype(np.uint8)):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(mt.tif_bytes(a)))), a)
        for compression in (None, "tiff_deflate"):
            buf = io.BytesIO()
            Image.fromarray(a).save(buf, format="TIFF", compression=compression)
            back = mt.read_tif_bytes(buf.getvalue())
            assert back.dtype == a.dtype and np.array_equal(back, a)


def test_labels_are_long_tailed():
    p = mt.zipf_probs(11, 1.3)
    assert np.all(np.diff(p) < 0) and p[0] / p[-1] == pytest.approx(11**1.3)
    rng = np.random.default_rng(0)
    dominant = [mt.dominant_code(mt.label_map(rng, GEN, p)) for _ in range(400)]   # class indices
    counts = np.bincount(dominant, minlength=11)
    assert counts[0] > 5 * counts[-5:].mean()


def test_arrays_and_pre_arm_checks(raw):
    arrays = probe.build_arrays(raw, SPEC)
    assert arrays["s2l2a"].shape == (12, 12, 16, 16) and arrays["s1rtc"].shape == (12, 2, 16, 16)
    assert abs(arrays["s2l2a"].mean()) < 1e-4                                        # standardised
    assert len(arrays["train_label"]) + len(arrays["test_label"]) == 12 * 4          # 4 chips per cell
    cfg = {"eval": {"k": 3, "temperature": 0.07, "n_tail": 3}, "data": {"majortom": SPEC}}
    checks = probe.pre_arm_checks(arrays, cfg)
    assert 0 <= checks["raw_s2"]["oa"] <= 1 and checks["head_tail_ratio"] >= 1


CFG = {"model": {"dim": 16, "depth": 1, "heads": 2, "patch": 4, "global_crop": 16, "local_crop": 8,
                 "head_hidden": 16, "head_bottleneck": 8, "prototypes": 10}}


def test_fusion_is_a_convex_combination_of_modality_values():
    torch.manual_seed(0)
    enc = model.build(CFG).encoder
    x = {m: torch.randn(2, c, 16, 16) for m, c in model.CHANNELS.items()}
    assert enc(x).shape == (2, 16) and enc({"s1rtc": x["s1rtc"]}).shape == (2, 16)
    assert enc({"s2l2a": torch.randn(2, 12, 8, 8)}).shape == (2, 16)                 # local crop: interpolated
    # with equal tokens in every modality the fused value equals each one's value
    tokens = torch.randn(2, 16, enc.wide)
    values = torch.stack([enc.proj[0](enc.value(tokens))] * 3, 2)
    keys = torch.stack([enc.key(tokens)] * 3, 2)
    w = torch.softmax((keys * enc.query[None, :, None]).sum(-1) / enc.wide**0.5, dim=2)
    assert torch.allclose(w.sum(2), torch.ones(2, 16))
    assert torch.allclose((w.unsqueeze(-1) * values).sum(2), values[:, :, 0], atol=1e-5)
    # the forward's fusion is a weighted mean over modalities: the order they are given in is irrelevant
    reverse = {m: x[m] for m in reversed(list(x))}
    assert torch.allclose(enc(x), enc(reverse), atol=1e-5)
    assert not torch.allclose(enc(x), enc({"s2l2a": x["s2l2a"]}), atol=1e-3)


def test_encoder_fast_paths_equal_the_torch_modules():
    """The patch embedding as a linear map equals the Conv2d; the blocks run by model.block (and the
    CLS-only last block) equal nn.TransformerEncoder's forward; views batched through the shared
    transformer (forward_views) equal one forward per view."""
    torch.manual_seed(0)
    net = model.build({"model": {**CFG["model"], "depth": 2}})
    enc = net.encoder
    x = torch.randn(3, 12, 16, 16)
    conv = enc.embed["s2l2a"](x).flatten(2).transpose(1, 2)
    assert torch.allclose(enc.patchify("s2l2a", x), conv, atol=1e-5)
    with torch.no_grad():
        for train in (True, False):
            net.train(train)
            for size in (16, 8):
                tokens = enc.tokens({"s2l2a": torch.randn(3, 12, size, size)})
                n = int(tokens.shape[1] ** 0.5)
                pos = enc.pos if n == enc.grid else torch.cat(
                    [enc.pos[:, :1], enc._interpolate(enc.pos[0, 1:], n)[None]], 1)
                h = torch.cat([enc.cls.expand(3, -1, -1), tokens], 1) + pos
                reference = enc.norm(enc.blocks(h))[:, 0]
                assert torch.allclose(enc.trunk(tokens), reference, atol=1e-5)
        net.train()
        views = [{m: torch.randn(4, c, size, size) for m, c in model.CHANNELS.items()} for size in (16, 16, 8)]
        kinds = [["fused"] * 4, ["s1rtc", "s2l2a", "s1rtc", "fused"], ["s2l1c"] * 4]
        batched = model.forward_views(net, views, kinds)
        for v, k, out in zip(views, kinds, batched):
            assert torch.allclose(out, model.forward_view(net, v, k), atol=1e-5)


def test_dino_loss_and_dual_centering():
    s = [torch.randn(4, 10) for _ in range(3)]
    t = [torch.randn(4, 10) for _ in range(2)]
    c = torch.randn(10)
    manual = 0
    for i in range(2):
        p = torch.softmax((t[i] - c) / 0.04, -1)
        for j in range(3):
            if i != j:
                manual = manual + (-p * torch.log_softmax(s[j] / 0.1, -1)).sum(-1).mean()
    assert torch.isclose(model.dino_loss(s, t, c, 0.1, 0.04), manual / 4)
    w = model.class_weights(np.array([0, 0, 0, 1]), 2)
    assert np.allclose(w, [4 / 3, 4 / 3, 4 / 3, 4])                                 # 1 / frequency
    assert model.view_kinds("s2_dino", np.random.default_rng(0), ["s1rtc", "fused"], 4) == ["s2l2a"] * 4
    kinds = model.view_kinds("modality_aug", np.random.default_rng(0), ["s1rtc", "s2l1c", "s2l2a", "fused"], 200)
    assert set(kinds) == {"s1rtc", "s2l1c", "s2l2a", "fused"}                          # drawn per sample
    # a view of mixed modalities: each sample goes through its own modality's path, in batch order
    torch.manual_seed(0)
    net = model.build(CFG)
    crops = {m: torch.randn(4, c, 16, 16) for m, c in model.CHANNELS.items()}
    mixed = model.forward_view(net, crops, ["s1rtc", "fused", "s2l2a", "s1rtc"])
    with torch.no_grad():
        assert torch.allclose(mixed[2], net.head(net.encoder({"s2l2a": crops["s2l2a"][2:3]}))[0], atol=1e-5)
        assert torch.allclose(mixed[1], net.head(net.encoder({m: crops[m][1:2] for m in model.MODALITIES}))[0],
                              atol=1e-5)


def test_knn_weighted_vote_and_tail_classes():
    train = np.array([[1, 0], [1, 0.1], [0, 1]], float)
    pred = probe.knn_predict(train, np.array([0, 0, 1]), np.array([[0.1, 1.0], [1.0, 0.0]]), k=1, temperature=0.07,
                             n_classes=2)
    assert list(pred) == [1, 0]
    # against a plain reference: per test point, the k most cosine-similar train points vote exp(sim / T)
    rng = np.random.default_rng(0)
    tr, te, y = rng.normal(size=(40, 6)), rng.normal(size=(15, 6)), rng.integers(0, 3, 40)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)   # noqa: E731
    expected = []
    for sim in unit(te) @ unit(tr).T:
        near = np.argsort(-sim)[:5]
        expected.append(np.bincount(y[near], weights=np.exp(sim[near] / 0.07), minlength=3).argmax())
    assert list(probe.knn_predict(tr, y, te, 5, 0.07, 3)) == expected
    assert probe.tail_classes(np.array([0, 0, 0, 1, 1, 2]), 4, 2) == [3, 2]
    sc = probe.scores(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 0]), [1, 2])
    assert sc["oa"] == 0.5 and sc["tail_acc"] == 0.5
    assert sc["balanced_acc"] == (0.5 + 1 + 0) / 3   # mean recall over the classes present in y_true


# ----------------------------------------------------------------------------- full-scale path offline
class RangeHandler(http.server.SimpleHTTPRequestHandler):
    served = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        rng = self.headers.get("Range")
        if not rng:
            return super().do_GET()
        path = self.translate_path(self.path)
        data = open(path, "rb").read()
        lo, hi = (int(v) for v in rng.split("=")[1].split("-"))
        chunk = data[lo:hi + 1]
        RangeHandler.served.append(len(chunk))
        self.send_response(206)
        self.send_header("Content-Length", str(len(chunk)))
        self.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
        self.end_headers()
        self.wfile.write(chunk)


def test_full_scale_acquire_reads_pinned_rows_by_range(raw, tmp_path):
    rev = "0123456789abcdef0123456789abcdef01234567"
    served = tmp_path / "served"
    for coll in mt.COLLECTIONS.values():
        base = served / "datasets" / "Major-TOM" / coll / "resolve" / rev
        (base / "images").mkdir(parents=True)
        table = pq.read_table(raw / coll / "images" / "part_00001.parquet")
        pq.write_table(table, base / "images" / "part_00001.parquet", row_group_size=2)   # two patches per group
        cells = table.column("grid_cell").to_pylist()
        # Major-TOM's parquet_row is a row-group index (its helper calls read_row_group(parquet_row))
        meta = [{"grid_cell": c, "parquet_row": i // 2, "parquet_url":
                 f"https://huggingface.co/datasets/Major-TOM/{coll}/resolve/main/images/part_00001.parquet"}
                for i, c in enumerate(cells)]
        pq.write_table(pa.Table.from_pylist(meta), base / "metadata.parquet")
    wc = tmp_path / "wc"
    wc.mkdir()
    pq.write_table(pq.read_table(raw / "worldcover" / "labels.parquet"), wc / "labels.parquet")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(served)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        spec = {"endpoint": f"http://127.0.0.1:{httpd.server_address[1]}", "worldcover_dir": str(wc),
                "n_cells_total": 5, "salt": "t",
                "hub": {k: {"hub_id": f"Major-TOM/{c}", "revision": rev, "file": "metadata.parquet"}
                        for k, c in mt.COLLECTIONS.items()}}
        out = tmp_path / "raw"
        RangeHandler.served.clear()
        info = mt.acquire_hub(spec, out, log=lambda *a: None)
    finally:
        httpd.shutdown()
    assert info["cells"] == 5 and all(info[k]["cells"] == 5 for k in mt.COLLECTIONS)
    part = served / "datasets" / "Major-TOM" / "Core-S2L2A" / "resolve" / rev / "images" / "part_00001.parquet"
    assert max(RangeHandler.served) < part.stat().st_size / 2                        # row groups, not the part
    got = mt.read_collection(out, "s2l2a")
    want = mt.read_collection(raw, "s2l2a", set(got))
    assert set(got) == set(want) and all(np.array_equal(got[c], want[c]) for c in got)
    assert len(mt.read_labels(out)) == 5


def test_full_scale_acquire_names_the_missing_worldcover_table(tmp_path):
    from iclr26.core.errors import DataError

    with pytest.raises(DataError, match="WorldCover"):
        mt.acquire_hub({"worldcover_dir": str(tmp_path / "none"), "hub": {}}, tmp_path)


def test_a_metadata_row_that_misnames_its_row_group_is_one_error(raw, tmp_path, workdir):
    """Major-TOM's metadata names a row group per grid cell; a group that does not exist, or one that
    does not hold the cell, stops the acquire with the cell and the URL named."""
    from iclr26.core.errors import DataError
    from iclr26.core.job import run_paper

    coll = mt.COLLECTIONS["s2l2a"]
    table = pq.read_table(raw / coll / "images" / "part_00001.parquet")
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=2)
    first = table.column("grid_cell").to_pylist()[0]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/part.parquet"
    try:
        with pytest.raises(DataError, match=rf"parquet_row 999 of {first} is not a row group"):
            list(mt.read_cells_ranged(url, {first: 999}))
        with pytest.raises(DataError, match=rf"row group 1 does not hold grid cell {first}"):
            list(mt.read_cells_ranged(url, {first: 1}))
    finally:
        httpd.shutdown()
    with pytest.raises(ValueError, match=r"config key 'data.majortom.source' = 'ftp' is not allowed: one of "
                                         r"synthetic, hub"):   # a ConfigError when composed, before acquire
        run_paper("terrafm", "smoke", ["data.majortom.source=ftp"], seeds=[0])


def test_modality_arm_loss_falls_with_the_configured_recipe(raw):
    """Audit B1, smoke-sized: the tiny config's model and DINO recipe, on the fixture's 12 tiles
    with 20 steps of batch 12: the dual_center arm's loss falls over its first steps and the centre
    diagnostics come back. (Whether the full tiny run trained is the table's precondition.)"""
    from pathlib import Path

    from omegaconf import OmegaConf

    base = Path(__file__).parents[2] / "config" / "hydra" / "paper" / "terrafm.yaml"   # tiny changes none of it
    cfg = OmegaConf.to_container(OmegaConf.load(base), resolve=True)
    cfg["train"].update(steps=20, batch_size=12)
    arrays = probe.build_arrays(raw, SPEC)
    data = {k: arrays[k] for k in model.MODALITIES}
    data["label"] = arrays["label"]
    out = model.pretrain(cfg, data, "dual_center", seed=100, log=lambda *a: None)
    curve = np.asarray(out["curve"])
    assert np.isfinite(curve).all() and curve[-5:].mean() < 0.8 * curve[:5].mean()
    assert out["center_gap"] >= 0 and out["dual_kl"] >= 0


# ----------------------------------------------------------------------------- full-scale benchmarks offline
S2_13 = ("01 - Coastal aerosol", "02 - Blue", "03 - Green", "04 - Red", "05 - Vegetation Red Edge",
         "06 - Vegetation Red Edge", "07 - Vegetation Red Edge", "08 - NIR", "08A - Vegetation Red Edge",
         "09 - Water vapour", "10 - SWIR - Cirrus", "11 - SWIR", "12 - SWIR")


@pytest.fixture
def geobench_classes(monkeypatch):
    """Classes in the modules GEO-Bench's pickles name (geobench.dataset / label / task, affine,
    rasterio.crs), so that this test writes sample files as geobench's write_sample_hdf5 does."""
    import sys
    import types

    made = {}
    for module, names in {"geobench.dataset": ("Sentinel2", "Sentinel1"),
                          "geobench.label": ("Classification", "MultiLabelClassification"),
                          "geobench.task": ("TaskSpecifications",), "affine": ("Affine",),
                          "rasterio.crs": ("CRS",)}.items():
        mod = types.ModuleType(module)
        for name in names:
            cls = type(name, (), {"__module__": module,
                                  "__init__": lambda self, **kw: self.__dict__.update(kw)})
            setattr(mod, name, cls)
            made[name] = cls
        monkeypatch.setitem(sys.modules, module, mod)
    for parent in ("geobench", "rasterio"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    return made


def _geobench_task(folder, classes, n, n_classes, multilabel, rng):
    """A GEO-Bench task folder in the released layout: <name>.hdf5 per sample (one dataset per band,
    attrs['pickle'] = str(pickle.dumps(...)) with BandInfo, date, transform, crs, bands_order, label),
    task_specs.pkl, band_stats.json, default and 0.01x_train partitions. Class c brightens band c."""
    import datetime
    import json
    import pickle

    import h5py
    folder.mkdir(parents=True)
    names, labels = [], []
    for i in range(n):
        y = rng.integers(0, 2, n_classes) if multilabel else int(i % n_classes)
        hot = np.flatnonzero(y) if multilabel else [y]
        name = f"sample_{i:03d}"
        attrs, order = {}, []
        with h5py.File(folder / f"{name}.hdf5", "w") as fp:
            for b, band in enumerate(S2_13):
                data = rng.normal(1000, 20, (8, 8)) + 400 * (b in hot)
                fp.create_dataset(band, data=data.astype(np.int16))
                attrs[band] = {"date": datetime.date(2018, 5, 1), "date_id": None, "spatial_resolution": 10,
                               "band_info": classes["Sentinel2"](name=band, alt_names=(), spatial_resolution=10,
                                                                 wavelength=0.5),
                               "meta_info": None, "transform": classes["Affine"](a=10.0),
                               "crs": classes["CRS"](wkt="X")}
                order.append(band)
            attrs["bands_order"] = order
            attrs["label"] = np.asarray(y, np.int64) if multilabel else y
            fp.attrs["pickle"] = str(pickle.dumps(attrs, protocol=4))
        names.append(name)
        labels.append(y)
    label_type = (classes["MultiLabelClassification"] if multilabel else classes["Classification"])(n_classes=n_classes)
    specs = classes["TaskSpecifications"](dataset_name=folder.name, label_type=label_type, bands_info=[])
    (folder / "task_specs.pkl").write_bytes(pickle.dumps(specs, protocol=4))
    (folder / "band_stats.json").write_text(json.dumps({b: {"mean": 1100.0, "std": 200.0, "min": 0, "max": 2000}
                                                        for b in S2_13}))
    train, test = names[: n * 2 // 3], names[n * 2 // 3:]
    (folder / "default_partition.json").write_text(json.dumps({"train": train, "valid": [], "test": test}))
    (folder / "0.01x_train_partition.json").write_text(json.dumps({"train": train[:3], "valid": [], "test": test}))
    return labels


def _zip(folder, dest):
    import zipfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as z:
        for f in sorted(folder.rglob("*")):
            z.write(f, f.relative_to(folder.parent))


def test_benchmarks_acquire_read_and_probe_offline(static_server, geobench_classes, tmp_path):
    """GEO-Bench zips and Copernicus-Bench files in their released layouts, served at a pinned commit:
    acquire checks their digests and unpacks them, prepare reads them into the encoder's band order,
    and the kNN / linear probes score them (class-separable bands: a probe well above chance)."""
    import hashlib

    import h5py
    import tifffile

    from iclr26.core.errors import DataError
    from iclr26.papers.terrafm import benchmarks as bm
    served, base = static_server
    rev = "0123456789abcdef0123456789abcdef01234567"
    rng = np.random.default_rng(0)
    src = tmp_path / "src"
    eurosat_y = _geobench_task(src / "m-eurosat", geobench_classes, 30, 3, False, rng)
    _geobench_task(src / "m-bigearthnet", geobench_classes, 30, 4, True, rng)
    for task in ("m-eurosat", "m-bigearthnet"):
        _zip(src / task, served / "geo" / rev / "classification_v1.0" / f"{task}.zip")
    # Copernicus-Bench EuroSAT-S2: 13-band pixel-interleaved GeoTIFFs, B8A stored last
    cls_names = ("Forest", "River", "SeaLake")
    root = src / "cb" / "eurosat_s2"
    for split, count in (("train", 18), ("val", 3), ("test", 9)):
        lines = []
        for i in range(count):
            c = cls_names[i % 3]
            img = rng.normal(1000, 20, (8, 8, 13)) + 500 * (np.arange(13) == i % 3)
            img[..., 12] = 7000                                   # B8A, the file's last band
            path = root / "all_imgs" / c / f"{c}_{split}{i}.tif"
            path.parent.mkdir(parents=True, exist_ok=True)
            tifffile.imwrite(path, img.astype(np.uint16))
            lines.append(f"{c}_{split}{i}.jpg")
        (root / f"eurosat-{split}.txt").write_text("\n".join(lines) + "\n")
    _zip(root, served / "cb" / rev / "l2_eurosat_s1s2" / "eurosat_s2.zip")
    lcz = served / "cb" / rev / "l3_lcz_s2"
    lcz.mkdir(parents=True)
    for split, count in (("train", 20), ("test", 10)):
        y = np.arange(count) % 4
        with h5py.File(lcz / f"lcz_{split}.h5", "w") as f:
            f["sen2"] = (rng.normal(0.1, 0.01, (count, 8, 8, 10)) + 0.2 * (np.arange(10) == y[:, None, None, None]))
            f["label"] = np.eye(17)[y]

    def pin(path, digest="sha256"):
        h = hashlib.new(digest, path.read_bytes()).hexdigest()
        return {"url": f"{base}/{path.relative_to(served).as_posix()}", digest: h}

    eurosat_zip = served / "cb" / rev / "l2_eurosat_s1s2" / "eurosat_s2.zip"
    spec = {"geobench": {t: {"modality": "s2l1c", "protocol": "knn", "low_partition": "0.01x_train",
                             "files": [pin(served / "geo" / rev / "classification_v1.0" / f"{t}.zip")]}
                         for t in ("m-eurosat", "m-bigearthnet")},
            "copernicus": {"eurosat_s2": {"modality": "s2l1c", "protocol": "linear", "reader": "eurosat",
                                          "files": [pin(eurosat_zip, "md5")]},
                           "lcz_s2": {"modality": "s2l1c", "protocol": "linear", "reader": "lcz", "n_classes": 17,
                                      "files": [pin(lcz / f"lcz_{s}.h5", "md5") for s in ("train", "test")]}}}
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    info = bm.acquire(spec, raw, log=lambda *a: None)
    assert set(info) == {"geobench/m-eurosat", "geobench/m-bigearthnet", "copernicus/eurosat_s2", "copernicus/lcz_s2"}
    bad = {"x": {"t": {"files": [{**spec["copernicus"]["lcz_s2"]["files"][0], "md5": "0" * 32}]}}}
    with pytest.raises(DataError, match="md5 mismatch"):
        bm.acquire(bad, tmp_path / "bad", log=lambda *a: None)
    bm.prepare(spec, raw, prepared, log=lambda *a: None)

    from iclr26.core.io import load_arrays

    geo = load_arrays(prepared / "geobench_m-eurosat.npz")
    assert geo["train_x"].shape == (20, 12, 8, 8) and len(geo["test_y"]) == 10 and list(geo["low_idx"]) == [0, 1, 2]
    assert list(geo["train_y"]) == eurosat_y[:20] and int(geo["n_classes"]) == 3
    # class 0 brightens "01 - Coastal aerosol" (S2_ORDER index 0); band_stats standardisation: (1400 - 1100) / 200
    assert geo["train_x"][0, 0].mean() == pytest.approx(1.5, abs=0.1) and abs(geo["train_x"][1, 0].mean() + 0.5) < 0.1
    ben = load_arrays(prepared / "geobench_m-bigearthnet.npz")
    assert bool(ben["multilabel"]) and ben["train_y"].shape == (20, 4)
    eu = load_arrays(prepared / "copernicus_eurosat_s2.npz")
    assert eu["train_x"].shape == (18, 12, 8, 8)
    # the file's last band (B8A, constant 7000) is the encoder's 9th S2 band (after B08): zero once standardised
    assert np.allclose(eu["train_x"][:, bm.S2_ORDER.index("B8A")], 0, atol=1e-2)
    lz = load_arrays(prepared / "copernicus_lcz_s2.npz")
    assert lz["train_x"].shape == (20, 12, 8, 8) and np.all(lz["train_x"][:, 0] == 0)          # B01 absent
    ev = {"k": 3, "temperature": 0.07, "linear_max_iter": 200}
    for name, task, tspec in (("geobench", "m-eurosat", spec["geobench"]["m-eurosat"]),
                              ("geobench", "m-bigearthnet", spec["geobench"]["m-bigearthnet"]),
                              ("copernicus", "eurosat_s2", spec["copernicus"]["eurosat_s2"]),
                              ("copernicus", "lcz_s2", spec["copernicus"]["lcz_s2"])):
        arrays = load_arrays(prepared / f"{name}_{task}.npz")
        f_tr, f_te = (probe.raw_features(arrays[k].astype(np.float32)) for k in ("train_x", "test_x"))
        recs = bm.evaluate_task(f_tr, f_te, arrays, tspec, ev, seed=0)
        assert [r["labels"] for r in recs] == (["full", "low"] if tspec["protocol"] == "knn" else ["full"])
        assert recs[0]["score"] > 0.8, (task, recs)                                      # separable: well above chance
        assert ("oa" in recs[0]) == (task != "m-bigearthnet")
        assert recs[0]["micro_f1"] == pytest.approx(recs[0]["score"])
    # the frozen-encoder path: resized to the encoder's input, one CLS vector per image
    torch.manual_seed(0)
    net = model.build(CFG)
    assert bm.features(net, geo["test_x"], "s2l1c", 16).shape == (10, 16)


def test_geobench_unpickler_builds_data_and_refuses_other_code():
    import os
    import pickle

    from iclr26.core.errors import DataError
    from iclr26.papers.terrafm import benchmarks as bm

    got = bm.unpickle(pickle.dumps({"label": np.arange(3, dtype=np.int64), "x": np.float64(2.5)}))
    assert list(got["label"]) == [0, 1, 2] and got["x"] == 2.5
    # the released files were pickled by numpy 1 (numpy.core.multiarray), this environment has numpy 2
    old = pickle.dumps(np.arange(3, dtype=np.int64), protocol=2).replace(b"numpy._core.", b"numpy.core.")
    assert list(bm.unpickle(old)) == [0, 1, 2]
    with pytest.raises(DataError, match="posix.system|os.system"):
        bm.unpickle(pickle.dumps(os.system))
    assert bm.s2_code("08A - Vegetation Red Edge") == "B8A" and bm.s2_code("10 - SWIR - Cirrus") == "B10"


def test_stages_evaluate_benchmarks_with_the_frozen_encoders(static_server, geobench_classes, workdir):
    """The stages with data.majortom.benchmarks set (the full scale's key) on the smoke pipeline: acquire
    fetches the task files, prepare reads them, evaluate adds one record per task, seed and label
    setting, from the same frozen encoder (and the raw-statistics row), beside the Major-TOM records."""
    import hashlib
    import json

    import h5py

    from iclr26.core.job import run_paper
    served, base = static_server
    rng = np.random.default_rng(1)
    _geobench_task(workdir / "src" / "m-eurosat", geobench_classes, 24, 3, False, rng)
    _zip(workdir / "src" / "m-eurosat", served / "m-eurosat.zip")
    for split, count in (("train", 16), ("test", 8)):
        y = np.arange(count) % 4
        with h5py.File(served / f"lcz_{split}.h5", "w") as f:
            f["sen2"] = rng.normal(0.1, 0.01, (count, 8, 8, 10)) + 0.2 * (np.arange(10) == y[:, None, None, None])
            f["label"] = np.eye(17)[y]

    def pin(name, digest):
        return f"{{url:'{base}/{name}',{digest}:{hashlib.new(digest, (served / name).read_bytes()).hexdigest()}}}"

    bench = ("+data.majortom.benchmarks={geobench:{m-eurosat:{modality:s2l1c,protocol:knn,low_partition:0.01x_train,"
             f"files:[{pin('m-eurosat.zip', 'sha256')}]}}}},copernicus:{{lcz_s2:{{modality:s2l1c,protocol:linear,"
             f"reader:lcz,n_classes:17,files:[{pin('lcz_train.h5', 'md5')},{pin('lcz_test.h5', 'md5')}]}}}}}}")
    evals = run_paper("terrafm", "smoke", [bench, "+eval.benchmark_px=16", "+eval.linear_max_iter=100"],
                      methods=["raw_stats", "dual_center"])
    for path in evals:
        records = json.loads(path.read_text())["records"]
        rows = [r for r in records if r.get("benchmark")]
        seeds = {r["seed"] for r in records if r.get("modality")}
        assert sorted((r["task"], r["labels"], r["seed"]) for r in rows) == sorted(
            [("m-eurosat", lab, s) for lab in ("full", "low") for s in seeds] + [("lcz_s2", "full", s) for s in seeds])
        assert all(0 <= r["score"] <= 1 and r["score_name"] in ("top1", "oa") for r in rows)
        assert all(r["micro_f1"] == pytest.approx(r["oa"]) for r in records)   # single-label: micro F1 = accuracy
        assert not any("modality" in r for r in rows)         # the Major-TOM table's filters never pick them up


# ----------------------------------------------------------------------------- real-release forms (audit 12d)
# m-eurosat as released: GEO-Bench names tif band i sentinel2_13_bands[i], but EuroSAT's tifs store
# B01..B12 with B8A last, so the band *named* S2_13[i] holds EUROSAT_STORED[i].
EUROSAT_STORED = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B09", "B10", "B11", "B12", "B8A")
# per-band means of the data (Galileo's m-eurosat statistics, rounded, by the band they really are)
EUROSAT_LEVEL = {"B01": 1357, "B02": 1123, "B03": 1057, "B04": 959, "B05": 1227, "B06": 2077, "B07": 2463,
                 "B08": 2390, "B09": 762, "B10": 12, "B11": 1861, "B12": 1139, "B8A": 2700}
HOT = ("B11", "B8A", "B09")   # class c brightens the band that really is HOT[c]
M_EUROSAT_MAP = {"B8A": "B09", "B09": "B10", "B10": "B11", "B11": "B12", "B12": "B8A"}


def _real_pickle_classes(monkeypatch, classes):
    """affine.Affine as the real one pickles (a tuple subclass: NEWOBJ with positional a..f), and
    rasterio's CRS through __getstate__ / BUILD, in place of the fixture's keyword classes."""
    import collections
    import sys

    class Affine(collections.namedtuple("Affine", "a b c d e f g h i")):
        def __new__(cls, a, b, c, d, e, f):
            return super().__new__(cls, a, b, c, d, e, f, 0.0, 0.0, 1.0)

        def __getnewargs__(self):
            return tuple(self[:6])

    class CRS:
        def __init__(self, wkt):
            self._wkt = wkt

        def __getstate__(self):
            return {"wkt": self._wkt}

        def __setstate__(self, state):
            self._wkt = state["wkt"]

    Affine.__module__, Affine.__qualname__ = "affine", "Affine"
    CRS.__module__, CRS.__qualname__ = "rasterio.crs", "CRS"
    monkeypatch.setattr(sys.modules["affine"], "Affine", Affine, raising=False)
    monkeypatch.setattr(sys.modules["rasterio.crs"], "CRS", CRS, raising=False)
    return {**classes, "Affine": Affine, "CRS": CRS}


def _released_task(folder, classes, n, stored, level, hot, s1_names=(), low_extra=()):
    """A GEO-Bench task whose band named S2_13[i] holds band stored[i] (level[band] + 400 where the
    sample's class brightens it) and whose band_stats.json was computed from the data, as the release's
    is; Sentinel-1 bands (s1_names) beside them; pickles in the real NEWOBJ forms."""
    import datetime
    import json
    import pickle

    import h5py
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    names = []
    stats = {}
    s2_names = [b for b in S2_13 if stored[S2_13.index(b)] is not None]
    for i in range(n):
        y = i % len(hot)
        name = f"s_{i:03d}"
        attrs, order = {}, []
        with h5py.File(folder / f"{name}.hdf5", "w") as fp:
            for band in [*s2_names, *s1_names]:
                if band in s1_names:
                    data, info = rng.normal(0, 1, (8, 8)) + 1e3, classes["Sentinel1"](name=band)
                    stats[band] = {"mean": 1e6 if band.startswith("04") else 0.0, "std": 1.0}
                else:
                    real = stored[S2_13.index(band)]
                    data = rng.normal(level[real], 20, (8, 8)) + 400 * (real == hot[y])
                    info = classes["Sentinel2"](name=band, alt_names=(), spatial_resolution=10, wavelength=0.5)
                    stats[band] = {"mean": float(level[real]), "std": 200.0}
                fp.create_dataset(band, data=data.astype(np.float32))
                attrs[band] = {"date": datetime.date(2018, 5, 1), "band_info": info,
                               "transform": classes["Affine"](10.0, 0.0, 500000.0, 0.0, -10.0, 4000000.0),
                               "crs": classes["CRS"]("EPSG:32631")}
                order.append(band)
            attrs["bands_order"] = order
            attrs["label"] = y
            fp.attrs["pickle"] = str(pickle.dumps(attrs, protocol=4))
        names.append(name)
    label_type = classes["Classification"](n_classes=len(hot))
    specs = classes["TaskSpecifications"](dataset_name=folder.name, label_type=label_type)
    (folder / "task_specs.pkl").write_bytes(pickle.dumps(specs, protocol=4))
    (folder / "band_stats.json").write_text(json.dumps(stats))
    train, test = names[: n * 2 // 3], names[n * 2 // 3:]
    (folder / "default_partition.json").write_text(json.dumps({"train": train, "valid": [], "test": test}))
    low = [*train[:3], *low_extra]
    (folder / "0.01x_train_partition.json").write_text(json.dumps({"train": low, "valid": [], "test": test}))


def test_m_eurosat_in_the_released_band_order_is_remapped_or_refused(geobench_classes, monkeypatch, tmp_path):
    """m-eurosat as released (band names shifted against the data, B8A stored last): without the
    band_map prepare stops on the band means, with it each band reaches its own slot; the pickles use
    the real NEWOBJ forms; a 1% partition naming a sample outside the training split is an error."""
    from iclr26.core.errors import DataError
    from iclr26.papers.terrafm import benchmarks as bm

    classes = _real_pickle_classes(monkeypatch, geobench_classes)
    _released_task(tmp_path / "m-eurosat", classes, 18, EUROSAT_STORED, EUROSAT_LEVEL, HOT)
    spec = {"modality": "s2l1c", "protocol": "knn", "low_partition": "0.01x_train"}
    with pytest.raises(DataError, match="B10 .cirrus. mean 1861"):
        bm.read_geobench_task(tmp_path / "m-eurosat", spec)
    wrong = bm.read_geobench_task(tmp_path / "m-eurosat", {**spec, "band_check": "report"})
    assert "B10" in str(wrong["band_check"])
    got = bm.read_geobench_task(tmp_path / "m-eurosat", {**spec, "band_map": M_EUROSAT_MAP})
    assert str(got["band_check"]) == ""
    for c, band in enumerate(HOT):   # class c's bright band sits in the slot of the band it really is
        rows = got["train_x"][got["train_y"] == c]
        slot_means = rows.mean((0, 2, 3))
        assert slot_means[bm.S2_ORDER.index(band)] == pytest.approx(2.0, abs=0.3), (band, slot_means)
        assert np.abs(np.delete(slot_means, bm.S2_ORDER.index(band))).max() < 0.3
        # read by the names alone, the bright band lands elsewhere (B11's content is dropped as "B10")
        assert wrong["train_x"][wrong["train_y"] == c].mean((0, 2, 3))[bm.S2_ORDER.index(band)] < 0.3
    _released_task(tmp_path / "bad", classes, 9, EUROSAT_STORED, EUROSAT_LEVEL, HOT, low_extra=("s_008",))
    with pytest.raises(DataError, match="1 of the 4 samples"):
        bm.read_geobench_task(tmp_path / "bad", {**spec, "band_map": M_EUROSAT_MAP})


def test_so2sat_sentinel1_bands_stay_out_of_the_s2_slots(geobench_classes, monkeypatch, tmp_path):
    """m-so2sat holds 8 Sentinel-1 bands ("01 - VH.Real", ...) beside 10 Sentinel-2 bands (no B01,
    B09, B10): only the Sentinel2 band_info reaches the S2 slots (B01, B09 zero), and the S1 names are
    not read as B01..B08 by the band check (a "04 - ..." S1 mean of 1e6 would break its SWIR rule)."""
    from iclr26.papers.terrafm import benchmarks as bm

    classes = _real_pickle_classes(monkeypatch, geobench_classes)
    s1 = ("01 - VH.Real", "02 - VH.Imaginary", "03 - VV.Real", "04 - VV.Imaginary", "05 - VH.LEE Filtered",
          "06 - VV.LEE Filtered", "07 - VH.LEE Filtered.Real", "08 - VV.LEE Filtered.Imaginary")
    stored = tuple(None if b[:3] in ("01 ", "09 ", "10 ") else bm.s2_code(b) for b in S2_13)
    level = {b: 0.1 + 0.01 * i for i, b in enumerate(EUROSAT_LEVEL)}          # float reflectance
    _released_task(tmp_path / "m-so2sat", classes, 12, stored, level, ("B04", "B08", "B12"), s1_names=s1)
    got = bm.read_geobench_task(tmp_path / "m-so2sat", {"modality": "s2l1c", "protocol": "knn",
                                                        "low_partition": "0.01x_train"})
    x = got["train_x"]
    assert x.shape == (8, 12, 8, 8) and str(got["band_check"]) == ""
    assert np.all(x[:, bm.S2_ORDER.index("B01")] == 0) and np.all(x[:, bm.S2_ORDER.index("B09")] == 0)
    assert np.abs(x).max() < 10                                                   # no S1 raster (1e3) in a slot
    assert x[got["train_y"] == 1].mean((0, 2, 3))[bm.S2_ORDER.index("B08")] == pytest.approx(2.0, abs=0.3)


def test_eurosat_geotiffs_compressed_planar_and_s1(tmp_path):
    """Copernicus-Bench EuroSAT GeoTIFFs as a release may write them: S2 uint16, LZW with the
    horizontal predictor, pixel-interleaved; S1 float32 dB, deflate with the float predictor, one
    planar (C, H, W) file: read_eurosat decodes them (imagecodecs) into the encoder's band order, and the
    S1 path of the frozen encoder takes them."""
    import imagecodecs  # noqa: F401  (pinned: the compressed files need it, so its absence fails)
    import tifffile

    from iclr26.papers.terrafm import benchmarks as bm
    rng = np.random.default_rng(2)
    want = {}
    for mod, bands in (("s2", 13), ("s1", 2)):
        root = tmp_path / f"eurosat_{mod}"
        lines = []
        for i in range(4):
            c = ("Forest", "River")[i % 2]
            path = root / "all_imgs" / c / f"{c}_{i}.tif"
            path.parent.mkdir(parents=True, exist_ok=True)
            if mod == "s2":
                img = rng.integers(0, 4000, (8, 8, bands)).astype(np.uint16)
                tifffile.imwrite(path, img, compression="lzw", predictor=2, photometric="minisblack",
                                 planarconfig="contig")
            else:
                img = rng.normal(-15, 3, (8, 8, bands)).astype(np.float32)
                if i == 0:   # planar
                    tifffile.imwrite(path, img.transpose(2, 0, 1), compression="zlib", predictor=3,
                                     photometric="minisblack", planarconfig="separate")
                else:
                    tifffile.imwrite(path, img, compression="zlib", predictor=3, photometric="minisblack",
                                     planarconfig="contig")
            assert tifffile.TiffFile(path).pages[0].compression in (5, 8)        # LZW, deflate
            want[(mod, i)] = img.transpose(2, 0, 1)
            lines.append(f"{c}_{i}.jpg")
        (root / "eurosat-train.txt").write_text("\n".join(lines))
    x2, names = bm.read_eurosat(tmp_path / "eurosat_s2", "s2l1c", "train")
    take = [bm.EUROSAT_S2_FILE_BANDS.index(b) for b in bm.S2_ORDER]
    assert names == ["Forest", "River"] * 2 and x2.shape == (4, 12, 8, 8)
    assert np.array_equal(x2[1], want[("s2", 1)][take])
    assert np.array_equal(x2[:, bm.S2_ORDER.index("B8A")], np.stack([want[("s2", i)][12] for i in range(4)]))
    x1, _ = bm.read_eurosat(tmp_path / "eurosat_s1", "s1rtc", "train")
    assert x1.shape == (4, 2, 8, 8) and all(np.array_equal(x1[i], want[("s1", i)]) for i in range(4))
    torch.manual_seed(0)
    assert bm.features(model.build(CFG), x1, "s1rtc", 16).shape == (4, 16)


def test_band_check_reads_brick_kiln_statistics_as_not_fitting():
    """The check on the published means (Galileo's tables, from band_stats.json): m-eurosat fits
    only after its band_map, m-bigearthnet and m-so2sat fit by their names, m-brick-kiln fits no map."""
    from iclr26.papers.terrafm import benchmarks as bm

    def stats(means):
        return {name: {"mean": m, "std": 1.0} for name, m in zip(S2_13, means) if m is not None}

    eurosat = stats([1357, 1123, 1057, 959, 1227, 2077, 2463, 2390, 762, 12.3, 1861, 1139, 2700])
    assert bm.band_problems(eurosat) and not bm.band_problems(eurosat, M_EUROSAT_MAP)
    assert not bm.band_problems(stats([387, 489, 715, 738, 1114, 1910, 2191, 2334, 2393, 2367, None, 1903, 1261]))
    assert not bm.band_problems(stats([None, 1295, 1173, 1137, 1269, 1692, 1908, 1838, 2052, None, None, 1763, 1287]))
    brick = bm.band_problems(stats([575, 674, 886, 815, 1129, 1934, 2046, 2013, 1609, 1130, 83, 91, 69]))
    assert len(brick) == 3      # cirrus not the smallest; both SWIR bands below a quarter of red


def test_full_scale_config_speaks_of_its_own_scale_and_reads_the_benchmarks():
    """At full scale no note, claim or reported row carries the tiny scale's words or numbers, the
    Copernicus-Bench protocol is nowhere called fine-tuning, the benchmark claims read the benchmark
    records (m-BigEarthNet by micro F1), and the paper's numbers sit under the benchmark columns' names."""
    from iclr26.core.config import compose_job_config

    full = compose_job_config("terrafm", "full")
    texts = [*full["table"]["notes"], *(str(v) for c in full["claims"] for k, v in c.items()
                                       if k in ("claim", "paper", "note")), str(full["reported"]),
             *(d["what"] if isinstance(d, dict) else d for d in full["deviations"])]
    for word in ("mini-Major-TOM", "TerraFM-tiny", "0.769"):
        assert not [t for t in texts if word in t], word
    assert not [t for t in texts[: -len(full["deviations"])] if "fine-tun" in t]
    bench = {c["id"]: c for c in full["claims"] if "task" in (c.get("where") or {})}
    assert {c["where"]["task"] for c in bench.values()} == {"m-eurosat", "m-bigearthnet", "m-so2sat", "m-brick-kiln",
                                                              "eurosat_s1", "eurosat_s2", "lcz_s2"}
    assert bench["bench_random_m_bigearthnet"]["metric"] == "micro_f1"
    assert all(c["baseline"] == "random" for k, c in bench.items() if k.startswith("bench_random"))
    labels = [col["label"] for sec in full["table"]["sections"] for col in sec["columns"]]
    assert set(full["reported"]["columns"]) <= set(labels)
