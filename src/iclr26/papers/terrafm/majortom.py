"""Major-TOM Core parquet parts: the schema, the tiny "mini-Major-TOM" generator that writes it,
the loader that reads it (the same for generated and real parts), and the full-scale streaming
acquisition from the hub at a pinned commit.

Schema (Major-TOM Core, read from ESA-PhiLab/Major-TOM's sample helpers and thumbnail scripts):
one row per grid cell and product; `product_id`, `grid_cell` (e.g. "123U_456R"),
`product_datetime`, `thumbnail` (PNG bytes), and one binary column per band holding a single-band
GeoTIFF file's bytes: S2 (L2A: B01 B02 B03 B04 B05 B06 B07 B08 B8A B09 B11 B12; L1C adds B10) as
uint16 reflectance x 10^4 and `cloud_mask` (uint8); S1RTC `vv`, `vh` as float32 linear backscatter
(the Major-TOM thumbnail script takes 10 log10 of them: the loader converts to dB the same way).
Band rasters are single-band TIFF files (what the Major-TOM helpers open with rasterio's MemoryFile;
rasterio is not in the project's environments): written as one uncompressed strip and read by a
small struct/numpy reader when they are one, with Pillow's TIFF codec otherwise (see tif_bytes).

WorldCover-like labels are a separate table (`worldcover/labels.parquet`: grid_cell, `label_map`
as uint8 TIFF bytes holding ESA WorldCover class codes); Major-TOM itself ships no labels.
"""
from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import numpy as np

S2L2A_BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")
S2L1C_BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B10", "B11", "B12")
S1_BANDS = ("vv", "vh")
COLLECTIONS = {"s2l2a": "Core-S2L2A", "s2l1c": "Core-S2L1C", "s1rtc": "Core-S1RTC"}
# ESA WorldCover 2021 codes, in the (assumed) global-frequency rank the generator's Zipf law follows
WORLDCOVER = (10, 40, 30, 20, 50, 60, 80, 90, 70, 100, 95)
WORLDCOVER_NAMES = {10: "tree cover", 20: "shrubland", 30: "grassland", 40: "cropland", 50: "built-up",
                    60: "bare", 70: "snow and ice", 80: "water", 90: "herbaceous wetland", 95: "mangroves",
                    100: "moss and lichen"}
S1_NODATA = -32768.0


# ----------------------------------------------------------------------------- band blobs
# A single-band TIFF is written and, when it is one uncompressed strip, read with struct and numpy
# (baseline TIFF 6.0 tags; 20x faster than Pillow's codec for the generator's thousands of small
# rasters). Pillow writes the same image and reads these files (tests); any other TIFF (compressed,
# tiled, several strips, big-endian: the real Major-TOM GeoTIFFs) is read with Pillow.
_TIF_TYPES = {np.dtype(np.uint8): (8, 1), np.dtype(np.uint16): (16, 1), np.dtype(np.float32): (32, 3)}
_TIF_DTYPES = {(8, 1): np.dtype(np.uint8), (16, 1): np.dtype("<u2"), (32, 3): np.dtype("<f4")}


def tif_bytes(array: np.ndarray) -> bytes:
    """One band as a single-band TIFF file's bytes (uint16, uint8 or float32): little-endian, one
    uncompressed strip, BlackIsZero (the layout Pillow writes for these modes)."""
    a = np.ascontiguousarray(array)
    bits, sample_format = _TIF_TYPES[a.dtype.newbyteorder("=")]
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    h, w = a.shape
    n_tags = 11
    start = 8 + 2 + 12 * n_tags + 4   # header, IFD (count, entries, next-IFD offset), then the pixels
    tags = [(256, 4, w), (257, 4, h), (258, 3, bits), (259, 3, 1), (262, 3, 1), (273, 4, start), (277, 3, 1),
            (278, 4, h), (279, 4, a.nbytes), (284, 3, 1), (339, 3, sample_format)]
    ifd = b"".join(struct.pack("<HHIHH" if kind == 3 else "<HHII", tag, kind, 1, value, *((0,) if kind == 3 else ()))
                   for tag, kind, value in tags)
    return b"II*\0" + struct.pack("<IH", 8, n_tags) + ifd + b"\0\0\0\0" + a.tobytes()


