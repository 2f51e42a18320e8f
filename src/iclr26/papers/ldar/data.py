"""LaRA-schema data: the synthetic generator (tiny, smoke), the pinned LaRA files of the official
repository (full), and the one loader that reads both.

Layout, as the LDAR repository ships LaRA (card 17, section 4):
    datasets/{length}/{type}/<file>                      documents (type: book | financial | paper)
    datasets/query/{length}_{type}_{level}.jsonl         queries: type, level, length, file,
                                                         context_order, question, answer
    datasets/traintest/{length}_{level}_{train|test}.jsonl   the official split (full scale only)
LaRA's book queries say `type: novelette | novel | ...`; their documents are under `book/`, as
the official `train_ldar.py` maps them.

The synthetic documents are passages separated by blank lines. Each passage states one fact,
"The <attr> of <entity> is <value>.", or a relation, "The <rel> of <entity> is <entity2>.", then
a few filler words. Distractors (the point of the paper): look-alike entities (one syllable
changed) with the same attributes and other values, the same entity's other attributes, and
filler passages. Four query levels, LaRA's task types:
    location   "What is the <attr> of <e>?"                        one gold passage
    reasoning  "What is the <attr> of the <rel> of <e>?"           two hops; the second passage
                                                                   names the bridge, not <e>
    comp       "Which of <e1> and <e2> has the larger <attr>?"     two gold passages
    hallu      "What is the <attr> of <e'>?", e' not in the text   answer "not mentioned"
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

LEVELS = ("location", "reasoning", "comp", "hallu")
NOT_MENTIONED = "not mentioned"
BOOK_TYPES = ("novelette", "novel", "novelette_fake", "novel_fake", "book")  # -> datasets/{len}/book

VOCAB = {  # what distinguishes the three context types: their attribute and relation words
    "book": {"attrs": ["age", "height", "savings", "rank", "weight"], "rel": "mentor",
             "syllables": ["ma", "ro", "lin", "de", "va", "ki", "su", "tor", "el", "na", "bri", "go"]},
    "financial": {"attrs": ["revenue", "margin", "debt", "headcount", "dividend"], "rel": "auditor",
                  "syllables": ["ax", "co", "tel", "vor", "bix", "qua", "zen", "tro", "lum", "fin", "cor",
                                "dyn"]},
    "paper": {"attrs": ["accuracy", "recall", "latency", "depth", "width"], "rel": "baseline",
              "syllables": ["net", "former", "gpt", "res", "vit", "bert", "mix", "flow", "hyper", "deep", "graph",
                            "seq"]},
}
FILLER = ("meanwhile the weather stayed calm and the town was quiet as usual that season while many "
          "people walked along the river and talked about old stories from distant places").split()
FACT = re.compile(r"^The (?P<key>[a-z]+) of (?P<subject>[A-Za-z]+) is (?P<value>[A-Za-z0-9]+)\.")
QUESTIONS = {
    "location": re.compile(r"^What is the (?P<attr>[a-z]+) of (?P<e>[A-Za-z]+)\?$"),
    "hallu": re.compile(r"^What is the (?P<attr>[a-z]+) of (?P<e>[A-Za-z]+)\?$"),
    "reasoning": re.compile(r"^What is the (?P<attr>[a-z]+) of the (?P<rel>[a-z]+) of (?P<e>[A-Za-z]+)\?$"),
    "comp": re.compile(r"^Which of (?P<e1>[A-Za-z]+) and (?P<e2>[A-Za-z]+) has the larger (?P<attr>[a-z]+)\?$"),
}


def context_dir(query_type: str) -> str:
    return "book" if query_type in BOOK_TYPES else query_type


# ----------------------------------------------------------------------------- synthetic generator
def _name(rng, syllables, n=3) -> str:
    return "".join(rng.choice(syllables, n, replace=False)).capitalize()


def _look_alike(rng, name: str, syllables, taken: set) -> str:
    """The name with one syllable changed (a different name the reader may confuse with it)."""
    for _ in range(100):
        parts = re.findall("|".join(sorted(syllables, key=len, reverse=True)), name.lower())
        i = int(rng.integers(len(parts)))
        parts[i] = str(rng.choice([s for s in syllables if s not in parts]))
        other = "".join(parts).capitalize()
        if other not in taken:
            return other
    raise RuntimeError("no free look-alike name")


def _passage(rng, text: str, spec: dict) -> str:
    k = int(rng.integers(spec["filler_words"][0], spec["filler_words"][1] + 1))
    return f"{text} {' '.join(rng.choice(FILLER, k))}."


def generate_document(rng, ctype: str, spec: dict) -> tuple[str, list[dict]]:
    """One document of `spec.n_passages` passages and its queries (one per level)."""
    vocab = VOCAB[ctype]
    n_ent, attrs = spec["n_entities"], vocab["attrs"][: spec["n_attrs"]]
    taken: set[str] = set()
    main = []
    while len(main) < n_ent:
        name = _name(rng, vocab["syllables"])
        if name not in taken:
            main.append(name)
            taken.add(name)
    looks = {e: [] for e in main}
    for e in main:
        for _ in range(spec["look_alikes"]):
            looks[e].append(_look_alike(rng, e, vocab["syllables"], taken))
            taken.add(looks[e][-1])
    absent = {e: _look_alike(rng, e, vocab["syllables"], taken) for e in main}  # hallu subjects, never written
    n_values = spec["n_values"]
    value = {(e, a): int(rng.integers(1, n_values + 1)) for e in main for a in attrs}
    for e in main:
        for lk in looks[e]:
            for a in attrs:  # a look-alike never shares the true value (it would not distract)
                value[(lk, a)] = int(rng.choice([v for v in range(1, n_values + 1) if v != value[(e, a)]]))
    mentor = {e: main[(i + 1 + int(rng.integers(n_ent - 1))) % n_ent] for i, e in enumerate(main)}
    facts = [f"The {a} of {e} is {v}." for (e, a), v in value.items()]
    facts += [f"The {vocab['rel']} of {e} is {mentor[e]}." for e in main]
    passages = [_passage(rng, f, spec) for f in facts]
    while len(passages) < spec["n_passages"]:
        passages.append(" ".join(rng.choice(FILLER, int(rng.integers(8, 14)))).capitalize() + ".")
    if len(passages) > spec["n_passages"]:
        raise ValueError(f"{len(passages)} fact passages exceed n_passages {spec['n_passages']}")
    order = rng.permutation(len(passages))
    text = "\n\n".join(passages[i] for i in order)

    e, a = str(rng.choice(main)), str(rng.choice(attrs))
    queries = [{"level": "location", "question": f"What is the {a} of {e}?", "answer": str(value[(e, a)])}]
    e, a = str(rng.choice(main)), str(rng.choice(attrs))
    queries.append({"level": "reasoning", "question": f"What is the {a} of the {vocab['rel']} of {e}?",
                    "answer": str(value[(mentor[e], a)])})
    a = str(rng.choice(attrs))
    pairs = [(x, y) for x in main for y in main if x < y and value[(x, a)] != value[(y, a)]]
    if pairs:
        x, y = pairs[int(rng.integers(len(pairs)))]
        x, y = (x, y) if rng.random() < 0.5 else (y, x)
        queries.append({"level": "comp", "question": f"Which of {x} and {y} has the larger {a}?",
                        "answer": x if value[(x, a)] > value[(y, a)] else y})
    e, a = str(rng.choice(main)), str(rng.choice(attrs))
    queries.append({"level": "hallu", "question": f"What is the {a} of {absent[e]}?", "answer": NOT_MENTIONED})
    return text, queries


def write_synthetic(root: Path, spec: dict, seed: int) -> dict:
    """datasets/{length}/{type}/*.txt and datasets/query/{length}_{type}_{level}.jsonl under root."""
    counts = {}
    for li, length in enumerate(spec["lengths"]):
        lspec = spec["length_spec"][length]
        for ti, ctype in enumerate(spec["types"]):
            rng = np.random.default_rng([seed, li, ti])
            rows = {level: [] for level in LEVELS}
            folder = root / "datasets" / length / ctype
            folder.mkdir(parents=True, exist_ok=True)
            for d in range(spec["docs_per_type"]):
                text, queries = generate_document(rng, ctype, {**spec["document"], **lspec})
                name = f"{length}_{ctype}_{d}.txt"
                (folder / name).write_text(text, encoding="utf-8")
                for q in queries:
                    rows[q["level"]].append({"type": ctype, "level": q["level"], "length": length, "file": name,
                                             "context_order": 0, "question": q["question"], "answer": q["answer"]})
            (root / "datasets" / "query").mkdir(parents=True, exist_ok=True)
            for level, level_rows in rows.items():
                path = root / "datasets" / "query" / f"{length}_{ctype}_{level}.jsonl"
                path.write_text("".join(json.dumps(r) + "\n" for r in level_rows), encoding="utf-8")
                counts[f"{length}_{ctype}_{level}"] = len(level_rows)
    return counts


# ----------------------------------------------------------------------------- the official files (full)
def acquire_pinned(root: Path, spec: dict, log=None) -> dict:
    """Every file of data.<slot>.files (url, sha256 at the pinned commit) under root/datasets/."""
    from iclr26.core.acquire import download

    total = 0
    for i, entry in enumerate(spec["files"]):
        dest = root / "datasets" / entry["path"]
        download(entry["url"], dest, entry["sha256"])
        total += dest.stat().st_size
        if log:
            log(f"{i + 1}/{len(spec['files'])} files, {total >> 20} MiB", every_s=30)
    return {"files": len(spec["files"]), "bytes": total, "commit": spec.get("commit")}


# ----------------------------------------------------------------------------- the one loader
def read_rows(path: Path) -> list[dict]:
    """A query file: jsonl (datasets/query) or one JSON list (the official traintest files)."""
    text = Path(path).read_text(encoding="utf-8").strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_queries(root: Path, length: str, types, levels) -> list[dict]:
    rows = []
    for ctype in types:
        for level in levels:
            path = root / "datasets" / "query" / f"{length}_{ctype}_{level}.jsonl"
            if path.exists():
                rows += read_rows(path)
    return rows


def load_document(root: Path, row: dict) -> str:
    path = root / "datasets" / row["length"] / context_dir(row["type"]) / row["file"]
    return path.read_text(encoding="utf-8")


def split_queries(rows: list[dict], seed: int, train_fraction: float) -> tuple[list[int], list[int]]:
    """The official code's split: per (context type, task type), shuffle and take the first 80% for
    training (data.py of the official code splits each type-and-level query file). Seeded per run
    seed (the official code: seed 42, one split). Returns row indices."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    strata = sorted({(context_dir(r["type"]), r["level"]) for r in rows})
    for ctype, level in strata:
        idx = [i for i, r in enumerate(rows) if context_dir(r["type"]) == ctype and r["level"] == level]
        idx = [idx[j] for j in rng.permutation(len(idx))]
        n = int(len(idx) * train_fraction)
        train += idx[:n]
        test += idx[n:]
    return sorted(train), sorted(test)
