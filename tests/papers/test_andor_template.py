"""Card 05 (AND-OR template): the method's unit tests and the offline full-scale path."""
from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

from iclr26.papers.andor_template import layouts, stages
from iclr26.papers.andor_template import template as T

SPEC = dict(n_images=600, good_fraction=0.6, jitter=[0.01, 0.06], n_raters=10, rater_slope=8.0, rater_offset=0.35,
            rater_noise=1.0, id_offset=100, challenge_id=7)
CFG = dict(bins=5, tau=0.02, max_features=8, branches=2, em_iters=6, min_branch=5, eps=1e-3,
           expansion=dict(match_percentile=10, min_candidates=10, gain_ratio=0.5, max_new=1))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("raw")
    layouts.write_synthetic(out, SPEC, 0)
    return out, layouts.load(out)


def test_release_format_and_loader(data):
    out, df = data
    first = (out / layouts.RATINGS).read_text().splitlines()[0].split()
    assert len(first) == 15 and sum(map(int, first[2:12])) == SPEC["n_raters"] and first[14] == "7"
    assert len(df) == SPEC["n_images"] and df.mean_score.between(1, 10).all()
    # good layouts are rated above random ones (the raters see the paradigms)
    assert df.mean_score[df.paradigm >= 0].mean() > df.mean_score[df.paradigm < 0].mean() + 1.0
    # the loader's part centres are the generator's paradigm geometry (jitter only)
    g = layouts.geometry_of(df[df.paradigm >= 0])
    assert np.median(-layouts.quality(g)) < 0.15


def test_closed_form_matches_moments_and_exclusivity():
    d = T.Dictionary.make(5)
    q = T.reference_q(d, 5000, 0, 1e-3)
    rng = np.random.default_rng(0)
    g = np.clip(np.array([1 / 3, 1 / 3, 2 / 3, 2 / 3, 1 / 3]) + rng.normal(0, 0.04, (300, 5)), 0, 1)
    h = d.features(g)
    br = T.pursue(h, q, d, 0.02, 8, 1e-3)
    assert 0 < len(br.selected) <= 8
    p_model = q[br.selected] * np.exp(br.lam) / np.exp(br.log_z)   # E_p[h_j] of the fitted model
    assert np.allclose(p_model, np.clip(h.mean(0), 1e-3, 1 - 1e-3)[br.selected])
    for a in br.selected:   # no two selected terms are grid neighbours in one block
        assert not set(d.neighbours(a)) - {a} & set(br.selected)
    assert (br.score(h) > 0).mean() > 0.9   # the layouts it was learned from gain against q
    assert br.score(d.features(rng.uniform(0, 1, (300, 5)))).mean() < 0


def _paradigm_sample(p, n, rng):
    options = [g for k, g in layouts.CONFIGS if k == p]
    return np.clip(np.stack([options[rng.integers(len(options))] for _ in range(n)]) + rng.normal(0, 0.03, (n, 5)),
                   0, 1)


def test_expansion_adds_a_branch_only_for_an_unseen_paradigm():
    d = T.Dictionary.make(5)
    q = T.reference_q(d, 5000, 0, 1e-3)
    rng = np.random.default_rng(1)
    good = d.features(np.concatenate([_paradigm_sample(1, 80, rng), _paradigm_sample(2, 80, rng)]))
    tpl = T.em(good, q, d, CFG, 0)
    seen_pool = d.features(np.concatenate([_paradigm_sample(1, 60, rng), _paradigm_sample(2, 60, rng)]))
    new_pool = np.concatenate([seen_pool[:60], d.features(_paradigm_sample(0, 60, rng))])
    assert T.expand(tpl, good, seen_pool, q, d, CFG, 0)[1] == 0
    expanded, added = T.expand(tpl, good, new_pool, q, d, CFG, 0)
    assert added == 1 and len(expanded.branches) > len(tpl.branches)
    fresh = d.features(_paradigm_sample(0, 100, rng))
    assert expanded.score(fresh).mean() > tpl.score(fresh).mean()


def test_prescription_moves_the_part_into_the_missing_term():
    d = T.Dictionary.make(5)
    q = T.reference_q(d, 5000, 0, 1e-3)
    rng = np.random.default_rng(2)
    tpl = T.em(d.features(_paradigm_sample(1, 150, rng)), q, d, dict(CFG, branches=1), 0)
    g = np.array([[0.05, 0.95, 0.5, 0.82, 0.5]])   # central layout with the main part in a corner
    j = T.prescribe(tpl, d.features(g), d)[0]
    assert j is not None
    moved = T.apply_edit(g[0], j, d)
    assert d.features(moved[None])[0, j] == 1
    assert tpl.score(d.features(moved[None]))[0] > tpl.score(d.features(g))[0]
    spec = dict(rater_slope=8.0, rater_offset=0.35)
    assert layouts.expected_score(moved[None], spec)[0] > layouts.expected_score(g, spec)[0]


