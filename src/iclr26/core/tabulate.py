"""The tabulate stage: every seed's records -> the paper's table, claims and figures.

Writes into results/<slug>/: table.{md,csv,tex}, claims.json, records.csv (every record, for
anyone who wants to recompute), figures (*.png), config.yaml (resolved) and provenance.json.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml

from . import faults
from .claims import check_claims
from .config import compose_job_config, tabulate_digest
from .io import atomic_path, atomic_write, write_json
from .job import load_records
from .paper import core_digest, get_paper
from .provenance import provenance
from .tables import build_sections, render_csv, render_latex, render_markdown


def _seed_text(seeds: list[int]) -> str:
    return f"{len(seeds)} seeds ({', '.join(map(str, seeds))})" if seeds else "no seeds"


def tiny_history(slug: str, deviations: list) -> list:
    """The post-hoc items of the paper's tiny configuration that `deviations` (another scale's list)
    does not restate: a scale file replaces the deviation list, and the history must not go with it."""
    def what(item) -> str:   # an item may start with an id, "[schedule] ...": restated under that id
        text = item if isinstance(item, str) else item["what"]
        found = re.match(r"\[[\w.-]+\]", text)
        return found.group(0) if found else text

    here = {what(d) for d in deviations}
    tiny = compose_job_config(slug, "tiny").get("deviations") or []
    return [d for d in tiny if isinstance(d, dict) and d.get("post_hoc") and what(d) not in here]


def tabulate_paper(slug: str, scale: str, overrides, seeds, eval_files, out_dir) -> Path:
    paper = get_paper(slug)
    cfg = compose_job_config(slug, scale, tuple(overrides), seeds)
    faults.enter_stage("tabulate")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = pd.DataFrame(load_records(eval_files, cfg))
    if records.empty:
        raise ValueError(f"paper {slug}: the evaluate jobs produced no records")

    spec, labels = cfg.get("table") or {}, (cfg.get("table") or {}).get("method_labels", {})
    sections = build_sections(spec, records, list(paper.methods))
    claims = check_claims(cfg.get("claims") or [], records, cfg)

    figures = []
    module = paper.module()
    if hasattr(module, "figures"):
        figures = [Path(f).name for f in module.figures(cfg, records, out) or []]
    if sorted(figures) != sorted(paper.figures):
        raise ValueError(f"paper {slug}: figures() wrote {sorted(figures)}, "
                         f"the declaration lists {sorted(paper.figures)}")
    for stale in set(p.name for p in out.glob("*.png")) - set(figures):
        (out / stale).unlink()  # a figure the paper no longer draws must not outlive it in results/

    title = f"{paper.title} — {spec.get('title', 'headline table')}"
    reported = "; the paper's numbers are at its own scale" if (cfg.get("reported") or {}).get("rows") else ""
    scale_note = {"smoke": "smoke scale (test-sized; numbers mean nothing)",
                  "tiny": "tiny scale: our CPU miniature of the experiment" + reported,
                  "full": "full scale: the paper's setting"}[scale]
    ids = " · ".join(x for x in (f"arXiv {paper.arxiv}" if paper.arxiv else "",
                                 f"OpenReview {paper.openreview}" if paper.openreview else "",
                                 f"code {paper.code}" if paper.code else "") if x)
    subtitle = f"**Ours: {scale_note}**, {_seed_text(cfg['seeds'])}. {ids}"
    markdown = render_markdown(title, subtitle, sections, labels, cfg.get("reported") or {}, claims, figures,
                               list(spec.get("notes", [])), list(cfg.get("deviations") or []),
                               tiny_history(slug, list(cfg.get("deviations") or [])) if scale == "full" else None)
    atomic_write(out / "table.md", markdown)
    atomic_write(out / "table.csv", render_csv(sections, labels, cfg.get("reported") or {}, scale))
    atomic_write(out / "table.tex", render_latex(f"{title} ({scale} scale)", sections, labels))
    with atomic_path(out / "records.csv") as tmp:
        records.drop(columns=[c for c in records.columns if records[c].map(lambda v: isinstance(v, list)).any()]) \
            .to_csv(tmp, index=False, float_format="%.8g")
    faults.reached("done")  # tests: a kill with the table written and the rest not
    atomic_write(out / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    meta = provenance(stage="tabulate", paper=slug, scale=scale, inputs=[str(p) for p in eval_files],
                      config_digest=tabulate_digest(cfg, paper.source_digest()),
                      code={"paper": paper.source_digest(), "core": core_digest()})
    write_json(out / "provenance.json", meta)
    return write_json(out / "claims.json", {"paper": slug, "title": paper.title, "scale": scale,
                                            "seeds": cfg["seeds"], "claims": claims, "provenance": meta})
