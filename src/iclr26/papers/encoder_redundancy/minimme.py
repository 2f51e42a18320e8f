"""MiniMME: a procedurally drawn multiple-choice benchmark in VLMEvalKit's MCQ TSV layout, and the one
loader that reads it and VLMEvalKit's real TSVs (MMBench, SEEDBench_IMG, AI2D_TEST, ...).

VLMEvalKit's MCQ TSV columns (vlmeval/dataset/image_mcq.py, build_prompt): `index`, `image` (base64
image bytes), `question`, option columns `A`..`D`, `answer` (a letter), `category`, optional `hint`.

Every image is 16 x 16 RGB on a grey background holding
  - one large 6 x 6 square of one of four colours (anywhere in rows 0-10),
  - one small 2 x 2 white marker (rows 0-10, away from the square),
  - one 3 x 5 digit glyph (black strokes) in the bottom band (rows 11-15), columns 4-6 or 5-7.
Four categories mirror the paper's groups:
  general    "What colour is the large square?"                    (coarse: colour)
  knowledge  "Which family does the large square's colour belong to?" (colour + a fact table)
  ocr        "What digit is written at the bottom?"                 (fine detail: 3 x 5 glyph)
  vision     "Where is the white marker relative to the large square?" (spatial relation)
"""
from __future__ import annotations

import base64
import csv
import io
import sys
from pathlib import Path

import numpy as np

CATEGORIES = ("general", "knowledge", "ocr", "vision")
COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.1), "blue": (0.1, 0.1, 0.9), "yellow": (0.95, 0.9, 0.1)}
FAMILY = {"red": "fire", "green": "plant", "blue": "water", "yellow": "sun"}   # the "knowledge" fact table
RELATIONS = ("left", "right", "above", "below")
DIGITS = tuple(str(d) for d in range(10))
GLYPHS = {  # 3 x 5 digit glyphs, rows top to bottom
    "0": ("111", "101", "101", "101", "111"), "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"), "3": ("111", "001", "011", "001", "111"),
    "4": ("101", "101", "111", "001", "001"), "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"), "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"), "9": ("111", "101", "111", "001", "111")}
QUESTIONS = {"general": "What colour is the large square?",
             "knowledge": "Which family does the large square's colour belong to?",
             "ocr": "What digit is written at the bottom?",
             "vision": "Where is the white marker relative to the large square?"}
ANSWERS = tuple(COLOURS) + tuple(dict.fromkeys(FAMILY.values())) + DIGITS + RELATIONS   # the answer vocabulary
TSV_COLUMNS = ("index", "image", "question", "A", "B", "C", "D", "answer", "category")
SIZE = 16


def draw(rng: np.random.Generator, noise: float) -> tuple[np.ndarray, dict]:
    """One image (H, W, 3) in [0, 1] and its facts."""
    img = np.full((SIZE, SIZE, 3), 0.5) + rng.normal(0, noise, (SIZE, SIZE, 3))
    colour = str(rng.choice(list(COLOURS)))
    sy, sx = int(rng.integers(0, 11 - 6 + 1)), int(rng.integers(0, SIZE - 6 + 1))
    img[sy:sy + 6, sx:sx + 6] = COLOURS[colour]
    relation = str(rng.choice(RELATIONS))
    cy, cx = sy + 3, sx + 3   # the square's centre; the marker is placed clearly on one side
    for _ in range(200):
        my, mx = int(rng.integers(0, 11 - 2 + 1)), int(rng.integers(0, SIZE - 2 + 1))
        dy, dx = my + 1 - cy, mx + 1 - cx
        outside = my + 2 <= sy or my >= sy + 6 or mx + 2 <= sx or mx >= sx + 6
        rel = ("left" if dx < 0 else "right") if abs(dx) > abs(dy) + 1 else \
              ("above" if dy < 0 else "below") if abs(dy) > abs(dx) + 1 else None
        if outside and rel == relation:
            break
    else:   # this square position leaves no room on that side: take any clear relation
        while True:
            my, mx = int(rng.integers(0, 10)), int(rng.integers(0, SIZE - 1))
            dy, dx = my + 1 - cy, mx + 1 - cx
            outside = my + 2 <= sy or my >= sy + 6 or mx + 2 <= sx or mx >= sx + 6
            if outside and abs(abs(dx) - abs(dy)) > 1:
                relation = ("left" if dx < 0 else "right") if abs(dx) > abs(dy) else ("above" if dy < 0 else "below")
                break
    img[my:my + 2, mx:mx + 2] = 1.0
    digit = str(rng.choice(DIGITS))
    gx = 4 + int(rng.integers(0, 2))   # inside one 4-pixel patch column
    glyph = np.array([[c == "1" for c in row] for row in GLYPHS[digit]])
    band = img[11:16, gx:gx + 3]
    band[glyph] = 0.0
    return np.clip(img, 0, 1), {"colour": colour, "family": FAMILY[colour], "digit": digit, "relation": relation}


