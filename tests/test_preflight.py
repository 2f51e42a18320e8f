"""The full-scale preflight (core/preflight.py): one line per problem, on composed configs.

A clean config (a real paper's full config with its model pinned) passes; each broken copy fails
with exactly one more line naming what is wrong. Composition is cached on disk, so these are fast.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import subprocess
import sys

import pytest

from conftest import REPO, venv_env
from iclr26.core import preflight
from iclr26.core.config import compose_job_config
from iclr26.core.paper import get_paper

SLUG = "conditioned_init"  # a GPU train stage, a hub model, a url, an env with torch
COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN2_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "intermediate_size": 18944, "vocab_size": 152064,
            "num_attention_heads": 28, "num_key_value_heads": 4}


@pytest.fixture(scope="module")
def clean():
    return compose_job_config(SLUG, "full", (f"model.revision={COMMIT}",))


def problems(cfg):
    return preflight.check_paper(get_paper(SLUG), cfg, retries=2)[0]


def test_the_clean_config_has_no_problem(clean):
    assert problems(clean) == []
    assert preflight.package_problems() == []


def _unpinned_model(cfg):
    cfg["model"].update(source="org/model", revision="main")


def _unpinned_second_model(cfg):
    cfg["embedder"] = {"source": "org/embedder", "revision": "main"}


def _unpinned_model_in_a_list(cfg):
    cfg["model"]["checkpoints"] = {"judge": {"source": "org/judge", "revision": None}}


def _gpu_stage_without_gpu(cfg):
    cfg["resources"]["train"]["gpus"] = 0


def _env_without_torch(cfg):
    cfg["conda_env"] = "pipeline"


def _7b_full_parameter_adamw_on_one_gpu(cfg):
    cfg["model"]["arch"] = dict(QWEN2_7B)
    cfg["estimate"]["train"].pop("memory")
    cfg["train"].update(precision="bf16-mixed", optimizer="adamw", lora=None, sharding="none",
                        micro_batch_size=1, max_length=2048, activation_checkpointing=True)


def _unpinned_url(cfg):
    cfg["data"]["images"]["sha256"] = None


def _too_long_without_checkpoint(cfg):
    cfg["estimate"]["evaluate"] = {"seconds": 10 * 3600, "basis": "test"}


def _shards_of_a_stage_without_units(cfg):
    cfg["shards"] = {"evaluate": 2}


@pytest.mark.parametrize("break_it,line", [
    (_unpinned_model, rf"^{SLUG} pin: hub model \S+ has revision 'main', not a 40-hex commit \(model\)$"),
    (_unpinned_second_model, rf"^{SLUG} pin: hub model org/embedder has revision 'main', not a 40-hex commit "
                             r"\(embedder\)$"),
    (_unpinned_model_in_a_list, rf"^{SLUG} pin: hub model org/judge has revision None, not a 40-hex commit "
                                r"\(model.checkpoints.judge\)$"),
    (_unpinned_url, rf"^{SLUG} pin: https://\S+ has sha256 None, not a 64-hex digest \(data.images\)$"),
    (_gpu_stage_without_gpu, rf"^{SLUG} train: runs with device cuda \(its code picks a device\) but gets no GPU"),
    (_env_without_torch, rf"^{SLUG} env: envs/pipeline.yaml lacks .*torch.*, which the paper's modules import$"),
    (_7b_full_parameter_adamw_on_one_gpu,
     rf"^{SLUG} train memory: estimated 1\d\d\.\d GB per GPU = .*exceeds the 80 GB of each GPU it requests$"),
    (_too_long_without_checkpoint,
     rf"^{SLUG} evaluate \w+/s0: estimated 10.0 h .* exceeds its runtime \(no checkpoint: one attempt of 30 min\)"),
    (_shards_of_a_stage_without_units,
     rf"^{SLUG} evaluate: shards.evaluate asks for 2 shard jobs but its code saves no units \(job.units\)"),
])
def test_each_problem_is_one_line(clean, break_it, line):
    cfg = copy.deepcopy(clean)
    break_it(cfg)
    found = problems(cfg)
    matching = [p for p in found if re.search(line, p)]
    assert len(matching) == len(found) >= 1, found
    per_method = break_it is _too_long_without_checkpoint  # one line per method (seed blocks are alike)
    assert len(found) == (len(get_paper(SLUG).methods) if per_method else 1), found


def test_a_gpu_requested_where_nothing_runs_on_it():
    cfg = compose_job_config("rebalance", "full", ("resources.train.gpus=1",))
    paper = get_paper("rebalance")
    assert "train" not in paper.gpu_stages  # the workflow gives it none: the preflight reads the same rule
    wants = dataclasses.replace(paper, gpu_stages=(*paper.gpu_stages, "train"))
    found = preflight.check_paper(wants, cfg, 2)[0]
    assert any(re.search(r"^rebalance train: requests 1 GPU\(s\) but its code never picks a device", p)
               for p in found), found


def test_the_7b_memory_estimate_follows_the_recipe():
    """Qwen2-7B has 7.62B parameters; full-parameter bf16-mixed AdamW needs 16 bytes each (≈122 GB
    before activations); LoRA r16 on every projection with ZeRO-2 over 4 GPUs fits in 80 GB."""
    cfg = {"model": {"arch": QWEN2_7B}, "train": {"precision": "bf16-mixed", "optimizer": "adamw",
                                                   "micro_batch_size": 1, "max_length": 2048,
                                                   "activation_checkpointing": True}}
    assert preflight.n_params(cfg) == pytest.approx(7.62e9, rel=0.01)
    full = preflight.train_memory(cfg, 1)
    assert full["weights"] + full["master"] + full["gradients"] + full["optimizer"] == pytest.approx(121.8, abs=0.5)
    sharded = preflight.train_memory(cfg | {"train": {**cfg["train"], "sharding": "fsdp"}}, 8)
    assert sharded["total"] < full["total"] / 4
    lora = {**cfg["train"], "lora": {"r": 16, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj",
                                                                               "o_proj", "gate_proj", "up_proj",
                                                                               "down_proj"]},
            "sharding": "zero2"}
    m = preflight.train_memory({**cfg, "train": lora}, 4)
    assert 35e6 < m["how"]["trained"] < 45e6 and m["total"] < 80  # r16 on all 7 projections: 40.4M
    no_ckpt = preflight.train_memory({**cfg, "train": {**cfg["train"], "activation_checkpointing": False,
                                                        "micro_batch_size": 8, "max_length": 4096}}, 1)
    assert no_ckpt["activations"] > 100  # the batch 8 x 4k tokens without checkpointing


def test_a_checkpointing_job_fits_its_attempts_and_units_must_fit_one():
    assert not preflight.fits(5 * 3600, [240, 480, 960], checkpoints=False)
    assert preflight.fits(5 * 3600, [240, 480, 960], checkpoints=True)
    assert not preflight.fits(30 * 3600, [240, 480, 960], checkpoints=True)
    # 3 units of 5 h: none fits in the first attempt (4 h), one in the second (8 h), the rest in the third
    assert preflight.fits(15 * 3600, [240, 480, 960], checkpoints=True, units=3)
    assert not preflight.fits(15 * 3600, [240, 240, 240], checkpoints=True, units=3)


def test_the_static_scan_sees_which_stages_pick_a_device_and_checkpoint():
    code = {stage: preflight.stage_code(get_paper(SLUG), stage) for stage in ("acquire", "train", "evaluate")}
    assert code["train"] == {"picks_device": True, "checkpoints": True}
    assert not code["evaluate"]["picks_device"] and not code["acquire"]["picks_device"]


def test_the_command_passes_on_a_clean_config_and_fails_with_one_line_per_problem():
    base = [sys.executable, "-m", "iclr26", "preflight", "--scale", "full", "--papers", SLUG,
            "--override", f"model.revision={COMMIT}"]
    ok = subprocess.run(base, capture_output=True, text=True, env=venv_env(), cwd=REPO)
    assert ok.returncode == 0 and "PROBLEM" not in ok.stdout and "no problems" in ok.stdout, ok.stdout + ok.stderr
    assert "GPU-hours" in ok.stdout and "train memory: " in ok.stdout and "downloads:" in ok.stdout
    bad = subprocess.run([*base, "--override", "resources.train.gpus=0", "--override", "conda_env=pipeline"],
                         capture_output=True, text=True, env=venv_env(), cwd=REPO)
    lines = [line for line in bad.stdout.splitlines() if line.startswith("PROBLEM")]
    assert bad.returncode == 1 and len(lines) == 2, bad.stdout + bad.stderr


def test_the_preflight_reads_every_papers_full_config():
    """Every paper's full-scale jobs are composed and checked without an error of the check itself;
    each problem line names its paper (pins still missing upstream are reported, not hidden)."""
    from iclr26.core.paper import all_papers

    for slug, paper in all_papers().items():
        cfg = compose_job_config(slug, "full")
        found, plan = preflight.check_paper(paper, cfg, retries=2)
        run = cfg.get("run_methods") or paper.methods  # a scale may run a subset of the methods
        assert plan["jobs"]["evaluate"] >= len(run) and plan["jobs"]["tabulate"] == 1, slug
        assert all(line.startswith(f"{slug} ") and "\n" not in line for line in found), found
