"""Card 15 (scene segmentation): BaSSL's metrics, the MovieNet-SSeg layout round trip, the matched tiny
worlds, the genre vocabulary, the test-time split's readings, and the full-scale path offline: real
MovieNet-format files (JPEG key frames, meta, shot files, BaSSL's anno.tar) and torchvision ResNet-50
weights served by a loopback server, converted and extracted by prepare."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from types import SimpleNamespace

import numpy as np
import pytest

from iclr26.papers.scene_segmentation import bassl, movienet

SPEC = {"dim": 8, "scenes": [4, 6], "shots_per_scene": 4, "median_shot_s": {"action": 2.0, "drama": 5.0,
        "documentary": 7.0}, "noise": 0.2, "shot_noise": 0.5, "boundary_shortening": 0.5,
        "drama_shared_place": 0.8, "action_story": 0.3, "action_cutin": 0.3, "long_take": 6.0, "drift": 0.8,
        "movies": {"pretrain": 2, "train": 2, "val": 0, "test": 24}}


def test_bassl_miou_in_time_and_shot_count():
    y = [0, 1, 0, 0, 1, 0]
    starts = np.array([0, 1, 2, 5, 6, 10.0])
    ends = np.array([1, 2, 5, 6, 10, 11.0])
    assert movienet.miou(y, y, starts, ends) == 1.0
    assert movienet.miou([0] * 6, y, starts, ends) == 0.0          # BaSSL: no predicted boundary scores 0
    # gt scenes [0, 2], [2, 10] (the tail after the last boundary is no scene); pred [0, 6]:
    # gt -> pred (2/6 + 4/10) / 2, pred -> gt max(2/6, 4/10)
    got = movienet.miou([0, 0, 0, 1, 0, 0], y, starts, ends)
    assert got == pytest.approx(0.5 * ((2 / 6 + 4 / 10) / 2 + 4 / 10))
    assert movienet.scenes_from_labels([0, 1, 0, 0, 1, 0, 0]) == [(0, 1), (2, 4), (5, 6)]
    assert movienet.miou_shots([0] * 7, [0, 1, 0, 0, 1, 0, 0]) == pytest.approx(0.5 * (7 / 21 + 3 / 7))
    assert movienet.ap_f1([0.1, 0.9, 0.2, 0.8], [0, 1, 0, 1]) == {"ap": 1.0, "f1": 1.0}


def test_layout_round_trip_matched_worlds_and_checks(tmp_path):
    got, movies = {}, {}
    for world in ("hypothesis", "null_world"):
        movienet.write_world(tmp_path / world, world, SPEC, seed=3)
        line = (tmp_path / world / "anno" / "anno.test.ndjson").read_text().splitlines()[0]
        assert set(json.loads(line)) == {"video_id", "shot_id", "num_shot", "boundary_label"}
        movies[world] = movienet.load_split(tmp_path / world, "test")
        assert len(movies[world]) == 24
        assert all(m["labels"][-1] == 0 and m["features"].shape[1:] == (3, 8) for m in movies[world])
        got[world] = movienet.mechanism_checks(movies[world], {"tau": 6.0})
    for h, n in zip(movies["hypothesis"], movies["null_world"]):   # same draws: only A, B, C differ
        assert np.array_equal(h["labels"], n["labels"])
        opening = np.r_[False, h["labels"][:-1].astype(bool)]
        assert np.allclose(h["durations"][~opening], n["durations"][~opening], atol=2e-3)
        assert np.allclose(h["durations"][opening], 0.5 * n["durations"][opening], atol=2e-3)
        assert np.allclose(h["mean"], np.asarray(h["features"]).mean(1), atol=1e-6)
    assert got["hypothesis"]["dur_ratio"] < 0.75 < got["null_world"]["dur_ratio"]
    assert got["hypothesis"]["split_signal"] > 0.15 > abs(got["null_world"]["split_signal"])
    assert got["hypothesis"]["genre_signal"] > got["null_world"]["genre_signal"]


def test_genre_vocabulary():
    defs = {"drama": "people talk", "sci-fi": "space future"}
    same = bassl.genre_vector(["sci-fi", "drama"], defs, 8)
    assert np.allclose(bassl.genre_vector(["Sci-Fi", "Drama"], defs, 8), same)
    assert not np.allclose(bassl.genre_vector(["Sci-Fi"], defs, 8), bassl.genre_vector(["Drama"], defs, 8))
    with pytest.raises(ValueError, match="without a definition"):
        bassl.genre_vector(["Drama", "Comedy"], defs, 8)


def test_split_segments_and_readings():
    f = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mv = {"features": f, "mean": f.mean(1), "labels": np.zeros(2), "durations": np.array([2.0, 13.0], np.float32)}
    feats, owner = bassl.segments(mv, 6.0)
    assert list(owner) == [0, 1, 1, 1]      # 13 s > tau: min(ceil(13/6), 3) = 3 segments, one frame each
    assert np.allclose(feats[0], f[0].mean(0)) and np.allclose(feats[1:], f[1])
    assert list(bassl.segments(mv, 6.0, split=[True, False])[1]) == [0, 1]
    feats, owner = bassl.segments(mv, None)
    assert list(owner) == [0, 1] and np.allclose(feats, f.mean(1))
    e = bassl.torch.tensor([[[1.0, 0], [1, 0.1], [0, 1], [0.1, 1]]])
    assert int(bassl.pseudo_boundary(e)[0]) == 1   # the DTW split between the two end shots
    # readings: max >= last on split shots; equal without a split
    rng = np.random.default_rng(0)
    fr = rng.normal(size=(12, 3, 2)).astype(np.float32)
    movie = {"features": fr, "mean": fr.mean(1), "labels": np.zeros(12, int),
             "durations": rng.uniform(1, 15, 12).astype(np.float32)}
    cfg = {"model": {"window": 2}}
    bassl.torch.manual_seed(0)
    model = bassl.Model(2, 8, 2, 4, False, 4)
    g = np.zeros((1, 4), np.float32)
    plain = bassl.score(model, [movie], g, cfg, None)[0]
    assert np.allclose(plain, bassl.score(model, [movie], g, cfg, None, reading="last")[0])
    top, last = (bassl.score(model, [movie], g, cfg, 6.0, reading=r)[0] for r in ("max", "last"))
    assert np.all(top >= last) and np.any(top > last)
    short = movie["durations"] <= 6.0
    assert np.allclose(top[short], last[short])



def test_collated_draws_match_per_window_choice():
    """pretrain/finetune collate a batch with one fancy index and draw a batch's anchors at once: the same
    anchors and windows as one rng.choice(n, p=...) and one `windows` call per window (the plain loop)."""
    rng = np.random.default_rng(0)
    movies = [{"mean": rng.normal(size=(n, 3)).astype(np.float32), "labels": rng.integers(0, 2, n),
               "durations": rng.uniform(0.5, 9, n).astype(np.float32)} for n in (3, 11, 25)]
    bank, w = bassl.Collated(movies), 4
    cdf = [bassl._cdf(bassl.anchor_probs(mv["durations"], 1.0, True)) for mv in movies]
    plain, batched = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(20):
        which = plain.choice(3, size=16, p=[0.2, 0.3, 0.5])
        cs = [plain.choice(len(movies[j]["labels"]), p=bassl.anchor_probs(movies[j]["durations"], 1.0, True))
              for j in which]
        which_b = batched.choice(3, size=16, p=[0.2, 0.3, 0.5])
        u = batched.random(16)
        cs_b = np.array([cdf[j].searchsorted(x, side="right") for j, x in zip(which_b, u)])
        assert np.array_equal(which, which_b) and np.array_equal(cs, cs_b)
        idx = bank.index(which, cs_b, w)
        ref = np.stack([bassl.windows(movies[j]["mean"], np.array([c]), w)[0] for j, c in zip(which, cs)])
        lab = np.stack([bassl.windows(movies[j]["labels"], np.array([c]), w)[0] for j, c in zip(which, cs)])
        assert np.array_equal(bank.mean[idx], ref) and np.array_equal(bank.labels[idx], lab)
        centre = [movies[j]["labels"][c] for j, c in zip(which, cs)]
        assert np.array_equal(bank.labels[bank.offset[which] + cs_b], centre)



@pytest.mark.parametrize("wd", [1e-4, 1e-2])
def test_adamw_matches_torch(wd):
    """bassl.AdamW is torch.optim.AdamW bit for bit, parameters left without a gradient skipped as torch does
    (pretraining never touches the boundary head, nor the FiLM without the genre prior)."""
    torch = bassl.torch
    runs = []
    for make in (lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=wd),
                 lambda ps: bassl.AdamW(ps, lr=3e-3, weight_decay=wd)):
        torch.manual_seed(0)
        model = bassl.Model(6, 8, 2, 4, False, 4)
        opt = make(list(model.parameters()))
        for step in range(5):
            x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(step))
            loss = model.context(model.shots(x, None)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        runs.append([prm.detach().clone() for prm in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    torch.manual_seed(0)
    assert torch.equal(runs[1][-1], bassl.Model(6, 8, 2, 4, False, 4).head[-1].bias)   # no gradient: untouched



def test_metrics_match_sklearn():
    """movienet.ap_f1 and roc_auc (numpy) against sklearn's average_precision_score, f1_score
    (zero_division=0) and roc_auc_score, with tied scores, scores at the threshold, and no positive / no
    predicted boundary."""
    from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

    rng = np.random.default_rng(0)
    cases = [(np.round(rng.random(n), r), (rng.random(n) < q).astype(int))
             for n, r, q in [(50, 1, 0.2), (300, 6, 0.1), (7, 2, 0.5), (40, 1, 0.0), (30, 3, 1.0)]]
    cases.append((np.full(20, 0.3), (rng.random(20) < 0.3).astype(int)))
    for s, y in cases:
        got = movienet.ap_f1(s, y)
        if y.any():
            assert abs(got["ap"] - average_precision_score(y, s)) < 1e-12
        if 0 < y.sum() < len(y):
            assert abs(movienet.roc_auc(s, y) - roc_auc_score(y, s)) < 1e-12
        assert abs(got["f1"] - f1_score(y, s >= 0.5, zero_division=0)) < 1e-12


def test_full_scale_keeps_the_post_hoc_items_and_the_shift_note():
    """full.yaml replaces the base lists: every post-hoc deviation of the base config (the same reason
    and date; its text may be reworded for MovieNet), the note on the split's train/test shift and the
    claim counting (the last-segment reading a check, at every scale) must be in the composed full config."""
    from iclr26.core.config import compose_job_config

    base, full = (compose_job_config("scene_segmentation", scale) for scale in ("tiny", "full"))
    posthoc = [d for d in base["deviations"] if isinstance(d, dict) and d.get("post_hoc")]
    assert len(posthoc) == 3
    got = {(d["why"], d["post_hoc"]) for d in full["deviations"] if isinstance(d, dict) and d.get("post_hoc")}
    assert {(d["why"], d["post_hoc"]) for d in posthoc} <= got
    shift = [n for n in base["table"]["notes"] if "train/test shift" in n]
    assert len(shift) == 1 and any(shift[0].split(" (a train/test shift")[0] in n for n in full["table"]["notes"])
    for cfg in (base, full):
        kinds = {c["id"]: c.get("kind", "claim") for c in cfg["claims"]}
        assert kinds["test_split_last"] == "check" and kinds["test_split_helps"] == "claim"


def _real_format_movienet(root, served):
    """MovieNet in its own formats: 240P_frames JPEGs, meta/<id>.json, movie1K.video_info.v1.json
    ({id: {"fps", ...}}), scene318/shot_movie318/<id>.txt (labelled movies) and shot/<id>.txt (the
    others; end frames inclusive, shot 2 of tt0000001 and tt0000022 one frame long), and BaSSL's
    anno.tar (anno.<split>.ndjson)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    movies = {"tt0000001": ("pretrain", ["Action", "Sci-Fi"]), "tt0000002": ("pretrain", ["Drama"]),
              "tt0000011": ("train", ["Comedy", "Romance"]), "tt0000012": ("train", ["Documentary"]),
              "tt0000021": ("test", ["Thriller"]), "tt0000022": ("test", ["Film-Noir", "Crime"])}
    lines = {"pretrain": [], "train": [], "test": []}
    root.mkdir(parents=True, exist_ok=True)
    (root / "movie1K.video_info.v1.json").write_text(json.dumps(
        {vid: {"fps": 25.0 if vid == "tt0000002" else 24.0, "resolution": [1920, 800], "num_frame": 9999}
         for vid in movies}))
    for j, (vid, (split, genres)) in enumerate(movies.items()):
        n = 6 + j % 2
        steps = rng.integers(20, 200, size=n + 1)
        if vid in ("tt0000001", "tt0000022"):
            steps[3] = 1                                      # shot 2: one frame (start == end)
        frames = np.cumsum(steps)
        shot_dir = root / ("shot" if split == "pretrain" else "scene318/shot_movie318")
        shot_dir.mkdir(parents=True, exist_ok=True)
        (shot_dir / f"{vid}.txt").write_text("".join(
            f"{a} {b - 1} {a} {(a + b) // 2} {b - 1}\n" for a, b in zip(frames[:-1], frames[1:])))
        (root / "meta").mkdir(exist_ok=True)
        (root / "meta" / f"{vid}.json").write_text(json.dumps({"imdb_id": vid, "genres": genres, "title": vid}))
        for i in range(n):
            for k in range(3):
                out = root / "240P_frames" / vid / f"shot_{i:04d}_img_{k}.jpg"
                out.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 255, size=(24, 40, 3), dtype=np.uint8)).save(out)
            if i < n - 1:
                row = {"video_id": vid, "shot_id": f"{i:04d}", "num_shot": n}
                if split != "pretrain":
                    row["boundary_label"] = int(i in (2, 4))
                lines[split].append(json.dumps(row))
    with tarfile.open(served / "anno.tar", "w") as tar:
        for split, rows in lines.items():
            data = ("\n".join(rows) + "\n").encode()
            info = tarfile.TarInfo(f"anno.{split}.ndjson")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return movies


