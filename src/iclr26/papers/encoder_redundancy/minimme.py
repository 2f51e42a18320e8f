"""MiniMME: a procedurally drawn benchmark in VLMEvalKit's TSV layouts, and the one reader that reads
it and VLMEvalKit's real TSVs (MMBench, SEEDBench_IMG, AI2D_TEST, TextVQA_VAL, MME, ...).

VLMEvalKit's TSV columns (vlmeval/dataset/image_base.py, image_mcq.py, image_vqa.py): `index`,
`image` (base64 image bytes, or the `index` of an earlier row holding the same image), `question`,
optional `hint`, MCQ option columns `A`, `B`, ... with `answer` one of their letters; VQA / Y-N rows
have no option columns and `answer` is the answer text (TextVQA, DocVQA: a list of accepted answers).

Every image is 16 x 16 RGB on a grey background holding
  - one large 6 x 6 square of one of four colours (anywhere in rows 0-10),
  - one small 2 x 2 white marker (rows 0-10, away from the square),
  - one 3 x 5 digit glyph (black strokes) in the bottom band (rows 11-15), columns 4-6 or 5-7.
Four categories mirror the paper's groups:
  general    MCQ "What colour is the large square?"                           (coarse: colour)
  knowledge  MCQ "Which family does the picture belong to?" A fact table maps (colour, marker side)
             to one of four families: family = FAMILIES[(colour + side) mod 4], so neither the
             colour nor the side alone tells the answer (the lookup lives in the "LLM")
  ocr        VQA "What digit is written at the bottom?" answered in the open over the whole answer
             vocabulary (chance 0.1 once the model knows it is a digit), as the paper's OCR & Chart
             benchmarks are open-answer VQA
  vision     MCQ "Where is the white marker relative to the large square?"   (spatial relation)
"""
from __future__ import annotations

import base64
import csv
import io
import json
import sys
from pathlib import Path

import numpy as np

CATEGORIES = ("general", "knowledge", "ocr", "vision")
COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.1), "blue": (0.1, 0.1, 0.9), "yellow": (0.95, 0.9, 0.1)}
FAMILIES = ("fire", "plant", "water", "sun")
RELATIONS = ("left", "right", "above", "below")
DIGITS = tuple(str(d) for d in range(10))
GLYPHS = {  # 3 x 5 digit glyphs, rows top to bottom
    "0": ("111", "101", "101", "101", "111"), "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"), "3": ("111", "001", "011", "001", "111"),
    "4": ("101", "101", "111", "001", "001"), "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"), "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"), "9": ("111", "101", "111", "001", "111")}
QUESTIONS = {"general": "What colour is the large square?",
             "knowledge": "Which family does the picture belong to (by the colour of the large square and the "
                          "side of the white marker)?",
             "ocr": "What digit is written at the bottom?",
             "vision": "Where is the white marker relative to the large square?"}
ANSWERS = tuple(COLOURS) + FAMILIES + DIGITS + RELATIONS   # the answer vocabulary of the tiny "LLM"
CHANCE = {"general": 0.25, "knowledge": 0.25, "ocr": 0.1, "vision": 0.25}   # MCQ: 1/4; open digit: 1/10
SIZE = 16


def family(colour: str, relation: str) -> str:
    """The knowledge fact table: (colour, marker side) -> family."""
    return FAMILIES[(list(COLOURS).index(colour) + RELATIONS.index(relation)) % len(FAMILIES)]


def draw(rng: np.random.Generator, noise: float) -> tuple[np.ndarray, dict]:
    """One image (H, W, 3) in [0, 1] and its facts."""
    img = np.full((SIZE, SIZE, 3), 0.5) + rng.normal(0, noise, (SIZE, SIZE, 3))
    colour = str(rng.choice(list(COLOURS)))
    sy, sx = int(rng.integers(0, 11 - 6 + 1)), int(rng.integers(0, SIZE - 6 + 1))
    img[sy:sy + 6, sx:sx + 6] = COLOURS[colour]
    relation = str(rng.choice(RELATIONS))
    cy, cx = sy + 3, sx + 3   # the square's centre; the marker is placed clearly on one side
    hit = _first_marker(rng, sy, sx, relation)
    if hit is not None:
        my, mx = hit
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
    return np.clip(img, 0, 1), {"colour": colour, "family": family(colour, relation), "digit": digit,
                                "relation": relation}


_TRIES = 200   # marker positions tried before the fallback
_BOUNDS = np.tile([11 - 2 + 1, SIZE - 2 + 1], _TRIES)   # (my, mx) upper bounds, one try after another


