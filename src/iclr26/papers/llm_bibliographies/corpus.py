"""The corpus in SciSciNet's release format, and the one loader that reads it at every scale.

Files (SciSciNet v1 on figshare, collection 10.6084/m9.figshare.c.6076908.v1; the column names are
the release's, as the companion pipeline AndresAlgaba/LLMs_scientific_literature reads them):

    SciSciNet_Papers.tsv                       PaperID, DOI, DocType, Year, JournalID, Reference_Count,
                                               Citation_Count, Team_Size (the columns we use)
    SciSciNet_PaperFields.tsv                  PaperID, FieldID (several rows per paper: its top-level
                                               field and its subfields)
    SciSciNet_Fields.tsv                       FieldID, Field_Type ('Top' | 'Sub'; the companion's
                                               01_merge.py joins it and 03_sample.py keeps 'Top')
    SciSciNet_PaperDetails.tsv.zip             PaperID, PaperTitle (the release ships it zipped)
    SciSciNet_PaperReferences.tsv.zip          Citing_PaperID, Cited_PaperID (zipped, ~30 GB unzipped)

plus the abstracts the companion fetched from CrossRef / Semantic Scholar for its focal papers
(`abstracts.tsv`: PaperID, Abstract; tiny: written by the generator).

Tiny scale writes the same files from a seeded generator (`write_synthetic`): papers with a latent
topic, titles and abstracts drawn from topic word distributions, and a human citation process
(similarity x preferential attachment x recency, plus triadic closure). The loader (`stream_rows`)
reads every table in chunks with only the columns asked for and keeps only the rows a predicate
keeps, so the full release is never held in memory.
"""
from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

PAPERS = "SciSciNet_Papers.tsv"
FIELDS = "SciSciNet_PaperFields.tsv"
FIELD_TYPES = "SciSciNet_Fields.tsv"
DETAILS = "SciSciNet_PaperDetails.tsv.zip"
REFERENCES = "SciSciNet_PaperReferences.tsv.zip"
ABSTRACTS = "abstracts.tsv"
PAPER_COLUMNS = ["PaperID", "DOI", "DocType", "Year", "JournalID", "Reference_Count", "Citation_Count", "Team_Size"]


# ----------------------------------------------------------------------------- the loader
def _open(path: Path):
    """A text handle on a release file: a .zip holds one .tsv member (the release's zips); macOS
    resource forks (`__MACOSX/`, `._*`) are skipped."""
    if path.suffix == ".zip":
        archive = zipfile.ZipFile(path)
        member = next(n for n in archive.namelist() if n.endswith(".tsv") and not n.startswith("__MACOSX/")
                      and not n.rsplit("/", 1)[-1].startswith("._"))
        return io.TextIOWrapper(archive.open(member), encoding="utf-8")
    return open(path, encoding="utf-8")


def stream_rows(path: Path, usecols: list[str], keep: Callable[[pd.DataFrame], np.ndarray] | None = None,
                chunksize: int = 1_000_000, dtype: dict | None = None) -> pd.DataFrame:
    """The rows of one release table (only `usecols`) for which `keep(chunk)` is true, read in chunks."""
    parts = []
    with _open(Path(path)) as handle:
        for chunk in pd.read_csv(handle, sep="\t", usecols=usecols, dtype=dtype, chunksize=chunksize):
            parts.append(chunk if keep is None else chunk[keep(chunk)])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=usecols)


def _write_zip(path: Path, member: str, frame: pd.DataFrame) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, frame.to_csv(sep="\t", index=False))


# ----------------------------------------------------------------------------- tiny generator
def _topics(rng, spec):
    """Latent topic vectors: field centroid + subfield offset + paper noise (card 6.1)."""
    n, d = spec["n_papers"], spec["topic_dim"]
    nf, ns = spec["n_fields"], spec["n_subfields"]
    field_c = rng.normal(size=(nf, d)) * spec["field_scale"]
    sub_c = rng.normal(size=(nf, ns, d)) * spec["subfield_scale"]
    field = rng.integers(nf, size=n)
    sub = rng.integers(ns, size=n)
    z = field_c[field] + sub_c[field, sub] + rng.normal(size=(n, d)) * spec["paper_scale"]
    return field, sub, z


def _texts(rng, z, spec) -> tuple[list[str], list[str]]:
    """Titles and abstracts: words drawn from a topic-dependent distribution over a vocabulary
    (each word has a topic loading; a paper's word logits are loading . z) plus generic words."""
    vocab, d = spec["vocab"], z.shape[1]
    loadings = rng.normal(size=(vocab, d))
    generic = spec["generic_fraction"]

    def draw(i, n_words):
        logits = loadings @ z[i] * spec["word_sharpness"] / np.sqrt(d)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        topical = rng.choice(vocab, size=n_words, p=p)
        mask = rng.random(n_words) < generic
        topical[mask] = rng.integers(spec["n_generic"], size=mask.sum()) + vocab  # generic words
        return " ".join(f"w{w}" for w in topical)

    lo, hi = spec["abstract_words"]
    titles = [draw(i, spec["title_words"]) for i in range(len(z))]
    abstracts = [draw(i, int(rng.integers(lo, hi + 1))) for i in range(len(z))]
    return titles, abstracts


def _weighted_draw(rng: np.random.Generator, p: np.ndarray) -> int:
    """rng.choice(len(p), p=p) without its argument checks (p is a probability vector by
    construction): numpy's own inverse-CDF steps, so the same draw from the same generator state."""
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return int(cdf.searchsorted(rng.random(), side="right"))


