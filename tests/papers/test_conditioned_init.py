"""Card 01, conditioned init: the inits, the Jacobian metric, the data, the run analysis, resuming a
job inside a later run, and the full-scale paths offline. (The smoke pipeline, determinism and a
kill at the first checkpoint are tests/test_contract.py's; data parallel is tests/test_distributed.py's.)"""
import io
import math
import pickle
import tarfile

import numpy as np
import pytest
import torch

from iclr26.core import faults
from iclr26.core.config import compose_job_config
from iclr26.core.io import read_json, sha256_file
from iclr26.core.job import run_stage
from iclr26.papers.conditioned_init import data
from iclr26.papers.conditioned_init.analysis import coarse_curve, run_record, steps_to_target
from iclr26.papers.conditioned_init.inits import PlainAttention, attention_layers, initialise, mimetic_factors
from iclr26.papers.conditioned_init.jacobian import (
    attention_kappa,
    condition_number,
    full_jacobian,
    head_jacobian,
    matrix_kappa,
    multi_head_attention,
    vit_first_layer_head_kappas,
    vit_first_layer_kappa,
    wide_svdvals,
)
from iclr26.papers.conditioned_init.model import build_model
from iclr26.papers.conditioned_init.weight_selection import (
    select_weights,
    teacher_model_config,
    uniform_element_selection,
    uniform_indices,
)

SLUG = "conditioned_init"
MIMETIC = {"alpha_qk": 0.7, "beta_qk": 0.7, "alpha_vo": 0.4, "beta_vo": 0.4}


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def tiny_model(method="random", seed=0):
    torch.manual_seed(seed)
    model = build_model(compose_job_config(SLUG, "tiny")["model"], depth=2)
    initialise(model, method, MIMETIC)
    return model


# ----------------------------------------------------------------------------- inits
def test_conditioned_init_has_unit_kappa_on_the_plain_block():
    torch.manual_seed(0)
    block = PlainAttention(dim=64, heads=4)
    assert matrix_kappa(block.q_proj.weight) > 10  # the default init is far from κ = 1
    initialise(block, "conditioned")
    for linear in (block.q_proj, block.k_proj, block.v_proj):
        assert matrix_kappa(linear.weight) == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(block.v_proj.weight, torch.eye(64))
    assert not torch.allclose(block.q_proj.weight, block.k_proj.weight)  # two independent draws


def test_conditioned_init_on_the_vit_changes_only_q_k_v():
    default, conditioned = tiny_model("random"), tiny_model("conditioned")
    layers = attention_layers(conditioned)
    assert len(layers) == 2
    for att in layers:
        for linear in (att.q, att.k, att.v):
            assert matrix_kappa(linear.weight) == pytest.approx(1.0, abs=1e-4)
    changed = {name for name, p in conditioned.state_dict().items() if not torch.equal(p, default.state_dict()[name])}
    assert changed and all(name.split(".")[-2] in ("q_proj", "k_proj", "v_proj") for name in changed)


def test_mimetic_factors_are_the_svd_and_its_best_truncation():
    torch.manual_seed(0)
    left, right, target = mimetic_factors(32, 0.7, 0.7, +1.0)
    assert torch.allclose(left @ right, target, atol=1e-5)
    k = 8  # one head of width 8 holds the best rank-8 approximation (Eckart-Young)
    residual = torch.linalg.matrix_norm(target - left[:, :k] @ right[:k]) ** 2
    tail = (torch.linalg.svdvals(target)[k:] ** 2).sum()
    assert residual == pytest.approx(float(tail), rel=1e-4)