def test_movienet_conversion(tmp_path):
    """MovieNet's meta, video-info and shot files and BaSSL's anno files -> the layout (no torchvision
    needed): each movie's fps from the video-info file, inclusive end frames (a one-frame shot lasts
    1/fps and gets a finite anchor weight), a bad pretraining movie left out and counted, a bad labelled
    movie one error line naming it and both counts."""
    served = tmp_path / "served"
    served.mkdir()
    root = tmp_path / "movienet"
    movies = _real_format_movienet(root, served)
    with tarfile.open(served / "anno.tar") as tar:
        tar.extractall(tmp_path / "anno", filter="data")
    spec = {"meta_dir": "meta", "video_info": "movie1K.video_info.v1.json",
            "shot_dirs": ["scene318/shot_movie318", "shot"]}
    vocabulary = {g.lower() for _, genres in movies.values() for g in genres}

    def convert(name):
        logged = []
        got = movienet.convert_movienet(root, tmp_path / "anno", tmp_path / name, spec, vocabulary, log=logged.append)
        return got, logged

    got, logged = convert("out")
    assert {k: got[k] for k in ("movies", "videos", "left_out")} == \
        {"movies": {"pretrain": 2, "train": 2, "test": 2}, "videos": 6, "left_out": 0} and logged == []
    assert json.loads((tmp_path / "out/conversion.json").read_text())["left_out"] == 0
    shots = json.loads((tmp_path / "out/shots/tt0000001.json").read_text())   # a pretraining movie: shot/
    lines = [x.split() for x in (root / "shot/tt0000001.txt").read_text().splitlines()]
    a, b = int(lines[0][0]), int(lines[0][1])
    assert shots[0] == {"shot_id": "0000", "start": a / 24, "end": b / 24, "duration": (b - a + 1) / 24}
    assert lines[2][0] == lines[2][1] and shots[2]["duration"] == 1 / 24   # one frame: 1/fps, not 0
    lines = [x.split() for x in (root / "shot/tt0000002.txt").read_text().splitlines()]   # fps 25 here
    assert json.loads((tmp_path / "out/shots/tt0000002.json").read_text())[1]["end"] == int(lines[1][1]) / 25
    assert json.loads((tmp_path / "out/genres/tt0000001.json").read_text()) == ["Action", "Sci-Fi"]
    assert (tmp_path / "out/anno/anno.test.ndjson").read_text() == (tmp_path / "anno/anno.test.ndjson").read_text()
    for vid in movies:   # the loader reads the converted layout; the one-frame shot's anchor weight is finite
        n = len(json.loads((tmp_path / f"out/shots/{vid}.json").read_text()))
        np.save(tmp_path / f"out/features/{vid}.npy", np.zeros((n, 3, 4), np.float16))
    pre = movienet.load_split(tmp_path / "out", "pretrain", frames=False)
    assert pre[0]["durations"][2] == np.float32(1 / 24)
    q = bassl.anchor_probs(pre[0]["durations"], 1.0, True)
    assert np.all(np.isfinite(q)) and q.sum() == pytest.approx(1) and q.argmax() == 2

    # a pretraining movie whose shot file disagrees with the anno files: left out, logged, counted
    with open(root / "shot/tt0000002.txt", "a") as f:
        f.write("99990 99999 99990 99995 99999\n")
    got, logged = convert("out2")
    assert got["movies"] == {"pretrain": 1, "train": 2, "test": 2} and got["left_out"] == 1
    assert logged == [f"pretraining movie tt0000002 left out: 8 shots in {root / 'shot/tt0000002.txt'}, "
                      "7 in the anno files"]
    assert "tt0000002" not in (tmp_path / "out2/anno/anno.pretrain.ndjson").read_text()
    assert [m["video_id"] for m in movienet.load_split(tmp_path / "out", "pretrain", frames=False)] == \
        ["tt0000001", "tt0000002"]
    # ... and one missing from the video-info file: left out too
    info = json.loads((root / "movie1K.video_info.v1.json").read_text())
    (root / "movie1K.video_info.v1.json").write_text(json.dumps({k: v for k, v in info.items() if k != "tt0000001"}))
    got, logged = convert("out3")
    assert got["left_out"] == 2 and got["movies"]["pretrain"] == 0 and "no fps in" in logged[0]
    (root / "movie1K.video_info.v1.json").write_text(json.dumps(info))
    # a labelled movie that disagrees: one error line naming the movie and both counts
    with open(root / "scene318/shot_movie318/tt0000021.txt", "a") as f:
        f.write("99990 99999 99990 99995 99999\n")
    with pytest.raises(ValueError, match=r"^1 labelled movies cannot be converted: tt0000021 \(7 shots in "
                                         r".*tt0000021.txt, 6 in the anno files\)$") as err:
        convert("out4")
    assert "\n" not in str(err.value)
    meta = json.loads((root / "meta/tt0000012.json").read_text())
    (root / "meta/tt0000012.json").write_text(json.dumps({**meta, "genres": ["Zombie"]}))
    with pytest.raises(ValueError, match="Zombie"):   # an unknown genre is an error, never a silent zero
        convert("out5")
    (root / "movie1K.video_info.v1.json").unlink()
    with pytest.raises(FileNotFoundError, match="video-info"):
        convert("out6")


