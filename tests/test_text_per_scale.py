"""Text that quotes a setting is true at every scale.

A table title, section name, column or method label, note, claim text or deviation that quotes a
setting ("150 steps, depth 4") must say what that scale runs. Papers write such quotes as
OmegaConf interpolations (`"${train.steps} steps"`, resolved when the config is composed) or
override the text in the scale's file. This test composes every paper at every scale and flags a
number that a text keeps unchanged from another scale where it was a setting's value, next to a
word of that setting's name, while this scale sets it to something else: the stale quote that made
full-scale tables say "150 steps, depth 4".

The paper's own numbers (`paper:`, `reported:`) are quotes of the paper, not settings; they are
not checked.
"""
from __future__ import annotations

import re
from itertools import permutations

import pytest

from iclr26.core.config import SCALES, compose_job_config
from iclr26.core.paper import all_papers

TEXT_KEYS = {"title", "subtitle", "name", "label", "labels", "claim", "note", "notes", "what", "why",
             "deviations", "caption"}
SKIP_KEYS = {"paper", "reported", "source"}
# words too common to tie a number to a setting
GENERIC = {"n", "lo", "hi", "max", "min", "per", "num", "of", "the", "size", "rate", "value", "data", "train",
           "eval", "method", "methods", "table", "config", "model", "kind", "test", "seed", "batch"}
NUMBER = re.compile(r"(?<![\w.])(\d+(?:,\d{3})+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(k|K|M|%)?(?![\w])")
WINDOW = 4  # words either side of a number in which a setting's name must appear