def test_mimetic_init_gives_qk_close_to_alpha_z_plus_beta_i():
    torch.manual_seed(0)
    d = 64
    block = PlainAttention(dim=d, heads=1)
    initialise(block, "mimetic", MIMETIC)
    q, k, v, o = (p.weight.detach() for p in (block.q_proj, block.k_proj, block.v_proj, block.o_proj))
    qk, vo = q.T @ k, v.T @ o.T                               # W_Q W_K^T and W_V W_O
    off = ~torch.eye(d, dtype=torch.bool)
    # identity part: diagonal mean ~ +beta1 (QK) and -beta2 (VO); Z part: off-diagonal std alpha/sqrt(d)
    assert float(qk.diagonal().mean()) == pytest.approx(0.7, abs=0.05)
    assert float(qk[off].std()) == pytest.approx(0.7 / math.sqrt(d), rel=0.15)
    assert float(vo.diagonal().mean()) == pytest.approx(-0.4, abs=0.05)
    assert float(vo[off].std()) == pytest.approx(0.4 / math.sqrt(d), rel=0.15)
    # on the multi-head ViT, W_V W_O over all heads is still exactly a2 Z2 - b2 I
    att = attention_layers(tiny_model("mimetic"))[0]
    vo = att.v.weight.detach().T @ att.o.weight.detach().T
    assert float(vo.diagonal().mean()) == pytest.approx(-0.4, abs=0.05)


# ----------------------------------------------------------------------------- the Jacobian metric
def test_attention_function_is_what_the_vit_computes():
    model = tiny_model("conditioned")
    attention = model.vit.layers[0].attention
    x = randn(2, 17, 64)
    w = [p.weight.T for p in (attention.q_proj, attention.k_proj, attention.v_proj)]
    ours = attention.o_proj(multi_head_attention(x, *w, attention.num_attention_heads))
    assert torch.allclose(ours, attention(x)[0], atol=1e-5)


def test_jacobian_matches_finite_differences_and_per_head_kappa_is_exact():
    torch.manual_seed(1)
    n, d, heads = 3, 4, 2
    x, w_q, w_k, w_v = (torch.randn(*shape, dtype=torch.float64) for shape in ((n, d), (d, d), (d, d), (d, d)))
    jac = full_jacobian(x, w_q, w_k, w_v, heads)
    params = torch.cat([w_q.reshape(-1), w_k.reshape(-1), w_v.reshape(-1)])

    def flat(p):
        q, k, v = p.split(d * d)
        return multi_head_attention(x, q.reshape(d, d), k.reshape(d, d), v.reshape(d, d), heads).reshape(-1)

    eps = 1e-6
    numeric = torch.stack([(flat(params + eps * e) - flat(params - eps * e)) / (2 * eps)
                           for e in torch.eye(len(params), dtype=torch.float64)], dim=1)
    assert torch.allclose(jac, numeric, atol=1e-7)
    from_numeric = condition_number(torch.linalg.svdvals(numeric))
    assert attention_kappa(x, w_q, w_k, w_v, heads) == pytest.approx(from_numeric, rel=1e-6)


def test_kappa_of_hand_constructed_cases():
    x = randn(1, 4, seed=1, dtype=torch.float64)
    w = randn(4, 4, seed=2, dtype=torch.float64)
    # one token: softmax is constant, A = x W_V, J = [0, 0, x (x) I]: all singular values |x|
    assert attention_kappa(x, w, w, w, heads=2) == pytest.approx(1.0, abs=1e-12)
    # W_Q = W_K = 0: uniform attention, J w.r.t. W_V = (11^T X / n) (x) I has rank k < n k
    x = randn(5, 4, seed=3, dtype=torch.float64)
    zero = torch.zeros(4, 4, dtype=torch.float64)
    assert attention_kappa(x, zero, zero, w, heads=2) > 1e12


def test_wide_svdvals_are_the_singular_values_of_the_matrix():
    wide = randn(12, 80, seed=4, dtype=torch.float64) * torch.logspace(0, -5, 12, dtype=torch.float64)[:, None]
    exact = torch.linalg.svdvals(wide)
    assert torch.allclose(wide_svdvals(wide), exact, rtol=1e-9, atol=0)
    assert torch.equal(wide_svdvals(wide.T), torch.linalg.svdvals(wide.T))  # tall: svdvals itself


