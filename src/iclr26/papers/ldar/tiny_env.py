"""The tiny scale's frozen retriever and frozen reader (card 17, section 6.2), in numpy.

Retriever (the bge-large analogue): hashed TF-IDF bag of words, cosine of question and passage.
Its sorted similarities are the policy's whole state, as in the paper.

Reader (the LLM analogue): a frozen, capacity-limited soft-attention reader. It reads each
passage's fact ("The <key> of <subject> is <value>."), encodes "<key> of <subject>" with a fixed
random projection of character trigrams into `dim` dimensions (its capacity: look-alike names
share most trigrams), and attends over the passages it is given plus a null memory ("not
mentioned") with weights exp(sharpness * cosine). It answers the value with the most attention
mass. Every passage given adds mass somewhere: look-alike subjects and the same subject's other
keys pull mass to wrong values and away from the null memory. That is the distraction the paper
is about; whether it is strong enough is measured (prepare's accuracy-vs-distractors curve and
the claims' precondition), not assumed. Scoring is exact match (the GPT-4o judge's role).

Multi-step questions are answered step by step, as a reader that looks things up would:
reasoning = the relation's value (the bridge entity), then the attribute of that bridge (a wrong
bridge makes the answer wrong); comp = both attributes, then the larger.
No library does either; both are a few lines of numpy.
"""
from __future__ import annotations

import re
import zlib

import numpy as np

from .data import FACT, NOT_MENTIONED, QUESTIONS

WORD = re.compile(r"[a-z0-9]+")


def split_passages(text: str) -> list[str]:
    """The tiny splitter: one passage per blank-line-separated paragraph (full: token windows)."""
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _bucket(token: str, n: int) -> int:
    return zlib.crc32(token.encode()) % n


# ----------------------------------------------------------------------------- retriever
def tfidf_similarities(question: str, passages: list[str], buckets: int) -> np.ndarray:
    """Cosine of hashed TF-IDF vectors; IDF from the document's own passages."""
    def counts(text):
        v = np.zeros(buckets)
        for w in WORD.findall(text.lower()):
            v[_bucket(w, buckets)] += 1.0
        return v

    docs = np.stack([counts(p) for p in passages])
    idf = np.log((1 + len(passages)) / (1 + (docs > 0).sum(0))) + 1.0
    d, q = docs * idf, counts(question) * idf
    d /= np.linalg.norm(d, axis=1, keepdims=True) + 1e-12
    return d @ (q / (np.linalg.norm(q) + 1e-12))


# ----------------------------------------------------------------------------- reader
class Reader:
    """Frozen: its projection is drawn once from `seed` and never trained."""

    def __init__(self, dim: int, sharpness: float, null_score: float, seed: int = 0, buckets: int = 4096):
        self.proj = np.random.default_rng(seed).standard_normal((buckets, dim)) / np.sqrt(dim)
        self.sharpness, self.null_score, self.buckets = sharpness, null_score, buckets
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, key: str) -> np.ndarray:
        if key in self._memo:
            return self._memo[key]
        text = f"#{key.lower()}#"
        v = self.proj[[_bucket(text[i:i + 3], self.buckets) for i in range(len(text) - 2)]].sum(0)
        self._memo[key] = v / (np.linalg.norm(v) + 1e-12)
        return self._memo[key]

    def lookup_scores(self, key: str, subject: str, facts: list[tuple[str, str, str] | None]) -> np.ndarray:
        """Cosine of the sub-question "<key> of <subject>" with each passage's fact (-inf: no fact)."""
        q = self.encode(f"{key} of {subject}")
        return np.array([-np.inf if f is None else float(self.encode(f"{f[0]} of {f[1]}") @ q) for f in facts])

    def answer(self, scores: np.ndarray, values: np.ndarray, masks: np.ndarray, n_values: int) -> np.ndarray:
        """For each mask row (passages given): the answered value id, or -1 for "not mentioned".

        scores [N] (cosines), values [N] (value id per passage, -1 none), masks [M, N] bool."""
        w = np.where(masks & np.isfinite(scores) & (values >= 0), np.exp(self.sharpness * (scores - 1.0)), 0.0)
        mass = np.zeros((masks.shape[0], n_values + 1))
        mass[:, 0] = np.exp(self.sharpness * (self.null_score - 1.0))
        np.add.at(mass.T, np.where(values >= 0, values + 1, 0), w.T)  # value id v -> column v + 1
        return mass.argmax(1) - 1


def parse_facts(passages: list[str]) -> list[tuple[str, str, str] | None]:
    return [(m["key"], m["subject"], m["value"]) if (m := FACT.match(p)) else None for p in passages]


class Episode:
    """One query of one document, ready for the reader: everything a band of passages needs to be
    scored, precomputed once (prepare) so that training calls cost microseconds."""

    @staticmethod
    def build(reader: Reader, row: dict, passages: list[str], vocab: dict) -> dict:
        facts = parse_facts(passages)
        values = np.array([-1 if f is None else vocab.setdefault(f[2], len(vocab)) for f in facts])
        m = QUESTIONS[row["level"]].match(row["question"])
        if m is None:
            raise ValueError(f"question of level {row['level']} not in the synthetic templates: {row['question']!r}")
        g = m.groupdict()
        if row["level"] in ("location", "hallu"):
            steps = [(g["attr"], g["e"])]
        elif row["level"] == "reasoning":
            bridge = next((f[2] for f in facts if f and f[0] == g["rel"] and f[1] == g["e"]), None)
            steps = [(g["rel"], g["e"]), (g["attr"], bridge or "")]
        else:
            steps = [(g["attr"], g["e1"]), (g["attr"], g["e2"])]
        scores = np.stack([reader.lookup_scores(k, s, facts) for k, s in steps])
        gold = np.zeros(len(passages), bool)  # the oracle's passages: the facts the question needs
        for k, s in steps:
            gold |= np.array([f is not None and f[0] == k and f[1] == s for f in facts])
        truth = [vocab.setdefault(str(x), len(vocab)) for x in
                 ([bridge, row["answer"]] if row["level"] == "reasoning" else [])]
        return {"scores": scores, "values": values, "gold": gold, "level": row["level"], "truth": truth,
                "answer": row["answer"], "names": (g.get("e1"), g.get("e2"))}


def correct(reader: Reader, ep: dict, masks: np.ndarray, id_to_value: list[str]) -> np.ndarray:
    """Exact-match reward of the reader's answer for each mask row [M, N] -> [M] float."""
    n = len(id_to_value)
    answers = [reader.answer(s, ep["values"], masks, n) for s in ep["scores"]]
    level = ep["level"]
    if level == "hallu":
        return (answers[0] == -1).astype(float)
    if level == "location":
        return np.array([a >= 0 and id_to_value[a] == ep["answer"] for a in answers[0]], float)
    if level == "reasoning":  # right bridge, then the right value of that bridge
        return ((answers[0] == ep["truth"][0]) & (answers[1] == ep["truth"][1])).astype(float)
    e1, e2 = ep["names"]  # comp: both values read, the larger one's name
    out = []
    for a1, a2 in zip(*answers):
        if a1 < 0 or a2 < 0:
            out.append(False)
            continue
        v1, v2 = _number(id_to_value[a1]), _number(id_to_value[a2])
        out.append(v1 is not None and v2 is not None and v1 != v2 and (e1 if v1 > v2 else e2) == ep["answer"])
    return np.array(out, float)


def _number(text: str):
    return int(text) if text.isdigit() else None


def reader_label(answer_id: int, id_to_value: list[str]) -> str:
    return NOT_MENTIONED if answer_id < 0 else id_to_value[answer_id]