def test_full_scale_path_offline(tmp_path, workdir, static_server):
    """Full scale from MovieNet's real formats: acquire downloads anno.tar (trust on first use) and the
    ResNet-50 weights (sha256-pinned) from a loopback server; prepare converts and extracts key-frame
    features with torchvision's resnet50; train and evaluate run through the same loader as tiny."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    from iclr26.core.config import compose_job_config
    from iclr26.core.job import run_paper
    from iclr26.papers.scene_segmentation import keyframes, stages

    full = compose_job_config("scene_segmentation", "full")["data"]["movienet"]["encoder"]
    official = tv.models.ResNet50_Weights.IMAGENET1K_V2
    assert full["url"] == official.url and keyframes.pin_matches_url(official.url, full["sha256"])
    assert abs(full["bytes"] / 2**20 - official.meta["_file_size"]) < 0.01

    served, url = static_server
    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.save(tv.models.resnet50(weights=None).state_dict(), buf)
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    (served / f"resnet50-{digest[:8]}.pth").write_bytes(buf.getvalue())
    root = tmp_path / "movienet"
    movies = _real_format_movienet(root, served)
    with open(root / "shot/tt0000002.txt", "a") as f:   # a pretraining movie whose shot count disagrees
        f.write("99990 99999 99990 99995 99999\n")
    over = [f"data.movienet.root={root}", f"data.movienet.anno.download_url={url}/anno.tar",
            f"data.movienet.encoder.url={url}/resnet50-{digest[:8]}.pth", f"data.movienet.encoder.sha256={digest}",
            "data.movienet.encoder.resize=20", "data.movienet.encoder.crop=16", "data.movienet.encoder.batch=16",
            "data.movienet.encoder.workers=0", "device=cpu", "model.hidden=8", "model.window=2", "model.proj=4",
            "model.crn_layers=1", "pretrain.steps=2", "pretrain.batch=4", "finetune.steps=2", "finetune.batch=4"]
    evals = run_paper("scene_segmentation", "full", over, seeds=[0, 1, 2], methods=["test_split"])
    recs = json.loads(evals[0].read_text())["records"]
    assert len(recs) == 3 and recs[0]["world"] == "movienet" and 0 <= recs[0]["ap"] <= 1
    assert recs[0]["pseudo_precision"] is None   # NaN: no labels in the pretraining split
    raw = workdir / "data/full/scene_segmentation/raw/movienet"
    manifest = json.loads((raw / "manifest.json").read_text())
    assert manifest["info"]["anno"]["sha256"] == hashlib.sha256((served / "anno.tar").read_bytes()).hexdigest()
    assert manifest["info"]["anno"]["verified"] is False
    prepared = workdir / "data/full/scene_segmentation/prepared/movienet/movienet"
    test = movienet.load_split(prepared, "test")
    assert [m["video_id"] for m in test] == ["tt0000021", "tt0000022"]
    assert test[1]["genres"] == ["Film-Noir", "Crime"] and test[1]["features"].shape == (7, 3, 2048)
    assert test[1]["features"].dtype == np.float16 and list(test[1]["labels"][:5]) == [0, 0, 1, 0, 1]
    shot_txt = (root / "scene318/shot_movie318/tt0000022.txt").read_text().split()
    assert test[1]["starts"][0] == int(shot_txt[0]) / 24 and test[1]["ends"][0] == int(shot_txt[1]) / 24
    assert test[1]["durations"][2] == np.float32(1 / 24)   # the one-frame shot
    conversion = json.loads((prepared / "conversion.json").read_text())   # the mismatched pretraining movie
    assert conversion["left_out"] == 1 and list(conversion["left_out_movies"]) == ["tt0000002"]
    assert [m["video_id"] for m in movienet.load_split(prepared, "pretrain", frames=False)] == ["tt0000001"]
    assert not (prepared / "features/tt0000002.npy").exists()
    # the features are the pinned ResNet-50's pooled output on BaSSL's test transform of each key frame
    from PIL import Image

    model = keyframes.load_encoder(served / f"resnet50-{digest[:8]}.pth", "cpu")
    with Image.open(root / "240P_frames/tt0000022/shot_0003_img_2.jpg") as im:
        x = keyframes.transform({"resize": 20, "crop": 16})(im.convert("RGB"))[None]
    with torch.no_grad():
        want = model(x)[0].numpy()
    assert np.allclose(test[1]["features"][3, 2], want, rtol=1e-2, atol=1e-2)
    assert len(movies) == 6

    # a missing placement is one clear error
    cfg = compose_job_config("scene_segmentation", "full", [*over[1:], f"data.movienet.root={tmp_path / 'empty'}"])
    job = SimpleNamespace(cfg=cfg, dataset="movienet", out_dir=tmp_path / "raw", log=print)
    with pytest.raises(FileNotFoundError, match="place MovieNet in"):
        stages.acquire(job)