def _first_marker(rng: np.random.Generator, sy: int, sx: int, relation: str) -> tuple[int, int] | None:
    """Rejection sampling of the marker's corner: up to 200 tries of (my, mx) drawn one after another,
    the first outside the square on the side `relation`; None if none is. The tries are drawn as one
    array (numpy draws an array of bounded integers as the same sequence of scalar draws; tested) and
    the generator is then advanced by exactly the tries used, so it ends where the one-by-one loop
    `for _ in range(200): my, mx = rng.integers(0, 10), rng.integers(0, 15); ...; break` ends."""
    state = rng.bit_generator.state
    cand = rng.integers(0, _BOUNDS)
    my, mx = cand[0::2], cand[1::2]
    dy, dx = my + 1 - (sy + 3), mx + 1 - (sx + 3)
    outside = (my + 2 <= sy) | (my >= sy + 6) | (mx + 2 <= sx) | (mx >= sx + 6)
    horiz, vert = np.abs(dx) > np.abs(dy) + 1, np.abs(dy) > np.abs(dx) + 1
    side = {"left": horiz & (dx < 0), "right": horiz & (dx >= 0),
            "above": ~horiz & vert & (dy < 0), "below": ~horiz & vert & (dy >= 0)}[relation]
    ok = np.flatnonzero(outside & side)
    if not len(ok):
        return None   # all 200 tries used, as the loop
    j = int(ok[0])
    rng.bit_generator.state = state
    rng.integers(0, _BOUNDS[: 2 * (j + 1)])   # advance past the tries the loop draws
    return int(my[j]), int(mx[j])