AVA_LINES = ["1 953619 0 1 5 17 38 36 15 6 5 1 1 22 1396", "2 953958 10 7 15 26 26 21 10 8 1 2 1 21 1396",
             "3 954184 0 0 4 8 41 56 10 3 4 0 0 0 1396"]


def test_full_scale_path_reads_release_files(tmp_path):
    manual, out = tmp_path / "manual", tmp_path / "raw"
    manual.mkdir()
    out.mkdir()
    (manual / layouts.RATINGS).write_text("\n".join(AVA_LINES) + "\n")
    parts = [{"image_id": 953619, "width": 800, "height": 533, "paradigm": 0,
              "parts": [{"label": "main", "box": [200, 100, 330, 250]}]},
             {"image_id": 953958, "width": 500, "height": 500, "paradigm": -1,
              "parts": [{"label": "main", "box": [0, 0, 100, 100]}, {"label": "secondary", "box": [300, 300, 400, 400]},
                        {"label": "horizon", "box": [0, 240, 500, 260]}]},
             {"image_id": 954184, "width": 640, "height": 480, "parts": []}]   # no main part: dropped
    (manual / layouts.PARTS).write_text("".join(json.dumps(p) + "\n" for p in parts))
    spec = {"source": "ava", "manual_dir": str(manual), "manual_step": "place them"}
    job = SimpleNamespace(cfg={"data": {"layouts": spec}}, dataset="layouts", out_dir=out, log=lambda *a, **k: None)
    info = stages.acquire(job)
    assert info[layouts.RATINGS] == hashlib.sha256((manual / layouts.RATINGS).read_bytes()).hexdigest()
    df = layouts.load(out)
    assert list(df.image_id) == [953619, 953958]
    counts = np.array([0, 1, 5, 17, 38, 36, 15, 6, 5, 1])
    assert df.mean_score.iloc[0] == pytest.approx(counts @ np.arange(1, 11) / counts.sum())
    assert np.allclose(layouts.geometry_of(df)[0], [265 / 800, 175 / 533, 0.5, 0.5, 0.5])
    assert np.allclose(layouts.geometry_of(df)[1], [0.1, 0.1, 0.7, 0.7, 0.5])
    (manual / layouts.PARTS).unlink()
    with pytest.raises(FileNotFoundError, match="place"):
        stages.acquire(job)


def test_parse_tree_names_unknown_paradigm_ids():
    # full scale: AVA style ids lie outside the generator's -1..2; the parse tree must not crash on them
    d = T.Dictionary.make(5)
    q = T.reference_q(d, 3000, 0, 1e-3)
    rng = np.random.default_rng(3)
    h = d.features(_paradigm_sample(1, 60, rng))
    tpl = T.em(h, q, d, dict(CFG, branches=1), 0)
    tree = stages.parse_tree(tpl, d, tpl.parse(h), np.array([7] * 30 + [1] * 30))
    assert tree["branches"][0]["expert_paradigms"] == {"paradigm_7": 30, "central_symmetry": 30}


def test_equal_access_helpers_and_nmi():
    cfg = {"template": {"good_fraction": 0.5}}
    data = {"score": np.array([1.0, 2.0, 9.0, 7.0, 5.0, 3.0])}
    lab = np.array([0, 1, 2, 3])
    assert set(stages.good_of(cfg, data, lab)) == {2, 3}
    assert stages.pool_pseudo_label(cfg, data, lab) == pytest.approx(8.0)
    para = np.array([0, 0, 1, 1, 2, 2, -1])
    # purity rewards splitting into singletons, NMI less so; a relabelled perfect parse has NMI 1
    assert stages.nmi(np.array([5, 5, 3, 3, 4, 4, 0]), para) == pytest.approx(1.0)
    assert stages.purity(np.arange(7), para) == 1.0 and stages.nmi(np.arange(7), para) < 0.9


def test_guidance_controls_differ(tmp_path):
    spec = dict(source="synthetic", rater_slope=8.0, rater_offset=0.35)
    cfg = {"data": {"layouts": spec}, "eval": {"n_guide": 40}}
    d = T.Dictionary.make(5)
    q = T.reference_q(d, 3000, 0, 1e-3)
    rng = np.random.default_rng(4)
    g = np.concatenate([_paradigm_sample(0, 100, rng), rng.uniform(0, 1, (60, 5))])
    h = d.features(g)
    tpl = T.em(h[:100], q, d, dict(CFG, branches=2), 0)
    data = {"geometry": g}
    test = np.arange(100, 160)
    out = {c: stages.guidance(tpl, data, test, h, d, cfg, 0, c) for c in (None, "random", "random_bin", "thirds")}
    assert len(set(out.values())) == 4 and out["thirds"] > 0   # snapping to a thirds point helps thirds raters
    assert np.isnan(stages.guidance(tpl, data, test, h, d, dict(cfg, eval={"n_guide": 0}), 0, None))