def _png_b64(img: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray((img * 255).round().astype(np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def write_tsv(path: Path, n_per_category: int, seed: int, noise: float) -> dict:
    """Write one MiniMME split as a VLMEvalKit MCQ TSV; returns counts."""
    rng = np.random.default_rng(seed)
    pools = {"general": tuple(COLOURS), "knowledge": tuple(dict.fromkeys(FAMILY.values())), "ocr": DIGITS,
             "vision": RELATIONS}
    key = {"general": "colour", "knowledge": "family", "ocr": "digit", "vision": "relation"}
    rows = []
    for cat in CATEGORIES:
        for _ in range(n_per_category):
            img, facts = draw(rng, noise)
            right = facts[key[cat]]
            wrong = [a for a in pools[cat] if a != right]
            options = [right, *rng.choice(wrong, size=3, replace=False)]
            rng.shuffle(options)
            rows.append({"index": len(rows), "image": _png_b64(img), "question": QUESTIONS[cat],
                         **dict(zip("ABCD", options)), "answer": "ABCD"[options.index(right)], "category": cat})
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TSV_COLUMNS, delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    return {"items": len(rows)}


def read_tsv(path: Path, size: int = SIZE, category_map: dict | None = None) -> dict:
    """VLMEvalKit MCQ TSV -> arrays: images (N, 3, size, size) float32, question text, options (N, 4),
    answer index (N,), category (N,). Real benchmarks: images are resized to `size`; rows with an image
    reference instead of bytes, or fewer than 2 options, are skipped (counted); `category_map` maps a
    benchmark's own category column to one of the four groups (default: the benchmark's group)."""
    from PIL import Image

    csv.field_size_limit(sys.maxsize)
    images, questions, options, answers, cats, skipped = [], [], [], [], [], 0
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            opts = [row.get(k) or "" for k in "ABCD"]
            if row.get("answer") not in "ABCD" or not row.get("answer") or sum(bool(o) for o in opts) < 2:
                skipped += 1
                continue
            try:
                pic = Image.open(io.BytesIO(base64.b64decode(row["image"]))).convert("RGB")
            except Exception:   # VLMEvalKit stores a repeated image as the index of its first row
                skipped += 1
                continue
            if pic.size != (size, size):
                pic = pic.resize((size, size), Image.BILINEAR)
            images.append(np.asarray(pic, dtype=np.float32).transpose(2, 0, 1) / 255.0)
            questions.append(row["question"])
            options.append(opts)
            answers.append("ABCD".index(row["answer"]))
            cat = row.get("category", "")
            cats.append((category_map or {}).get(cat, cat))
    return {"image": np.stack(images), "question": np.array(questions), "options": np.array(options),
            "answer": np.array(answers, dtype=np.int64), "category": np.array(cats), "skipped": skipped}


def answer_ids(options: np.ndarray) -> np.ndarray:
    """Option texts -> ids in the answer vocabulary (-1: not in it)."""
    lookup = {a: i for i, a in enumerate(ANSWERS)}
    return np.vectorize(lambda s: lookup.get(s, -1))(options).astype(np.int64)


def question_ids(questions: np.ndarray) -> np.ndarray:
    """Template questions -> a template id (the 'LLM' reads the question through it)."""
    lookup = {q: i for i, q in enumerate(QUESTIONS.values())}
    return np.array([lookup.get(q, len(lookup)) for q in questions], dtype=np.int64)