def _texts(node, path=(), in_text=False):
    """(path, text) of every string under a text key."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in SKIP_KEYS:
                continue
            yield from _texts(value, path + (str(key),), in_text or key in TEXT_KEYS)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _texts(value, path + (str(i),), in_text)
    elif isinstance(node, str) and in_text:
        yield ".".join(path), node


def _settings(node, path=()):
    """path -> value of every numeric setting, plus the number of seeds."""
    out = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key in SKIP_KEYS or key in TEXT_KEYS:
                continue
            out.update(_settings(value, path + (str(key),)))
    elif isinstance(node, list):
        if path and path[-1] == "seeds":
            out[path + ("count",)] = len(node)
        for i, value in enumerate(node):
            out.update(_settings(value, path + (str(i),)))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        out[path] = float(node)
    return out


def _numbers(text: str):
    """(value, word index) of every number written in the text (40,000, 40k and 2e-3 included)."""
    for match in NUMBER.finditer(text):
        raw, suffix = match.group(1).replace(",", ""), match.group(2)
        value = float(raw) * {"k": 1e3, "K": 1e3, "M": 1e6, "%": 1e-2, None: 1}[suffix]
        yield value, len(text[: match.start()].split())


def _name_words(path: tuple) -> set[str]:
    words = set()
    for part in path:
        if part.isdigit():
            continue
        words.update(w for w in re.split(r"[_\W]+", part.lower()) if len(w) > 1 and w not in GENERIC)
    return words


def _near(text: str, index: int, words: set[str]) -> bool:
    tokens = [t.lower() for t in re.split(r"[\s,;:()/=]+", text)]
    nearby = " ".join(tokens[max(0, index - WINDOW): index + WINDOW + 2])
    return any(re.search(rf"\b{re.escape(w)}", nearby) for w in words)


def stale_quotes(configs: dict[str, dict]) -> list[str]:
    """One line per number that a text carries over from another scale where it quoted a setting
    (and which quotes no setting of its own scale)."""
    texts = {scale: dict(_texts(cfg)) for scale, cfg in configs.items()}
    settings = {scale: _settings(cfg) for scale, cfg in configs.items()}
    problems = set()
    for here, there in permutations(configs, 2):
        for where, text in texts[here].items():
            if texts[there].get(where) != text:
                continue  # overridden (or interpolated) per scale
            for value, index in _numbers(text):
                if any(v == value and _near(text, index, _name_words(p)) for p, v in settings[here].items()):
                    continue  # it quotes a setting of this scale with that value
                for path, quoted in settings[there].items():
                    actual = settings[here].get(path)
                    if quoted != value or actual == value:
                        continue
                    if _near(text, index, _name_words(path)):
                        now = "unset" if actual is None else f"{actual:g}"
                        problems.add(f"{where} at {here}: {text!r} quotes {'.'.join(path)} = {value:g}, "
                                     f"its value at {there}; at {here} it is {now}")
    return sorted(problems)


def test_checker_finds_a_stale_quote_and_passes_an_interpolated_one():
    tiny = {"train": {"steps": 150, "depth": 4}, "table": {"title": "ViT, 150 steps, depth 4"}}
    full = {"train": {"steps": 90000, "depth": 12}, "table": {"title": "ViT, 150 steps, depth 4"}}
    problems = stale_quotes({"tiny": tiny, "full": full})
    assert any("train.steps = 150" in p and "at full" in p for p in problems)
    assert any("train.depth = 4" in p for p in problems)
    full["table"]["title"] = "ViT, 90,000 steps, depth 12"  # what an interpolation resolves to
    assert stale_quotes({"tiny": tiny, "full": full}) == []
    # a number next to no word of the setting's name is not a quote of it
    tiny["table"]["title"] = full["table"]["title"] = "ViT on 150 classes"
    tiny["table"]["title"] = full["table"]["title"] = "top 4 of the paper's table"
    assert stale_quotes({"tiny": tiny, "full": full}) == []


def test_seed_counts_are_settings():
    tiny = {"seeds": list(range(8)), "table": {"title": "IQM over 8 seeds"}}
    full = {"seeds": [0, 1, 2], "table": {"title": "IQM over 8 seeds"}}
    assert any("seeds.count = 8" in p for p in stale_quotes({"tiny": tiny, "full": full}))


@pytest.mark.parametrize("slug", sorted(all_papers()))
def test_texts_quote_the_settings_of_their_scale(slug):
    configs = {scale: compose_job_config(slug, scale) for scale in SCALES}
    problems = stale_quotes(configs)
    assert not problems, (f"{slug}: {len(problems)} text(s) quote a setting of another scale; write the "
                          "number as ${...} or override the text per scale:\n" + "\n".join(problems))


INTERVAL_WORDS = re.compile(r"\bCI\b|confidence|bootstrap|interval", re.IGNORECASE)


def range_cells_called_intervals(cfg: dict) -> list[str]:
    """Texts that promise an interval where a column's cells are only the seeds' range (a median or
    IQM over fewer seeds than a bootstrap needs): the reader must not take a range for a 95% CI."""
    from iclr26.core.stats import BOOT_MIN_N

    if len(cfg.get("seeds", [])) >= BOOT_MIN_N:
        return []
    table = cfg.get("table") or {}
    problems = []
    if any(c.get("agg") in ("median", "iqm") for s in table.get("sections", []) for c in s.get("columns", [])):
        texts = [("table.title", table.get("title", ""))]
        texts += [(f"table.sections.{i}.name", s.get("name", "")) for i, s in enumerate(table.get("sections", []))]
        texts += [(f"table.sections.{i}.columns.{j}.label", c.get("label", ""))
                  for i, s in enumerate(table.get("sections", [])) for j, c in enumerate(s.get("columns", []))
                  if c.get("agg") in ("median", "iqm")]
        problems += [f"{where}: {text!r} promises an interval; with {len(cfg['seeds'])} seeds its median/IQM "
                     "cells are the seeds' range" for where, text in texts if INTERVAL_WORDS.search(text or "")]
    return problems


def test_checker_finds_a_range_called_a_ci():
    cfg = {"seeds": [0, 1, 2], "table": {"title": "IQM, 95% bootstrap CI over seeds",
                                         "sections": [{"columns": [{"metric": "r", "agg": "iqm"}]}]}}
    assert range_cells_called_intervals(cfg)
    cfg["seeds"] = list(range(8))
    assert not range_cells_called_intervals(cfg)


@pytest.mark.parametrize("slug", sorted(all_papers()))
def test_no_seed_range_is_called_an_interval(slug):
    problems = [f"{scale}: {p}" for scale in SCALES
                for p in range_cells_called_intervals(compose_job_config(slug, scale))]
    assert not problems, f"{slug}:\n" + "\n".join(problems)