def human_citations(rng, year, z, spec) -> list[list[int]]:
    """Reference lists of the human citation process (card 6.1): paper i cites earlier papers j with
    probability proportional to exp(beta cos(z_i, z_j)) (1 + citations_j)^alpha exp(-(y_i - y_j)/tau),
    and with probability `triadic` a reference of an already cited paper (triadic closure). Papers
    arrive in year order, so citation counts grow as the corpus does (preferential attachment)."""
    c = spec["citations"]
    n = len(year)
    unit = z / np.linalg.norm(z, axis=1, keepdims=True)
    cites = np.zeros(n)
    refs: list[list[int]] = [[] for _ in range(n)]
    order = np.argsort(year, kind="stable")
    mean, disp = c["mean_refs"], c["dispersion"]
    for i in order:
        earlier = np.flatnonzero(year < year[i])
        if len(earlier) == 0:
            continue
        k = int(rng.negative_binomial(disp, disp / (disp + mean)))
        k = min(max(k, c["min_refs"]), c["max_refs"], len(earlier))
        logw = (c["beta"] * (unit[earlier] @ unit[i]) + c["alpha"] * np.log1p(cites[earlier])
                - (year[i] - year[earlier]) / c["recency_tau"])
        w = np.exp(logw - logw.max())  # the weights of the papers not taken yet (taken: 0)
        chosen: list[int] = []
        taken = np.zeros(n, bool)
        while len(chosen) < k:
            j = -1
            if chosen and rng.random() < c["triadic"]:
                pool = [r for r in refs[chosen[rng.integers(len(chosen))]] if not taken[r]]
                if pool:
                    j = pool[rng.integers(len(pool))]
            if j < 0:
                total = w.sum()
                if total <= 0:
                    break
                j = int(earlier[_weighted_draw(rng, w / total)])
            taken[j] = True
            at = np.searchsorted(earlier, j)
            if at < len(earlier) and earlier[at] == j:
                w[at] = 0.0
            chosen.append(j)
        refs[i] = chosen
        cites[chosen] += 1
    return refs


def write_synthetic(out: Path, spec: dict, seed: int) -> dict:
    """The tiny corpus as release files in `out`."""
    rng = np.random.default_rng(seed)
    n = spec["n_papers"]
    field, sub, z = _topics(rng, spec)
    year = rng.integers(1, spec["n_years"] + 1, size=n)
    titles, abstracts = _texts(rng, z, spec)
    refs = human_citations(rng, year, z, spec)
    ids = np.arange(n) + spec["id_offset"]  # MAG-like ids, not row numbers
    citing = np.concatenate([np.full(len(r), ids[i]) for i, r in enumerate(refs)]).astype(np.int64)
    cited = np.concatenate([ids[r] for r in refs if r] or [np.zeros(0, int)]).astype(np.int64)
    cites = np.bincount(np.concatenate([np.asarray(r, int) for r in refs if r]), minlength=n)
    papers = pd.DataFrame({"PaperID": ids, "DOI": [f"10.0000/syn.{i}" for i in ids], "DocType": "Journal",
                           "Year": year + spec["year_offset"], "JournalID": 1000 + field * 10 + sub,
                           "Reference_Count": [len(r) for r in refs], "Citation_Count": cites,
                           "Team_Size": rng.integers(1, 8, size=n)})
    out.mkdir(parents=True, exist_ok=True)
    papers.to_csv(out / PAPERS, sep="\t", index=False)
    # two field rows per paper, as the release: its top-level field and its subfield (interleaved, so the
    # first row of a paper is not always the top one); the field table says which is which
    top, subfield = 100 + field, 1000 + field * 10 + sub
    first_sub = rng.random(n) < 0.5
    pairs = np.stack([np.where(first_sub, subfield, top), np.where(first_sub, top, subfield)], 1)
    pd.DataFrame({"PaperID": np.repeat(ids, 2), "FieldID": pairs.ravel()}).to_csv(out / FIELDS, sep="\t", index=False)
    subfields = 1000 + np.arange(spec["n_fields"])[:, None] * 10 + np.arange(spec["n_subfields"])
    field_ids = np.concatenate([100 + np.arange(spec["n_fields"]), subfields.ravel()])
    pd.DataFrame({"FieldID": field_ids, "Field_Type": np.where(field_ids < 1000, "Top", "Sub")}).to_csv(
        out / FIELD_TYPES, sep="\t", index=False)
    pd.DataFrame({"PaperID": ids, "Abstract": abstracts}).to_csv(out / ABSTRACTS, sep="\t", index=False)
    _write_zip(out / DETAILS, "SciSciNet_PaperDetails.tsv", pd.DataFrame({"PaperID": ids, "PaperTitle": titles}))
    _write_zip(out / REFERENCES, "SciSciNet_PaperReferences.tsv",
               pd.DataFrame({"Citing_PaperID": citing, "Cited_PaperID": cited}))
    citing_papers = max(1, int((papers.Reference_Count > 0).sum()))
    return {"papers": n, "references": len(citing), "mean_refs": float(len(citing) / citing_papers)}


def choose_focal(papers: pd.DataFrame, spec: dict, seed: int) -> np.ndarray:
    """Focal papers (the companion's 03_sample.py rules where they apply): journal papers of the
    focal years with min_refs..max_refs references and at least one citation, a seeded sample."""
    f = spec["focal"]
    ok = ((papers.DocType == "Journal") & papers.Year.between(*f["years"])
          & papers.Reference_Count.between(f["min_refs"], f["max_refs"]) & (papers.Citation_Count >= 1))
    pool = papers.PaperID[ok].to_numpy()
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(pool, size=min(f["n"], len(pool)), replace=False))


def ids_in(values: Iterable[int]) -> Callable[[pd.DataFrame], np.ndarray]:
    wanted = np.asarray(sorted(set(int(v) for v in values)), dtype=np.int64)
    return lambda chunk: np.isin(chunk.iloc[:, 0].to_numpy(np.int64), wanted)