def test_row_block_keeps_every_input_token_and_is_the_top_rows_of_j():
    shapes = ((6, 4), (4, 2), (4, 2), (4, 2))
    x, w_q, w_k, w_v = (randn(*shape, seed=i, dtype=torch.float64) for i, shape in enumerate(shapes))
    full, block = head_jacobian(x, w_q, w_k, w_v), head_jacobian(x, w_q, w_k, w_v, rows=3)
    assert block.shape == (3 * 2, 3 * 4 * 2) and torch.equal(block, full[:6])
    # not the Jacobian of the first 3 tokens alone: the other tokens still enter the softmax
    assert not torch.allclose(block, head_jacobian(x[:3], w_q, w_k, w_v))
    kappa = attention_kappa(x, w_q, w_k, w_v, heads=1, rows=3)
    assert kappa == pytest.approx(condition_number(torch.linalg.svdvals(full[:6])))


def test_per_head_qkv_kappa_is_one_only_for_the_conditioned_init():
    assert vit_first_layer_head_kappas(tiny_model("conditioned")) == pytest.approx(1.0, abs=1e-4)
    assert vit_first_layer_head_kappas(tiny_model("random")) > 2
    assert vit_first_layer_head_kappas(tiny_model("xavier")) > 2


def test_warmup_cosine_is_linear_then_cosine_and_keeps_the_betas():
    from iclr26.papers.conditioned_init.training import make_schedule

    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=2e-3, betas=(0.9, 0.999))
    schedule = make_schedule(optimizer, {"schedule": "warmup_cosine", "lr": 2e-3, "pct_start": 0.1, "steps": 100})
    lrs, betas = [], set()
    for _ in range(100):
        lrs.append(optimizer.param_groups[0]["lr"])
        betas.add(tuple(optimizer.param_groups[0]["betas"]))
        optimizer.step()
        schedule.step()
    assert lrs[:10] == pytest.approx([2e-3 * (i + 1) / 10 for i in range(10)])   # linear warmup, 10 steps
    assert lrs[10] == pytest.approx(2e-3) and lrs[55] == pytest.approx(1e-3)      # peak, then half-way down
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] < 1e-5
    assert betas == {(0.9, 0.999)}   # no momentum cycling
    with pytest.raises(ValueError, match="unknown schedule"):
        make_schedule(optimizer, {"schedule": "onecycle"})


def test_tiny_runs_only_its_arms_and_a_method_without_runs_trains_nothing():
    from iclr26.papers.conditioned_init.stages import runs_of

    cfg = compose_job_config(SLUG, "tiny")
    assert list(runs_of(cfg, "conditioned", [0, 1, 2])) == ["warmup_s0", "warmup_s1", "warmup_s2"]
    assert runs_of(cfg, "weight_selection", [0, 1, 2]) == {} and runs_of(cfg, "mimetic", [0]) == {}
    # the scale's jobs (run_methods) are exactly the arms its regimes train: no job without runs
    assert set(cfg["run_methods"]) == {m for regime in cfg["train"]["regimes"].values() for m in regime["methods"]}
    full = compose_job_config(SLUG, "full")
    assert len(runs_of(full, "weight_selection", [0])) == 3   # teacher, warmup, no_warmup


def test_kappa_at_init_orders_default_above_conditioned():
    image = randn(3, 16, 16)
    default, conditioned = (vit_first_layer_kappa(tiny_model(method), image) for method in ("random", "conditioned"))
    assert default > 10 * conditioned


# ----------------------------------------------------------------------------- weight selection
def test_uniform_element_selection_keeps_evenly_spaced_indices():
    teacher = torch.arange(4 * 6 * 5).reshape(4, 6, 5)
    picked = uniform_element_selection(teacher, (2, 3, 5))
    assert torch.equal(picked, teacher[[0, 2]][:, [0, 2, 4]])  # every 2nd row and column, all of the rest
    assert uniform_indices(5, 3).tolist() == [0, 2, 4]                  # not dividing: rounded linspace over 0..4
    assert uniform_indices(7, 3).tolist() == [0, 3, 6]
    with pytest.raises(ValueError, match="smaller"):
        uniform_element_selection(teacher, (8, 6, 5))


