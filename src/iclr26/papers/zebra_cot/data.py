"""Zebra-CoT rows: the synthetic "3D Visual Reasoning - Multi-Hop Objects Counting" generator (card
19, section 6.1) and the one loader that reads both it and the real dataset's parquet files.

A row has the real dataset's columns (checked against the HF dataset card and public code reading
it): `Question`, `Text Reasoning Trace`, `Final Answer` (strings), `problem_image_1..m` and
`reasoning_image_1..n` (the `datasets` Image feature, stored in parquet as a struct
{bytes: PNG bytes, path: string}). As in the real rows, the trace is one string of `THOUGHT k:`
paragraphs whose images are written `<image_start>[reasoning_image_k]<image_end>`; the question
carries `<image_start>[problem_image_1]<image_end>`. The loader also reads a bare `[..._image_k]`.

The scene is a rows x cols grid of cells, each empty or one of {red, blue} x {cube, ball}; the
trace's thoughts restate the operations but never a count, so the scene's state lives in the
reasoning images only (as in the real data, where the text describes what to draw and the picture
holds the result). Every operation is written in four words, so each (thought, image) step of a
trace has the same length (the card's operations, phrased to a fixed length).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

COLORS = ("red", "blue")
SHAPES = ("cube", "ball")
# cell codes: 0 empty, then (color, shape) in this order
KINDS = tuple((c, s) for c in COLORS for s in SHAPES)
RGB = {"red": (220, 40, 40), "blue": (40, 70, 220)}
BACKGROUND = (235, 235, 235)
TARGETS = ("color", "shape", "pair", "all")   # what a question may ask to count (the card's four kinds)
PLACEHOLDER = re.compile(r"(?:<image_start>\s*)?\[(problem_image_\d+|reasoning_image_\d+)\](?:\s*<image_end>)?")


def grid_shape(spec_grid) -> tuple[int, int]:
    """(rows, cols) of a `grid` setting: an int (square) or [rows, cols]."""
    return (int(spec_grid), int(spec_grid)) if np.isscalar(spec_grid) else (int(spec_grid[0]), int(spec_grid[1]))


def image_tag(column: str) -> str:
    return f"<image_start>[{column}]<image_end>"


# ----------------------------------------------------------------------------- scenes and operations
def apply_op(grid: np.ndarray, op: tuple) -> np.ndarray:
    """The scene after one operation: ("add", n, color, shape) fills the first empty cells in raster
    order; ("remove_color", color) / ("remove_shape", shape) empties every matching cell."""
    out = grid.copy()
    if op[0] == "add":
        _, n, color, shape = op
        code = 1 + KINDS.index((color, shape))
        for i in np.flatnonzero(out.ravel() == 0)[:n]:
            out.flat[i] = code
    else:
        axis = 0 if op[0] == "remove_color" else 1
        for code, kind in enumerate(KINDS, start=1):
            if kind[axis] == op[1]:
                out[out == code] = 0
    return out


def op_text(op: tuple) -> str:
    """Four words for every operation."""
    if op[0] == "add":
        return f"add {op[1]} {op[2]} {op[3]}{'s' if op[1] > 1 else ''}"
    return f"remove all {op[1]} objects" if op[0] == "remove_color" else f"remove all the {op[1]}s"


def count(grid: np.ndarray, target: tuple) -> int:
    """Objects matching target = (color | None, shape | None)."""
    color, shape = target
    return int(sum(np.sum(grid == code) for code, kind in enumerate(KINDS, start=1)
                   if color in (None, kind[0]) and shape in (None, kind[1])))


def target_text(target: tuple) -> str:
    color, shape = target
    if color and shape:
        return f"{color} {shape}s"
    return f"{color} objects" if color else (f"{shape}s" if shape else "objects")


def random_op(rng, grid: np.ndarray, max_add: int = 3) -> tuple:
    free = int(np.sum(grid == 0))
    kind = rng.integers(3) if free else 1 + rng.integers(2)
    if kind == 0:
        return ("add", int(rng.integers(1, min(max_add, free) + 1)), str(rng.choice(COLORS)), str(rng.choice(SHAPES)))
    return ("remove_color", str(rng.choice(COLORS))) if kind == 1 else ("remove_shape", str(rng.choice(SHAPES)))


def random_target(rng, targets=TARGETS) -> tuple:
    """(color | None, shape | None) of one of the allowed question kinds (color, shape, pair, all)."""
    kind = targets[int(rng.integers(len(targets)))]
    color, shape = str(rng.choice(COLORS)), str(rng.choice(SHAPES))
    return {"color": (color, None), "shape": (None, shape), "pair": (color, shape), "all": (None, None)}[kind]


# ----------------------------------------------------------------------------- images
def render(grid: np.ndarray, cell_px: int) -> bytes:
    """PNG bytes of a scene: cubes as filled squares, balls as filled discs, one per cell."""
    from PIL import Image, ImageDraw

    rows, cols = grid.shape
    image = Image.new("RGB", (cols * cell_px, rows * cell_px), BACKGROUND)
    draw = ImageDraw.Draw(image)
    m = max(1, cell_px // 6)
    for (r, c), code in np.ndenumerate(grid):
        if code:
            color, shape = KINDS[code - 1]
            box = (c * cell_px + m, r * cell_px + m, (c + 1) * cell_px - m - 1, (r + 1) * cell_px - m - 1)
            (draw.rectangle if shape == "cube" else draw.ellipse)(box, fill=RGB[color])
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def decode_image(value) -> np.ndarray:
    """An RGB uint8 array from a parquet image cell (the Image feature's {bytes, path} struct, or bytes)."""
    from PIL import Image

    data = value["bytes"] if isinstance(value, dict) else value
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# ----------------------------------------------------------------------------- rows
def make_row(rng, spec: dict) -> dict:
    """One Multi-Hop Objects Counting problem as a Zebra-CoT row (the real rows' text layout)."""
    grid = np.zeros(grid_shape(spec["grid"]), dtype=np.int64)
    lo, hi = spec["n_objects"]
    n0 = int(rng.integers(lo, hi + 1))
    cells = rng.choice(grid.size, size=min(n0, grid.size), replace=False)
    grid.flat[cells] = rng.integers(1, len(KINDS) + 1, size=len(cells))
    target = random_target(rng, tuple(spec.get("targets") or TARGETS))
    scenes, ops = [grid], []
    for _ in range(int(spec["n_ops"])):
        ops.append(random_op(rng, scenes[-1], int(spec.get("max_add", 3))))
        scenes.append(apply_op(scenes[-1], ops[-1]))
    n = len(ops)
    question = (f"{image_tag('problem_image_1')} How many {target_text(target)} are left after: "
                + ", then ".join(op_text(op) for op in ops) + "?")
    thoughts = [f"THOUGHT {k + 1}: {op_text(op)}. {image_tag(f'reasoning_image_{k + 1}')}" for k, op in enumerate(ops)]
    thoughts.append(f"THOUGHT {n + 1}: count the {target_text(target)}.")
    cell_px = int(spec["cell_px"])
    row = {"Question": question, "Text Reasoning Trace": "\n\n".join(thoughts),
           "Final Answer": str(count(scenes[-1], target)),
           "problem_image_1": {"bytes": render(scenes[0], cell_px), "path": None}}
    for k, scene in enumerate(scenes[1:], start=1):
        row[f"reasoning_image_{k}"] = {"bytes": render(scene, cell_px), "path": None}
    return row


def generate(spec: dict, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [make_row(rng, spec) for _ in range(n)]


def image_columns(names) -> list[str]:
    return [c for c in names if PLACEHOLDER.fullmatch(f"[{c}]")]


def write_parquet(rows: list[dict], path: Path) -> None:
    """Rows in the HF layout: image columns as struct<bytes: binary, path: string>."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(dict.fromkeys(k for row in rows for k in row))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    arrays = {c: pa.array([row.get(c) for row in rows], type=image_type if c in image_columns(names) else pa.string())
              for c in names}
    tmp = Path(path).with_suffix(".tmp")
    pq.write_table(pa.table(arrays), tmp)
    tmp.replace(path)


def read_parquet(path: Path, limit: int | None = None) -> list[dict]:
    """Rows of a Zebra-CoT parquet file (real or synthetic), as dicts; None cells dropped."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if limit is not None:
        table = table.slice(0, limit)
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


def segments(row: dict) -> tuple[list, list]:
    """(prompt, chain): each a list of ("text", str) and ("image", column) pieces, in reading order:
    the question (with its problem images), then the trace with its reasoning images."""
    def split(text: str) -> list:
        out, last = [], 0
        for m in PLACEHOLDER.finditer(text):
            if text[last:m.start()].strip():
                out.append(("text", text[last:m.start()].strip()))
            if m.group(1) in row:   # a placeholder without its image (never in the cleaned data) is dropped
                out.append(("image", m.group(1)))
            last = m.end()
        if text[last:].strip():
            out.append(("text", text[last:].strip()))
        return out

    prompt = split(row["Question"])
    if not any(kind == "image" for kind, _ in prompt):   # problem images not referenced in the question go first
        prompt = [("image", c) for c in sorted(row) if c.startswith("problem_image_")] + prompt
    return prompt, split(row["Text Reasoning Trace"])
