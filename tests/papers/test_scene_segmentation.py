"""Card 15 (scene segmentation): BaSSL's metrics, the MovieNet-SSeg layout round trip, the tiny
worlds' mechanisms, the test-time split, and the full-scale path on hand-placed files."""
from __future__ import annotations

import numpy as np
import pytest

from iclr26.papers.scene_segmentation import movienet

SPEC = {"dim": 8, "scenes": [4, 6], "shots_per_scene": 4, "median_shot_s": {"action": 2.0, "drama": 5.0,
        "documentary": 7.0}, "noise": 0.2, "shot_noise": 0.5, "boundary_shortening": 0.5,
        "drama_shared_place": 0.8, "action_story": 0.3, "action_cutin": 0.3, "long_take": 6.0, "drift": 0.8,
        "movies": {"pretrain": 2, "train": 2, "val": 0, "test": 24}}


def test_miou_and_scenes():
    y = [0, 1, 0, 0, 1, 0, 0]
    assert movienet.scenes_from_labels(y) == [(0, 1), (2, 4), (5, 6)]
    assert movienet.miou(y, y) == 1.0
    # one predicted scene covering all 7 shots: gt side (2/7 + 3/7 + 2/7) / 3, pred side 3/7
    assert movienet.miou([0] * 7, y) == pytest.approx(0.5 * (7 / 21 + 3 / 7))
    got = movienet.ap_f1([0.1, 0.9, 0.2, 0.8], [0, 1, 0, 1])
    assert got == {"ap": 1.0, "f1": 1.0}


def test_layout_round_trip_and_mechanisms(tmp_path):
    got = {}
    for world in ("hypothesis", "null_world"):
        movienet.write_world(tmp_path / world, world, SPEC, seed=3)
        lines = (tmp_path / world / "anno" / "anno.test.ndjson").read_text().splitlines()
        assert set(__import__("json").loads(lines[0])) == {"video_id", "shot_id", "num_shot", "boundary_label"}
        movies = movienet.load_split(tmp_path / world, "test")
        assert len(movies) == 24 and all(m["labels"][-1] == 0 and m["features"].shape[1:] == (3, 8) for m in movies)
        got[world] = movienet.mechanism_checks(movies, {"tau": 6.0})
    assert got["hypothesis"]["dur_ratio"] < 0.75 < got["null_world"]["dur_ratio"]
    assert got["hypothesis"]["split_signal"] > 0.15 > abs(got["null_world"]["split_signal"])
    assert got["hypothesis"]["genre_signal"] > got["null_world"]["genre_signal"]


def test_split_segments_and_max_reading():
    from iclr26.papers.scene_segmentation import bassl

    f = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mv = {"features": f, "durations": np.array([2.0, 13.0], np.float32)}
    feats, owner = bassl.segments(mv, 6.0)
    assert list(owner) == [0, 1, 1, 1]      # 13 s > tau: min(ceil(13/6), 3) = 3 segments, one frame each
    assert np.allclose(feats[0], f[0].mean(0)) and np.allclose(feats[1:], f[1])
    feats, owner = bassl.segments(mv, None)
    assert list(owner) == [0, 1] and np.allclose(feats, f.mean(1))
    e = bassl.torch.tensor([[[1.0, 0], [1, 0.1], [0, 1], [0.1, 1]]])
    assert int(bassl.pseudo_boundary(e)[0]) == 1   # the DTW split between the two end shots


def test_full_scale_path_on_placed_files(tmp_path, workdir, monkeypatch):
    """Full scale reads hand-placed MovieNet-SSeg files in the layout, through the same loader."""
    import json

    from iclr26.core.job import run_paper

    src = tmp_path / "movienet"
    movienet.write_world(src, "null_world", {**SPEC, "movies": {"pretrain": 2, "train": 2, "val": 0, "test": 2}}, 0)
    (src / "anno" / "anno.pretrain.ndjson").write_text("\n".join(   # real anno.pretrain: no labels
        json.dumps({k: v for k, v in json.loads(line).items() if k != "boundary_label"})
        for line in (src / "anno" / "anno.pretrain.ndjson").read_text().splitlines()) + "\n")
    over = [f"data.movienet.manual_dir={src}", "data.movienet.dim=8", "device=cpu", "model.hidden=8", "model.window=2",
            "model.proj=4", "pretrain.steps=2", "pretrain.batch=4", "finetune.steps=2", "finetune.batch=4"]
    evals = run_paper("scene_segmentation", "full", over, seeds=[0, 1, 2], methods=["test_split"])
    recs = json.loads(evals[0].read_text())["records"]
    assert len(recs) == 3 and recs[0]["world"] == "movienet" and 0 <= recs[0]["ap"] <= 1
    assert recs[0]["pseudo_precision"] is None   # NaN: no labels in the pretraining split
    missing = tmp_path / "empty"
    missing.mkdir()
    monkeypatch.chdir(missing)
    with pytest.raises(Exception, match="place MovieNet-SSeg in"):
        run_paper("scene_segmentation", "full", [*over[1:], f"data.movienet.manual_dir={missing}"], seeds=[0, 1, 2],
                  methods=["bassl"])