def test_weight_selection_takes_the_teachers_first_layers_and_every_other_channel_not_the_head():
    cfg = compose_job_config(SLUG, "tiny")
    torch.manual_seed(0)
    teacher = build_model(teacher_model_config(cfg["model"], cfg["weight_selection"]["teacher"]), depth=4)
    torch.manual_seed(1)
    student = build_model(cfg["model"], depth=2)
    default = {k: v.clone() for k, v in student.state_dict().items()}
    student.load_state_dict(select_weights(teacher.state_dict(), student.state_dict()))
    t, s = teacher.state_dict(), student.state_dict()
    assert t["vit.layers.1.attention.q_proj.weight"].shape == (128, 128)
    assert s["vit.layers.1.attention.q_proj.weight"].shape == (64, 64)
    assert torch.equal(s["vit.layers.1.attention.q_proj.weight"], t["vit.layers.1.attention.q_proj.weight"][::2, ::2])
    assert torch.equal(s["vit.layers.0.mlp.fc1.weight"], t["vit.layers.0.mlp.fc1.weight"][::2, ::2])
    assert torch.equal(s["vit.embeddings.position_embeddings"], t["vit.embeddings.position_embeddings"][:, :, ::2])
    for key in s:
        if key.startswith("classifier"):
            assert torch.equal(s[key], default[key])   # the head keeps the student's own init
        else:
            assert not torch.equal(s[key], default[key]) or s[key].abs().sum() == 0 or s[key].eq(1).all()
    with pytest.raises(KeyError, match="shallower"):
        select_weights(build_model(cfg["model"], depth=1).state_dict(), student.state_dict())


# ----------------------------------------------------------------------------- data
def test_motif_pairs_are_deterministic_and_solvable_by_the_motif_bank():
    spec = {**compose_job_config(SLUG, "smoke")["data"]["images"], "n_train": 400, "n_test": 10}
    first, second = data.generate_motif_pairs(spec, seed=3), data.generate_motif_pairs(spec, seed=3)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    other = data.generate_motif_pairs(spec, seed=4)  # another run seed: other images, the same task (motifs)
    assert np.array_equal(other["motifs"], first["motifs"])
    assert not np.array_equal(other["x_train"], first["x_train"])
    assert not np.array_equal(other["x_test"], first["x_test"])
    assert first["x_train"].shape == (400, 3, 16, 16) and first["x_train"].dtype == np.uint8
    assert set(np.unique(first["y_train"])) == set(range(10))
    # oracle: the two class motifs with the best matched-filter response anywhere -> the pair's class
    images = (first["x_train"].astype(np.float64) - data.UINT8_OFFSET) / data.UINT8_SCALE
    cells = images.reshape(400, 3, 4, 4, 4, 4).transpose(0, 2, 4, 1, 3, 5).reshape(400, 16, 48)
    bank = first["motifs"][:5].reshape(5, 48)
    score = (cells @ (bank / np.linalg.norm(bank, axis=1, keepdims=True)).T).max(axis=1)
    top = np.sort(np.argsort(score, axis=1)[:, -2:], axis=1)
    classes = {pair: c for c, pair in enumerate(data.pair_classes(5))}
    predicted = np.array([classes[tuple(t)] for t in top])
    assert (predicted == first["y_train"]).mean() > 0.6  # chance is 0.1


def test_each_seed_has_its_own_generated_data_and_shares_a_real_dataset():
    assert data.seed_datasets({"source": "motif_pairs"}, [0, 7]) == {0: "s0", 7: "s7"}
    assert data.seed_datasets({"source": "cifar10"}, [0, 7]) == {0: "", 7: ""}


