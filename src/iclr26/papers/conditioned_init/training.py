"""Training of one init method over its (regime, seed) runs, with checkpoint and resume.

Imported only by the train stage, so acquire, prepare and evaluate never import torch (2 s each).
Each run: seed torch, build the ViT from config, apply the init, measure kappa(J) at init on test
image 0, train with AdamW on the seeded data stream, write losses, test logits and weights.
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.core.checkpoint import rng_state, set_rng_state
from iclr26.core.distributed import DataParallel
from iclr26.core.io import atomic_path

from . import data as D
from .experiment import DATASET, _save_npz, load_prepared, run_key, runs_of
from .inits import initialise
from .jacobian import vit_first_layer_kappa
from .model import build_model, logits

# Test hook: called as after_step(run_key, completed_steps) inside the training loop. The
# kill-and-resume test sends SIGTERM from it; it is None in every pipeline run.
after_step = None


class Preempted(RuntimeError):
    """SIGTERM arrived: the state is checkpointed and the job must exit (Slurm requeues it)."""


def make_schedule(optimizer, regime: dict):
    if regime["schedule"] == "constant":
        return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    if regime["schedule"] == "onecycle":
        # torch defaults otherwise (cosine anneal, div_factor 25, AdamW beta1 cycled 0.95 -> 0.85)
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=regime["lr"], total_steps=regime["steps"],
                                                   pct_start=regime["pct_start"])
    raise ValueError(f"unknown schedule {regime['schedule']!r}")


def train_batch(arrays: dict, tc: dict, augment: bool, seed: int, step: int, device: str):
    idx = np.sort(D.batch_indices(len(arrays["train_y"]), tc["batch_size"], seed, step))  # sorted: faster mmap reads
    x = np.asarray(arrays["train_x"][idx])
    if augment:
        x = D.augment(x, seed, step)
    return torch.from_numpy(x).to(device), torch.from_numpy(np.asarray(arrays["train_y"][idx])).to(device)


@torch.no_grad()
def predict(model, x: np.ndarray, pool: str, batch_size: int, device: str) -> np.ndarray:
    model.eval()
    out = [logits(model, torch.from_numpy(np.array(x[i:i + batch_size])).to(device), pool).float().cpu()
           for i in range(0, len(x), batch_size)]
    model.train()
    return torch.cat(out).numpy()


class Classifier(torch.nn.Module):
    """The ViT with its pooling in forward(), so that DDP sees (and syncs) the whole computation."""

    def __init__(self, model, pool: str):
        super().__init__()
        self.model, self.pool = model, pool

    def forward(self, pixel_values):
        return logits(self.model, pixel_values, self.pool)


def train_run(job, dp: DataParallel, ckpt, state: dict, regime_name: str, seed: int, arrays: dict) -> dict:
    """Train one (regime, seed) run of job.method, resuming from state['current'] if it is this run.
    Under `accelerate launch` each process takes its shard of every global batch (data parallel)."""
    cfg, tc, device = job.cfg, job.cfg["train"], str(dp.device)
    regime, pool = tc["regimes"][regime_name], cfg["model"]["pool"]
    key = run_key(regime_name, seed)
    augment = bool(cfg["data"][DATASET].get("augment", False))

    torch.manual_seed(seed)  # same seed -> same default init of every non-attention weight, for all methods
    model = build_model(cfg["model"], depth=regime["depth"])
    initialise(model, job.method, cfg["init"].get(job.method))
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=regime["lr"], weight_decay=tc["weight_decay"],
                                  betas=tuple(tc["betas"]))
    net, optimizer = dp.prepare(Classifier(model, pool), optimizer)
    schedule = make_schedule(optimizer, regime)

    resume = state.get("current")
    if resume and resume["key"] == key:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        set_rng_state(resume["rng"])
        losses, kappa, start, wall = list(resume["losses"]), resume["kappa"], resume["step"], resume["wall_s"]
        job.log(f"{key}: resumed at step {start}")
    else:
        kappa = vit_first_layer_kappa(model, torch.from_numpy(np.array(arrays["test_x"][0])).to(device),
                                      cfg["eval"].get("kappa_max_tokens"))
        losses, start, wall = [], 0, 0.0

    def snapshot(step: int) -> dict:
        current = {"key": key, "step": step, "model": dp.unwrap(net).model.state_dict(),
                   "optimizer": optimizer.state_dict(),
                   "schedule": schedule.state_dict(), "rng": rng_state(), "losses": list(losses),
                   "kappa": kappa, "wall_s": wall + time.time() - started}
        return {**state, "current": current}

    started = time.time()
    for step in range(start, regime["steps"]):
        x, y = dp.shard(*train_batch(arrays, tc, augment, seed, step, device))
        loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        dp.backward(loss)
        optimizer.step()
        schedule.step()
        losses.append(dp.mean(loss.item()))  # the loss of the whole global batch
        job.log(f"{key}: step {step + 1}/{regime['steps']} loss {losses[-1]:.3f}", every_s=30)
        if after_step is not None:
            after_step(key, step + 1)
        if ckpt.maybe_save(step + 1, lambda: snapshot(step + 1), stop=dp.stop_agreed(ckpt.stop_requested)):
            raise Preempted(f"{job.method} {key}: stopped by SIGTERM at step {step + 1}, checkpoint saved")

    wall += time.time() - started
    if dp.is_main:  # one process predicts and writes; the others have the same weights
        test_logits = predict(model, arrays["test_x"], pool, cfg["eval"]["batch_size"], device)
        _save_npz(job.out_dir / f"run_{key}.npz", {"losses": np.asarray(losses, dtype=np.float64),
                                                    "test_logits": test_logits, "kappa": np.float64(kappa)})
        with atomic_path(job.out_dir / f"model_{key}.pt") as tmp:
            torch.save(model.state_dict(), tmp)
    dp.wait()
    return {"kappa_J_init": kappa, "final_train_loss": float(np.mean(losses[-10:])), "wall_s": round(wall, 3)}


def train_method(job) -> dict:
    # torch is imported here, after the core configured torch (it does so only if the stage module
    # imported it): one thread per job as the core set in OMP_NUM_THREADS, and no denormals, which
    # slow the std-0.02 init ~10x on CPU
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.set_flush_denormal(True)
    arrays = load_prepared(job.prepared_dir(DATASET))
    dp = DataParallel(job.cfg.get("device", "cpu"))
    previous_handler = signal.getsignal(signal.SIGTERM)
    ckpt = job.checkpointer()
    try:
        state = ckpt.load() or {"completed": {}, "current": None}
        for regime_name, seed in runs_of(job.cfg, job.method, job.seeds):
            key = run_key(regime_name, seed)
            if key in state["completed"]:
                continue
            state["completed"][key] = train_run(job, dp, ckpt, state, regime_name, seed, arrays)
            state["current"] = None
            ckpt.save(state)  # a finished run is never trained again after a restart
            job.log(f"{key}: done ({state['completed'][key]['wall_s']:.1f}s)")
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    ckpt.clear()  # metrics.json now marks completion; the weights are in model_*.pt
    return {"runs": state["completed"]}