def read_tif_bytes(blob: bytes) -> np.ndarray:
    if blob[:4] == b"II*\0":
        (off,) = struct.unpack_from("<I", blob, 4)
        (n,) = struct.unpack_from("<H", blob, off)
        tags = {}
        for i in range(n):
            tag, kind, count, value = struct.unpack_from("<HHI4s", blob, off + 2 + 12 * i)
            tags[tag] = struct.unpack_from("<H" if kind == 3 else "<I", value)[0] \
                if count == 1 and kind in (3, 4) else None
        dtype = _TIF_DTYPES.get((tags.get(258, 1), tags.get(339, 1)))
        h, w, start = tags.get(257), tags.get(256), tags.get(273)
        if dtype is not None and tags.get(259, 1) == 1 and tags.get(277, 1) == 1 and tags.get(262) == 1 \
                and tags.get(284, 1) == 1 and h and w and start is not None \
                and tags.get(279) == h * w * dtype.itemsize and start + h * w * dtype.itemsize <= len(blob):
            return np.frombuffer(blob, dtype, h * w, start).reshape(h, w).astype(dtype.newbyteorder("="))
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(blob)))


def png_bytes(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


# ----------------------------------------------------------------------------- generator
def zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = np.arange(1, n + 1, dtype=float) ** -exponent
    return p / p.sum()


class World:
    """The class-conditional signal shared by all sensors: per WorldCover class a 12-band L2A
    reflectance curve, an S1 backscatter pair (dB) and a texture frequency. Curves overlap on
    purpose (a shared base plus a class deviation of `spectral_sep`), and a per-tile illumination
    gain scales all bands, so raw band means are a weak classifier."""

    def __init__(self, spec: dict, seed: int):
        rng = np.random.default_rng(seed)
        k = len(WORLDCOVER)
        wl = np.linspace(0, 1, len(S2L2A_BANDS))
        base = 0.08 + 0.18 * wl
        shapes = np.stack([np.sin(np.pi * (a * wl + b)) for a, b in rng.uniform([0.5, 0], [2.5, 1], (k, 2))])
        self.spectra = np.clip(base + spec["spectral_sep"] * shapes * base, 0.01, 0.9)   # (k, 12)
        self.s1_db = np.stack([rng.uniform(-20, -5, k), rng.uniform(-27, -11, k)], 1)   # (k, 2) VV, VH
        self.freq = rng.uniform(0.5, 3.0, k)                                               # texture cycles / tile
        self.phase = rng.uniform(0, 2 * np.pi, k)


def label_map(rng, spec, probs) -> np.ndarray:
    """A blocky WorldCover map: the dominant class (drawn from the Zipf law) on a share of the
    coarse cells, the rest from the same law; returns class indices (0..10), tile_px square."""
    g, px = spec["label_grid"], spec["tile_px"]
    dominant = rng.choice(len(probs), p=probs)
    coarse = np.where(rng.random((g, g)) < spec["dominant_share"], dominant, rng.choice(len(probs), (g, g), p=probs))
    return np.kron(coarse, np.ones((px // g, px // g), int))


def s2_reflectance(rng, world: World, labels: np.ndarray, spec: dict) -> np.ndarray:
    """L2A surface reflectance (12, H, W) in [0, 1]: class curve x illumination x texture + noise."""
    px = labels.shape[0]
    yy, xx = np.mgrid[0:px, 0:px] / px
    angle = rng.uniform(0, np.pi)
    wave = np.sin(2 * np.pi * world.freq[labels] * (np.cos(angle) * xx + np.sin(angle) * yy) + world.phase[labels])
    tex = 1 + spec["texture_amp"] * wave
    gain = rng.uniform(*spec["illumination"])
    refl = world.spectra[labels].transpose(2, 0, 1) * tex * gain
    return np.clip(refl + rng.normal(0, spec["noise"], refl.shape), 0, 1)


def s1_backscatter(rng, world: World, labels: np.ndarray, spec: dict) -> np.ndarray:
    """S1 RTC (2, H, W), linear power: class dB + tile offset + texture, times gamma speckle."""
    px = labels.shape[0]
    yy, xx = np.mgrid[0:px, 0:px] / px
    wave = np.sin(2 * np.pi * world.freq[labels] * (xx + yy) / 1.4 + world.phase[labels])
    db = world.s1_db[labels].transpose(2, 0, 1) + spec["s1_texture_db"] * wave + rng.normal(0, spec["s1_offset_db"])
    looks = spec["speckle_looks"]
    return (10 ** (db / 10) * rng.gamma(looks, 1 / looks, db.shape)).astype(np.float32)


def l1c_from_l2a(rng, refl: np.ndarray, spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """Top-of-atmosphere (13 bands, B10 inserted) = L2A + a band-dependent path radiance (strongest
    in blue) + haze + cloud blobs; returns (bands, cloud mask)."""
    px = refl.shape[1]
    path = spec["atmosphere"] * np.linspace(1.0, 0.15, refl.shape[0])[:, None, None] * rng.uniform(0.5, 1.5)
    toa = refl + path
    mask = np.zeros((px, px), np.uint8)
    if rng.random() < spec["cloud_prob"]:
        cy, cx, r = rng.uniform(0, px, 2).tolist() + [rng.uniform(px / 8, px / 3)]
        yy, xx = np.mgrid[0:px, 0:px]
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r**2))
        mask = (blob > 0.5).astype(np.uint8)
        toa = toa * (1 - 0.8 * blob) + 0.6 * blob
    b10 = 0.002 + 0.01 * mask[None].astype(float)  # cirrus band: near zero, bright over cloud
    return np.concatenate([toa[:10], b10, toa[10:]], 0).clip(0, 1), mask


def day(rng) -> str:
    return f"2021{rng.integers(1, 13):02d}{rng.integers(1, 29):02d}T101031"


def to_dn(refl: np.ndarray) -> np.ndarray:
    return np.round(refl * 1e4).astype(np.uint16)


def grid_cell(i: int, region: int) -> str:
    return f"{100 * region + i // 50}U_{i % 50}R"


def write_synthetic(out: Path, spec: dict, seed: int) -> dict:
    """Mini-Major-TOM: `n_cells[region]` grid cells per region (pretrain, downstream), each with an
    S2L2A, an S2L1C and an S1RTC product (different dates: independent noise, gain and clouds) and
    a WorldCover-like label map; written as Major-TOM parts plus the labels table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    world = World(spec, seed)
    probs = zipf_probs(len(WORLDCOVER), spec["zipf_exponent"])
    rows = {c: [] for c in COLLECTIONS}
    labels = []
    for region, (name, n) in enumerate(spec["n_cells"].items()):
        rng = np.random.default_rng([seed, region])
        for i in range(n):
            cell = grid_cell(i, region + 1)
            lab = label_map(rng, spec, probs)
            codes = np.asarray(WORLDCOVER, np.uint8)[lab]
            labels.append({"grid_cell": cell, "split": name, "label_map": tif_bytes(codes)})
            l2a = s2_reflectance(rng, world, lab, spec)
            rgb = (np.clip(l2a[[3, 2, 1]].transpose(1, 2, 0) * 4, 0, 1) * 255).astype(np.uint8)
            row = {"product_id": f"S2A_MSIL2A_{cell}", "grid_cell": cell, "product_datetime": day(rng),
                   "thumbnail": png_bytes(rgb), "cloud_mask": tif_bytes(np.zeros(lab.shape, np.uint8))}
            row.update({b: tif_bytes(to_dn(l2a[j])) for j, b in enumerate(S2L2A_BANDS)})
            rows["s2l2a"].append(row)
            if name in spec["l1c_regions"]:   # the downstream tasks read L2A and S1 only
                rows["s2l1c"].append(l1c_row(rng, world, lab, spec, cell, day(rng), rgb))
            s1 = s1_backscatter(rng, world, lab, spec)
            row = {"product_id": f"S1A_IW_GRDH_{cell}", "grid_cell": cell, "product_datetime": day(rng),
                   "thumbnail": png_bytes(rgb)}
            row.update({b: tif_bytes(s1[j]) for j, b in enumerate(S1_BANDS)})
            rows["s1rtc"].append(row)
    for key, coll in COLLECTIONS.items():
        path = out / coll / "images" / "part_00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows[key]), path, row_group_size=64)
    (out / "worldcover").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(labels), out / "worldcover" / "labels.parquet")
    counts = np.bincount([WORLDCOVER.index(dominant_code(read_tif_bytes(r["label_map"]))) for r in labels],
                         minlength=len(WORLDCOVER))
    return {"cells": len(labels), "dominant_class_counts": counts.tolist()}


def l1c_row(rng, world, lab, spec, cell, when, rgb) -> dict:
    toa, mask = l1c_from_l2a(rng, s2_reflectance(rng, world, lab, spec), spec)
    row = {"product_id": f"S2A_MSIL1C_{cell}", "grid_cell": cell, "product_datetime": when,
           "thumbnail": png_bytes(rgb), "cloud_mask": tif_bytes(mask * 255)}
    row.update({b: tif_bytes(to_dn(toa[j])) for j, b in enumerate(S2L1C_BANDS)})
    return row


def dominant_code(codes: np.ndarray) -> int:
    values, counts = np.unique(codes, return_counts=True)
    return int(values[np.argmax(counts)])


# ----------------------------------------------------------------------------- loader
def on_grid(bands: list[np.ndarray], tile_px: int | None) -> list[np.ndarray]:
    """Bands on one 10 m grid: Major-TOM keeps each band at its native resolution (20 m and 60 m
    bands are smaller rasters), so each is upsampled to the largest band's size with nearest
    neighbours, as Major-TOM's embedder does (MajorTOM_Embedder.py); then the
    centre tile_px square (None: the whole raster)."""
    from PIL import Image

    size = max(b.shape[0] for b in bands)
    out = []
    for b in bands:
        if b.shape[0] != size:
            b = np.asarray(Image.fromarray(b.astype(np.float32)).resize((size, size), Image.NEAREST))
        if tile_px and tile_px < size:
            o = (size - tile_px) // 2
            b = b[o:o + tile_px, o:o + tile_px]
        out.append(b)
    return out


def read_collection(root: Path, key: str, cells=None, tile_px: int | None = None) -> dict[str, np.ndarray]:
    """Every part of one collection under `root/<Core-...>/images/` as {grid_cell: (C, H, W) float32}:
    S2 in reflectance (DN / 10^4; L1C without B10, the 12 bands TerraFM's L1C embedding takes),
    S1 in dB (10 log10 of the linear backscatter, nodata and non-positive values floored).
    Only the band columns are read (pyarrow column projection), row group by row group."""
    import pyarrow.parquet as pq

    bands = {"s2l2a": S2L2A_BANDS, "s2l1c": tuple(b for b in S2L1C_BANDS if b != "B10"), "s1rtc": S1_BANDS}[key]
    out = {}
    for part in sorted((Path(root) / COLLECTIONS[key] / "images").glob("*.parquet")):
        pf = pq.ParquetFile(part)
        for g in range(pf.num_row_groups):
            table = pf.read_row_group(g, columns=["grid_cell", *bands]).to_pydict()
            for i, cell in enumerate(table["grid_cell"]):
                if cells is not None and cell not in cells or cell in out:
                    continue
                arr = np.stack(on_grid([read_tif_bytes(table[b][i]) for b in bands], tile_px)).astype(np.float32)
                if key == "s1rtc":
                    arr = 10 * np.log10(np.where(arr > 0, arr, 1e-5))   # nodata (-32768) and zeros floored at -50 dB
                else:
                    arr = arr / 1e4
                out[cell] = arr
    return out


def read_labels(root: Path) -> dict[str, tuple[str, np.ndarray]]:
    """{grid_cell: (split, WorldCover code map)} from worldcover/labels.parquet."""
    import pyarrow.parquet as pq

    table = pq.read_table(Path(root) / "worldcover" / "labels.parquet").to_pylist()
    return {r["grid_cell"]: (r["split"], read_tif_bytes(r["label_map"])) for r in table}


# ----------------------------------------------------------------------------- full scale
def select_cells(cells: list[str], n: int, salt: str) -> list[str]:
    """A stable pseudo-random choice of n grid cells: the n smallest sha256(salt/cell)."""
    return sorted(cells, key=lambda c: hashlib.sha256(f"{salt}/{c}".encode()).hexdigest())[:n]


class RangedHTTPFile(io.RawIOBase):
    """A read-only, seekable file over HTTP Range requests, so that pyarrow reads a remote parquet
    part's footer and only the row groups asked for (a Major-TOM part is 4-5 GB; one patch is a few
    tens of MB). Hand-written on urllib because fsspec/aiohttp are not in the project's pinned
    environments; each request is retried with backoff."""

    def __init__(self, url: str, retries: int = 4, timeout: float = 120.0):
        import urllib.request

        self.url, self.retries, self.timeout, self.pos = url, retries, timeout, 0
        req = urllib.request.Request(url, method="HEAD")
        with self._open(req) as resp:
            self.size = int(resp.headers["Content-Length"])

    def _open(self, req):
        import time
        import urllib.error
        import urllib.request

        for attempt in range(self.retries + 1):
            try:
                return urllib.request.urlopen(req, timeout=self.timeout)
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                if attempt == self.retries:
                    raise
                time.sleep(2**attempt)

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: offset, io.SEEK_CUR: self.pos + offset, io.SEEK_END: self.size + offset}[whence]
        return self.pos

    def read(self, n=-1):
        import urllib.request

        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with self._open(req) as resp:
            data = resp.read()
            if resp.status != 206:   # the server ignored the range: it sent the whole file
                data = data[self.pos:end]
        self.pos += len(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def read_cells_ranged(url: str, groups: dict[str, int]):
    """Yield, for each grid cell, its row of a remote parquet part as a one-row pyarrow Table,
    reading only its row group: Major-TOM's metadata `parquet_row` is a row-group index (its helper
    reads `pf.read_row_group(parquet_row)`); the row is the group's row with that grid_cell."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from iclr26.core.errors import DataError

    pf = pq.ParquetFile(RangedHTTPFile(url))
    for cell, g in sorted(groups.items(), key=lambda kv: kv[1]):
        if not 0 <= g < pf.num_row_groups:
            raise DataError(f"{url}: parquet_row {g} of {cell} is not a row group (the part has {pf.num_row_groups})")
        table = pf.read_row_group(g)
        hit = table.filter(pc.equal(table["grid_cell"], cell))
        if hit.num_rows == 0:
            raise DataError(f"{url}: row group {g} does not hold grid cell {cell}, which metadata.parquet names for it")
        yield hit.slice(0, 1)


def acquire_hub(spec: dict, out: Path, log=print) -> dict:
    """Full scale: each collection's metadata.parquet at its pinned commit (core.acquire.download),
    the grid cells present in all three and in the WorldCover labels table placed at
    `worldcover_dir`, a stable sample of `n_cells_total` of them, and each chosen cell's row read
    from its part by HTTP range requests (its row group only: `parquet_row` is a row-group index, as
    Major-TOM's helpers read it; the commit in the URL pins the bytes), streamed row by row into one
    part per collection in the same schema (pyarrow ParquetWriter: one patch in memory at a time)."""
    import os
    from urllib.parse import quote

    import pyarrow as pa
    import pyarrow.parquet as pq

    from iclr26.core.acquire import download
    from iclr26.core.errors import DataError

    endpoint = (spec.get("endpoint") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    wc = Path(spec["worldcover_dir"]) / "labels.parquet"
    if not wc.is_file():
        raise DataError(f"place the WorldCover label table (grid_cell, split = pretrain | downstream, label_map = "
                        f"uint8 TIFF bytes of ESA WorldCover codes on the cell's 10 m grid) at {wc}")
    labelled = set(pq.read_table(wc, columns=["grid_cell"]).column("grid_cell").to_pylist())
    metas = {}
    for key, pin in spec["hub"].items():
        url = f"{endpoint}/datasets/{pin['hub_id']}/resolve/{pin['revision']}/{quote(pin['file'])}"
        path = download(url, out / "meta" / f"{key}.parquet", sha256=None)
        metas[key] = pq.read_table(path, columns=["grid_cell", "parquet_url", "parquet_row"]).to_pylist()
    common = labelled.intersection(*({r["grid_cell"] for r in rows} for rows in metas.values()))
    chosen = set(select_cells(sorted(common), int(spec["n_cells_total"]), spec.get("salt", "terrafm")))
    info = {"cells": len(chosen), "common_cells": len(common)}
    for key, rows in metas.items():
        pin = spec["hub"][key]
        by_part: dict[str, dict[str, int]] = {}
        taken: set = set()
        for r in rows:   # one product per cell (the first listed)
            if r["grid_cell"] in chosen and r["grid_cell"] not in taken:
                taken.add(r["grid_cell"])
                name = r["parquet_url"].split("/resolve/", 1)[1].split("/", 1)[1]   # <rev>/images/part_...
                by_part.setdefault(name, {})[r["grid_cell"]] = int(r["parquet_row"])
        dest = out / COLLECTIONS[key] / "images" / "part_00001.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        writer, kept = None, 0
        try:   # streamed: one patch (tens of MB) in memory at a time, never the whole collection
            for name in sorted(by_part):
                url = f"{endpoint}/datasets/{pin['hub_id']}/resolve/{pin['revision']}/{quote(name)}"
                for row in read_cells_ranged(url, by_part[name]):
                    if writer is None:
                        writer = pq.ParquetWriter(dest, row.schema)
                    writer.write_table(row.cast(writer.schema), row_group_size=1)
                    kept += 1
                log(f"{key}: {name} read, {kept} cells so far")
        finally:
            if writer is not None:
                writer.close()
        info[key] = {"hub_id": pin["hub_id"], "revision": pin["revision"], "cells": kept, "parts": len(by_part)}
    (out / "worldcover").mkdir(parents=True, exist_ok=True)
    table = pq.read_table(wc)
    mask = [c in chosen for c in table.column("grid_cell").to_pylist()]
    pq.write_table(table.filter(pa.array(mask)), out / "worldcover" / "labels.parquet")
    return info