def test_stream_sees_each_sample_once_per_epoch_and_is_seeded():
    batches = [data.batch_indices(640, 32, seed=3, step=s) for s in range(20)]
    assert len(np.unique(np.concatenate(batches))) == 640
    assert np.array_equal(batches[5], data.batch_indices(640, 32, seed=3, step=5))
    assert not np.array_equal(batches[5], data.batch_indices(640, 32, seed=4, step=5))
    teacher = [data.batch_indices(640, 32, seed=3, step=s, stream=1) for s in range(20)]  # another order
    assert len(np.unique(np.concatenate(teacher))) == 640 and not np.array_equal(teacher[0], batches[0])


def test_augment_is_a_seeded_crop_and_flip():
    x = np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8)
    out = data.augment(x, seed=0, step=3)
    assert np.array_equal(out, data.augment(x, seed=0, step=3))  # a resumed run sees the same batch
    assert not np.array_equal(out, data.augment(x, seed=0, step=4))
    padded = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)))
    for image, source in zip(out, padded):  # each image is a window of its zero-padded source, maybe mirrored
        windows = [source[:, dy:dy + 8, dx:dx + 8] for dy in range(9) for dx in range(9)]
        assert any(np.array_equal(image, w) or np.array_equal(image, w[:, :, ::-1]) for w in windows)


def test_steps_to_target_and_curve():
    losses = np.array([3.0, 2.0, 1.0, 0.5, 0.4, 0.3])
    assert steps_to_target(losses, target=1.0, window=2) == 4   # running means 3, 2.5, 1.5, 0.75
    assert steps_to_target(losses, target=0.1, window=2) == 7   # never: budget + 1
    curve, steps = coarse_curve(losses, points=3)
    assert curve == [2.5, 0.75, 0.35] and steps == [1.5, 3.5, 5.5]
    run = {"losses": losses, "test_logits": np.eye(3)[[0, 1, 1]], "kappa": np.float64(100.0),
           "qkv_head_kappa": np.float64(1.0)}
    eval_cfg = {"target_window": 2, "curve_points": 3}
    reached = run_record(run, np.array([0, 1, 2]), {**eval_cfg, "target_loss": 1.0})
    never = run_record(run, np.array([0, 1, 2]), {**eval_cfg, "target_loss": 0.1})
    assert (reached["reached_target"], never["reached_target"]) == (1.0, 0.0)   # a number: averaged over seeds
    assert reached["test_acc"] == pytest.approx(2 / 3) and reached["qkv_head_kappa_init"] == 1.0


# ----------------------------------------------------------------------------- full-scale paths, offline
def test_full_scale_model_is_vit_s_trained_from_scratch_or_a_saved_configs_shape(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    from iclr26.papers.conditioned_init.model import build_config

    shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    full = build_config(compose_job_config(SLUG, "full")["model"])
    assert tuple(getattr(full, k) for k in shape) == (384, 12, 6, 1536)   # ViT-S, stated: nothing to download

    torch.manual_seed(0)  # both inits below draw from the global RNG
    saved = ViTForImageClassification(ViTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                                                 intermediate_size=96, image_size=224, patch_size=16, qkv_bias=True))
    saved.save_pretrained(tmp_path / "hub_model")
    cfg = compose_job_config(SLUG, "full")
    model_cfg = {**cfg["model"], "source": str(tmp_path / "hub_model"), "revision": None,
                 "attn_implementation": "eager",   # a saved config's shape instead of the stated one
                 "config": {k: v for k, v in cfg["model"]["config"].items() if k not in shape}}
    model = build_model(model_cfg)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads) == (48, 2, 3)       # from the saved config
    assert (c.image_size, c.patch_size, c.num_labels, c.qkv_bias) == (32, 4, 10, False)   # full.yaml overrides
    assert not torch.equal(model.vit.layers[0].attention.o_proj.weight, saved.vit.layers[0].attention.o_proj.weight)
    image, max_tokens = randn(3, 32, 32), cfg["eval"]["kappa_max_tokens"]
    default_kappa = vit_first_layer_kappa(model, image, max_tokens)
    initialise(model, "conditioned")
    kappa = vit_first_layer_kappa(model, image, max_tokens)
    assert math.isfinite(kappa) and kappa < default_kappa / 10  # as at tiny scale: conditioning lowers it
    assert vit_first_layer_kappa(model, image, None) != pytest.approx(kappa)  # J's rows of 17 of the 65 outputs