def _png_b64(img: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray((img * 255).round().astype(np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def write_tsv(path: Path, n_per_category: int, seed: int, noise: float) -> dict:
    """Write one MiniMME split as a VLMEvalKit TSV (MCQ rows with options A-D; OCR rows as VQA rows
    with empty option cells and the answer text); returns counts."""
    rng = np.random.default_rng(seed)
    pools = {"general": tuple(COLOURS), "knowledge": FAMILIES, "vision": RELATIONS}
    key = {"general": "colour", "knowledge": "family", "ocr": "digit", "vision": "relation"}
    rows = []
    for cat in CATEGORIES:
        for _ in range(n_per_category):
            img, facts = draw(rng, noise)
            right = facts[key[cat]]
            row = {"index": len(rows), "image": _png_b64(img), "question": QUESTIONS[cat], "hint": "",
                   "A": "", "B": "", "C": "", "D": "", "answer": right, "category": cat}
            if cat in pools:
                wrong = [a for a in pools[cat] if a != right]
                options = [right, *rng.choice(wrong, size=3, replace=False)]
                rng.shuffle(options)
                row.update({**dict(zip("ABCD", options)), "answer": "ABCD"[options.index(right)]})
            rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows(rows)
    return {"items": len(rows)}


# ---------------------------------------------------------------------------------------------------
# The reader shared by MiniMME and VLMEvalKit's benchmark TSVs (VLMEvalKit itself is not a pip
# dependency here: its loader pulls its whole model zoo; what it does to a row is re-done below and
# cited). Rows stream one at a time; images stay base64 until an item is scored.

OPTION_LETTERS = tuple("ABCDEFGHIJ")


def _is_ref(image: str) -> bool:
    """VLMEvalKit stores a repeated image as the `index` of the row that holds it (image_base.py: a
    field of at most 64 characters that is an index)."""
    return len(image) <= 64 and image.strip().lstrip("-").isdigit()


def _answers(raw: str) -> list[str]:
    """VQA answers: one text, or a Python/JSON list of accepted answers (TextVQA, DocVQA, OCRBench)."""
    raw = (raw or "").strip()
    if raw.startswith("[") and raw.endswith("]"):
        try:
            import ast

            got = ast.literal_eval(raw)
            return [str(a) for a in got] if isinstance(got, (list, tuple)) else [raw]
        except (ValueError, SyntaxError):
            return [raw]
    return [raw]


def _image_list(img: str, kept: dict) -> list[str]:
    """The images of one row: VLMEvalKit's image_base.py reads a multi-image cell (MMMU) with
    `toliststr`, a Python list literal of base64 strings (or row indices); a single cell is one image."""
    s = img.strip()
    if s.startswith("[") and s.endswith("]"):
        import ast

        try:
            got = ast.literal_eval(s)
        except (ValueError, SyntaxError):
            return [img]
        if isinstance(got, (list, tuple)) and got:
            return [kept.get(str(x).strip(), "") if _is_ref(str(x)) else str(x) for x in got]
    return [img]


def iter_rows(path: Path):
    """Yield the rows of a VLMEvalKit TSV as dicts: index, image (base64, references resolved),
    question, hint, options ({letter: text}), answer (MCQ: the letter; else the accepted answers),
    type (MCQ | VQA), category. A row is skipped (yielded as None) when its MCQ answer is not exactly
    one of its option letters or it has no image. Two passes: the first finds which rows are
    referenced, so only those images are kept in memory."""
    csv.field_size_limit(sys.maxsize)
    referenced = set()
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            img = row.get("image") or ""
            if img and _is_ref(img):
                referenced.add(img.strip())
    kept: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            idx = str(row.get("index", "")).strip()
            img = row.get("image") or ""
            if img and _is_ref(img):
                img = kept.get(img.strip(), "")
            elif idx in referenced:
                kept[idx] = img
            options = {k: row[k] for k in OPTION_LETTERS if k in row and row[k] not in (None, "", "nan")}
            answer = (row.get("answer") or "").strip()
            hint = row.get("hint") or ""
            hint = "" if hint == "nan" else hint
            if not img or (options and (answer not in options or len(options) < 2)):
                yield None
                continue
            images = _image_list(img, kept)
            yield {"index": idx, "image": images[0], "images": images, "question": row.get("question", ""),
                   "hint": hint, "options": options, "answer": answer if options else _answers(answer),
                   "type": "MCQ" if options else "VQA", "category": row.get("category", "")}


def build_prompt(row: dict) -> str:
    """The text an MLLM reads, as VLMEvalKit's ImageMCQDataset.build_prompt writes it (hint, question,
    options, instruction); VQA rows: the question and VLMEvalKit's short-answer instruction."""
    if row["type"] == "MCQ":
        text = f"Hint: {row['hint']}\n" if row["hint"] else ""
        text += f"Question: {row['question']}\nOptions:\n"
        text += "".join(f"{k}. {v}\n" for k, v in row["options"].items())
        return text + "Please select the correct answer from the options above. \n"
    return f"{row['question']}\nAnswer the question using a single word or phrase."


def decode_image(b64: str):
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")


def decode_image_file(path: Path):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def to_arrays(path: Path, size: int = SIZE) -> dict:
    """MiniMME TSV -> the tiny model's arrays: images (N, 3, size, size) float32, question template id
    (N,), allowed answers (N, V) bool (MCQ: its options; VQA: the whole vocabulary), answer id (N,),
    category (N,). Only for MiniMME (its answers are in the tiny vocabulary); the real benchmarks are
    read by iter_rows and answered by an MLLM."""
    from PIL import Image

    lookup = {a: i for i, a in enumerate(ANSWERS)}
    qid = {q: i for i, q in enumerate(QUESTIONS.values())}
    images, q, allowed, y, cats, skipped = [], [], [], [], [], 0
    for row in iter_rows(path):
        if row is None:
            skipped += 1
            continue
        pic = decode_image(row["image"])
        if pic.size != (size, size):
            pic = pic.resize((size, size), Image.BILINEAR)
        images.append(np.asarray(pic, dtype=np.float32).transpose(2, 0, 1) / 255.0)
        mask = np.zeros(len(ANSWERS), bool)
        if row["type"] == "MCQ":
            mask[[lookup[o] for o in row["options"].values()]] = True
            right = row["options"][row["answer"]]
        else:
            mask[:] = True
            right = row["answer"][0]
        q.append(qid[row["question"]])
        allowed.append(mask)
        y.append(lookup[right])
        cats.append(row["category"])
    return {"x": np.stack(images), "q": np.array(q, np.int64), "allowed": np.stack(allowed),
            "y": np.array(y, np.int64), "category": np.array(cats), "skipped": skipped}


def write_items(path: Path, out: Path, group: str) -> dict:
    """Full scale: stream a benchmark TSV into `out` (JSON lines: index, prompt, answer, type, group,
    image file) and its images into `out`'s sibling folder as the original bytes (no decoding into
    pixel arrays: each model family preprocesses its own resolution at evaluation)."""
    img_dir = out.with_suffix("")
    img_dir.mkdir(parents=True, exist_ok=True)
    n = skipped = 0
    with open(out, "w") as f:
        for row in iter_rows(path):
            if row is None:
                skipped += 1
                continue
            names = []
            for k, b64 in enumerate(row["images"]):   # multi-image rows (MMMU): one file per image
                name = f"{row['index']}.img" if k == 0 else f"{row['index']}_{k}.img"
                target = img_dir / name
                if not target.exists():
                    target.write_bytes(base64.b64decode(b64))
                names.append(f"{img_dir.name}/{name}")
            f.write(json.dumps({"index": row["index"], "prompt": build_prompt(row), "answer": row["answer"],
                                "options": row["options"], "type": row["type"], "group": group,
                                "category": row["category"], "image": names[0], "images": names}) + "\n")
            n += 1
    return {"items": n, "skipped": skipped}
