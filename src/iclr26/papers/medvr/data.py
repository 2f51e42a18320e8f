"""VQA-RAD-schema data: the synthetic "scans" of card 02 section 6, written as VQA-RAD's hub parquet
(`flaviagiammarino/vqa-rad`: columns image {bytes, path}, question, answer), and the one loader
that reads both the synthetic files and the real ones.

A scan is a 2-D image: a smooth random background, Gaussian noise (sigma `noise`) and one small
"lesion" of one of C textures, all of equal total intensity, in one random cell of a grid. The
lesion lies inside one `pool` x `pool` block of its cell (which block: random; offset within it:
random when `jitter`). The question asks for the lesion type. At `pool`-times average pooling
(the agent's global view) the texture is lost while the brighter lesion stays visible; its type
needs the full-resolution crop.
The lesion's cell is written to a side file `lesion_cells.json`, read only to score grounding.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, write_json

QUESTION = "What type of lesion is seen in this scan?"


def textures(size: int = 3) -> dict[str, np.ndarray]:
    """The lesion textures, each scaled to the same total intensity (the ring's 8 pixels)."""
    ring = np.ones((size, size))
    ring[size // 2, size // 2] = 0
    plus = np.zeros((size, size))
    plus[size // 2, :] = plus[:, size // 2] = 1
    cross = np.eye(size) + np.fliplr(np.eye(size))
    cross = (cross > 0).astype(float)
    shapes = {"ring": ring, "filled": np.ones((size, size)), "plus": plus, "x": cross}
    return {k: v * ring.sum() / v.sum() for k, v in shapes.items()}


def make_scans(n: int, spec: dict, rng: np.random.Generator) -> tuple[np.ndarray, list[str], np.ndarray]:
    """n scans, unclipped: (images [n, S, S], answers, lesion cells)."""
    size, grid, lesion = spec["image_size"], spec["grid"], spec["lesion_size"]
    cell, pool, jitter = size // grid, spec["pool"], int(spec["jitter"])
    shapes = textures(lesion)
    names = list(spec["classes"])
    yy, xx = np.mgrid[0:size, 0:size] / size
    images = np.empty((n, size, size))
    answers, cells = [], np.empty(n, int)
    for i in range(n):
        fx, fy, phase = rng.uniform(0.5, 2.0), rng.uniform(0.5, 2.0), rng.uniform(0, 2 * np.pi)
        img = spec["background"] * (1 + 0.5 * np.sin(2 * np.pi * (fx * xx + fy * yy) + phase))
        img = img + rng.normal(0, spec["noise"], (size, size))
        k = int(rng.integers(len(names)))
        c = int(rng.integers(grid * grid))
        # inside one pool block of the cell, so the global view keeps only its (equal) total intensity
        blocks, slack = cell // pool, pool - lesion
        r0 = (c // grid) * cell + int(rng.integers(blocks)) * pool + int(rng.integers(slack + 1)) * jitter
        c0 = (c % grid) * cell + int(rng.integers(blocks)) * pool + int(rng.integers(slack + 1)) * jitter
        img[r0:r0 + lesion, c0:c0 + lesion] += spec["lesion_gain"] * shapes[names[k]]
        images[i], cells[i] = img, c
        answers.append(names[k])
    return images, answers, cells


def write_synthetic(out_dir: Path, spec: dict, seed: int) -> dict:
    """Write data/{train,test}-00000-of-00001.parquet in VQA-RAD's layout (PNG bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(seed)
    cells_out, counts = {}, {}
    for split in ("train", "test"):
        images, answers, cells = make_scans(spec[f"n_{split}"], spec, rng)
        blobs = []
        for img in images:
            buf = io.BytesIO()
            # stored as (x + 1) / 4: the lesion's peak (1.6 x gain) is not clipped, so every texture
            # keeps the same total intensity in the global view (clipping at 1 would leak the type)
            grey = np.clip((img + 1.0) / 4.0, 0.0, 1.0)
            Image.fromarray(np.round(grey * 255).astype(np.uint8), mode="L").save(buf, format="PNG")
            blobs.append({"bytes": buf.getvalue(), "path": None})
        table = pa.table({"image": blobs, "question": [QUESTION] * len(answers), "answer": answers})
        path = Path(out_dir) / "data" / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        cells_out[split], counts[split] = cells.tolist(), len(answers)
    write_json(Path(out_dir) / "lesion_cells.json", cells_out)
    return counts


def parquet_files(raw: Path, split: str) -> list[Path]:
    """The split's parquet shards in a hub snapshot or the synthetic folder."""
    files = sorted(Path(raw).rglob(f"{split}-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no {split}-*.parquet under {raw}")
    return files


def load_vqa(raw: Path, split: str, image_size: int) -> dict:
    """One loader for VQA-RAD's parquet (real or synthetic): grey images resized to image_size,
    scaled to [0, 1]; questions and answers as strings (answers lower-cased and stripped)."""
    import pyarrow.parquet as pq
    from PIL import Image

    images, questions, answers = [], [], []
    for path in parquet_files(raw, split):
        for row in pq.read_table(path).to_pylist():
            img = row["image"]
            data = img["bytes"] if img.get("bytes") else Path(raw, img["path"]).read_bytes()
            pic = Image.open(io.BytesIO(data)).convert("L")
            if pic.size != (image_size, image_size):
                pic = pic.resize((image_size, image_size), Image.BILINEAR)
            images.append(np.asarray(pic, np.float32) / 255.0)
            questions.append(str(row["question"]))
            answers.append(str(row["answer"]).strip().lower())
    out = {"images": np.stack(images), "questions": questions, "answers": answers}
    side = Path(raw) / "lesion_cells.json"
    if side.exists():
        out["cells"] = np.asarray(read_json(side)[split], int)
    return out


def load_vqa_rgb(raw: Path, split: str, limit: int | None = None) -> dict:
    """The same parquet read for a VLM: RGB PIL images at their native resolution (the tiny loader's
    grey 2-D arrays are for the MLP agent only), questions, answers (stripped, lower-cased)."""
    import pyarrow.parquet as pq
    from PIL import Image

    images, questions, answers = [], [], []
    for path in parquet_files(raw, split):
        for row in pq.read_table(path).to_pylist():
            if limit is not None and len(images) >= limit:
                break
            img = row["image"]
            blob = img["bytes"] if img.get("bytes") else Path(raw, img["path"]).read_bytes()
            images.append(Image.open(io.BytesIO(blob)).convert("RGB"))
            questions.append(str(row["question"]))
            answers.append(str(row["answer"]).strip().lower())
    return {"images": images, "questions": questions, "answers": answers}