def fake_cifar10(path):
    """A CIFAR-10 archive of the official layout with 20 random images per batch."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            # protocol 4: the array goes through numpy's _reconstruct, as in the official (Python 2) archive
            blob = pickle.dumps({b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8),
                                 b"labels": rng.integers(0, 10, 20).tolist()}, protocol=4)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return sha256_file(path)


def test_cifar10_source_downloads_checks_and_prepares(workdir):
    archive = workdir / "cifar.tar.gz"
    digest = fake_cifar10(archive)
    overrides = ["data.images.source=cifar10", f"+data.images.url=file://{archive}", f"+data.images.sha256={digest}"]
    run_stage("acquire", SLUG, "smoke", overrides, dataset="images")
    prepared = run_stage("prepare", SLUG, "smoke", overrides, dataset="images")
    assert read_json(prepared)["info"]["n_train"] == 100
    assert np.load(workdir / "data/smoke/conditioned_init/prepared/images/train_x.npy").shape == (100, 3, 32, 32)
    bad = [*overrides[:2], "+data.images.sha256=" + "0" * 64]
    with pytest.raises(Exception, match="sha256"):
        run_stage("acquire", SLUG, "smoke", bad, dataset="images")


# ----------------------------------------------------------------------------- resume inside a later run
TRAIN_JOB = {"method": "conditioned", "seed_block": "s0-1"}  # runs warmup_s0, warmup_s1, no_warmup_s0, no_warmup_s1


def _prepare_data():
    for stage in ("acquire", "prepare"):
        run_stage(stage, SLUG, "smoke", dataset="images")


def _train_and_evaluate():
    run_stage("train", SLUG, "smoke", **TRAIN_JOB)
    return read_json(run_stage("evaluate", SLUG, "smoke", **TRAIN_JOB))["records"]


def test_a_job_stopped_inside_a_later_run_resumes_that_run_and_keeps_the_finished_ones(workdir, monkeypatch):
    (workdir / "straight").mkdir()
    monkeypatch.chdir(workdir / "straight")
    _prepare_data()
    straight = _train_and_evaluate()

    (workdir / "stopped").mkdir()
    monkeypatch.chdir(workdir / "stopped")
    _prepare_data()
    # smoke checkpoints every 4 steps: steps 4, 8 (and 12, the last) of warmup_s0, then 4 and 8 of warmup_s1
    with faults.armed("train", "checkpoint", after=5), pytest.raises(faults.InjectedFault):
        run_stage("train", SLUG, "smoke", **TRAIN_JOB)
    run_dir = workdir / "stopped/runs/smoke/conditioned_init/conditioned/s0-1"
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)["state"]
    assert (state["key"], state["step"]) == ("warmup_s1", 8)
    finished = {p.name: p.stat().st_mtime_ns for p in run_dir.glob("model_*.pt")}
    assert sorted(finished) == ["model_warmup_s0.pt"]

    assert _train_and_evaluate() == straight
    assert {name: (run_dir / name).stat().st_mtime_ns for name in finished} == finished  # not trained again
    assert not (run_dir / "checkpoint.pt").exists()  # deleted once the job completed


def test_an_unpinned_or_different_archive_is_never_unpickled(tmp_path):
    from iclr26.core.errors import DataError
    from iclr26.papers.conditioned_init import data

    archive = tmp_path / "cifar.tar.gz"
    digest = fake_cifar10(archive)
    assert data.read_cifar10(archive, digest)["x_train"].dtype.name == "uint8"
    for pin in (None, "0" * 64):
        with pytest.raises(DataError, match="refusing to unpickle it"):
            data.read_cifar10(archive, pin)
