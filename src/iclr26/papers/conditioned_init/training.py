"""Training of one init method's (regime, seed) runs, with checkpoint and resume.

Imported only by the train stage, so acquire, prepare and evaluate never import torch (2 s each).
Each run: seed torch, build the ViT from config, apply the init, measure kappa(J) at init on test
image 0 of the seed's data, train with AdamW on the seeded data stream, save losses, test logits and
weights. weight_selection's teacher runs (regime `teacher`) train the wider teacher the same way;
its students are then initialised by selecting the teacher's weights (weight_selection.py).

Data parallel (core.distributed): under `accelerate launch` every process runs every run in
lock-step, each on its shard of every global batch; DDP averages the gradients. Only the main
process writes files.
"""
from __future__ import annotations

import functools
import math
import signal
import time

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.core.checkpoint import Stopped, rng_state, set_rng_state
from iclr26.core.distributed import DataParallel
from iclr26.core.io import atomic_path, save_arrays
from iclr26.core.runtime import pick_device

from . import data
from .analysis import run_file
from .inits import initialise
from .jacobian import vit_first_layer_head_kappas, vit_first_layer_kappa
from .model import build_model, logits
from .weight_selection import select_weights, teacher_model_config


class Preempted(Stopped):
    """SIGTERM arrived: the state is checkpointed and the job must exit (Slurm requeues it)."""


def warmup_cosine_factor(step: int, steps: int, warmup_fraction: float) -> float:
    """The lr multiplier after `step` optimizer steps: linear warmup from 1/w to 1 over the first
    w = round(warmup_fraction x steps) steps (at least 1), then cosine decay to 0 at `steps`."""
    warm = max(1, round(warmup_fraction * steps))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / max(1, steps - warm))))


def make_schedule(optimizer, regime: dict):
    """`constant`: the configured lr throughout. `warmup_cosine`: linear warmup, then cosine decay
    (warmup_cosine_factor); AdamW's betas stay as configured (no momentum cycling)."""
    if regime["schedule"] == "constant":
        return torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
    if regime["schedule"] == "warmup_cosine":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(
            warmup_cosine_factor, steps=int(regime["steps"]), warmup_fraction=float(regime["pct_start"])))
    raise ValueError(f"unknown schedule {regime['schedule']!r} (constant or warmup_cosine)")


def train_batch(arrays: dict, batch_size: int, augment: bool, seed: int, step: int, device: str, stream: int = 0):
    idx = np.sort(data.batch_indices(len(arrays["train_y"]), batch_size, seed, step, stream))  # sorted: faster reads
    x = np.asarray(arrays["train_x"][idx])
    if augment:
        x = data.augment(x, seed, step)
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


class Trainer:
    """What the runs of one train job share: the prepared data, the processes, the checkpointer.

    Use as a context manager: on success the job's checkpoint is deleted (the unit results and
    model_*.pt files hold everything), and the SIGTERM handler of the checkpointer is undone."""

    def __init__(self, job, seed_data, augment: bool):
        self.job, self.cfg, self.seed_data, self.augment = job, job.cfg, seed_data, augment
        self.kappa = {}  # (seed, depth) -> kappa at init: both regimes start from the same init
        self.dp = DataParallel(pick_device(job.cfg.get("device")))
        self.device = str(self.dp.device)
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        self.ckpt = job.checkpointer()  # installs its own SIGTERM handler
        self.resume = self.ckpt.load()  # the run that was interrupted, if any

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        signal.signal(signal.SIGTERM, self._previous_sigterm)  # in-process jobs (tests) run one after another
        if error_type is None:
            self.ckpt.clear()

    def run(self, key: str, regime_name: str, seed: int) -> dict:
        """Train one (regime, seed) run of job.method, resuming from the checkpoint if it is this run's."""
        tc, dp = self.cfg["train"], self.dp
        teacher = regime_name == "teacher"
        regime = self.cfg["weight_selection"]["teacher"]["regime"] if teacher else tc["regimes"][regime_name]
        self.arrays = self.seed_data(seed)
        model, net, optimizer, schedule = self._build(regime, seed, teacher)

        saved, self.resume = self.resume, None
        if saved and saved["key"] == key:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            schedule.load_state_dict(saved["schedule"])
            set_rng_state(saved["rng"])
            losses, kappa, start, wall = list(saved["losses"]), saved["kappa"], saved["step"], saved["wall_s"]
            self.job.log(f"{key}: resumed at step {start}")
        else:
            if teacher:
                self.kappa[seed, regime["depth"], teacher] = (float("nan"), float("nan"))  # not a row of the table
            elif (seed, regime["depth"], teacher) not in self.kappa:
                image = torch.from_numpy(np.array(self.arrays["test_x"][0])).to(self.device)
                self.kappa[seed, regime["depth"], teacher] = (
                    vit_first_layer_kappa(model, image, self.cfg["eval"].get("kappa_max_tokens")),
                    vit_first_layer_head_kappas(model))
            kappa, losses, start, wall = self.kappa[seed, regime["depth"], teacher], [], 0, 0.0

        def snapshot(step: int) -> dict:
            return {"key": key, "step": step, "model": dp.unwrap(net).model.state_dict(),
                    "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), "rng": rng_state(),
                    "losses": list(losses), "kappa": kappa, "wall_s": wall + time.time() - started}

        started = time.time()
        for step in range(start, regime["steps"]):
            x, y = dp.shard(*train_batch(self.arrays, tc["batch_size"], self.augment, seed, step, self.device,
                                         stream=int(teacher)))  # the teacher reads the pool in its own order
            loss = F.cross_entropy(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            dp.backward(loss)
            optimizer.step()
            schedule.step()
            losses.append(dp.mean(loss.item()))  # the loss of the whole global batch
            self.job.log(f"{key}: step {step + 1}/{regime['steps']} loss {losses[-1]:.3f}", every_s=30)
            stop = dp.stop_agreed(self.ckpt.stop_requested)  # every process stops at the same step
            if self.ckpt.maybe_save(step + 1, functools.partial(snapshot, step + 1), stop=stop):
                raise Preempted(f"{self.job.method} {key}: stopped by SIGTERM at step {step + 1}, checkpoint saved")
        wall += time.time() - started

        self._save(key, model, losses, kappa)
        self.job.log(f"{key}: done ({wall:.1f}s)")
        return {"kappa_J_init": kappa[0], "qkv_head_kappa_init": kappa[1],
                "final_train_loss": float(np.mean(losses[-10:])), "wall_s": round(wall, 3)}

    def _build(self, regime: dict, seed: int, teacher: bool = False):
        """The initialised ViT (or weight selection's teacher), its data-parallel wrapper, AdamW and
        the regime's lr schedule."""
        cfg, method = self.cfg, self.job.method
        torch.manual_seed(seed)  # same seed -> same default init of every non-attention weight, for all methods
        if teacher:  # the wider teacher, default init, trained like any run
            model = build_model(teacher_model_config(cfg["model"], cfg["weight_selection"]["teacher"]),
                                depth=regime["depth"])
        else:
            model = build_model(cfg["model"], depth=regime["depth"])
        if method == "weight_selection" and not teacher:
            # the teacher of this seed (trained by an earlier unit of this job): select its weights
            weights = torch.load(self.job.out_dir / f"model_teacher_s{seed}.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(select_weights(weights, model.state_dict()))
        elif not teacher:
            initialise(model, method, cfg["init"].get(method))
        model.to(self.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=regime["lr"], weight_decay=cfg["train"]["weight_decay"],
                                      betas=tuple(cfg["train"]["betas"]))
        net, optimizer = self.dp.prepare(Classifier(model, cfg["model"]["pool"]), optimizer)
        return model, net, optimizer, make_schedule(optimizer, regime)

    def _save(self, key: str, model, losses: list[float], kappa: tuple[float, float]) -> None:
        """Test logits, losses and kappa for evaluate, and the weights; written by the main process
        (the others hold the same weights), which the others wait for."""
        if self.dp.is_main:
            test_logits = predict(model, self.arrays["test_x"], self.cfg["model"]["pool"],
                                  self.cfg["eval"]["batch_size"], self.device)
            save_arrays(self.job.out_dir / run_file(key), losses=np.asarray(losses, dtype=np.float64),
                        test_logits=test_logits, kappa=np.float64(kappa[0]),
                        qkv_head_kappa=np.float64(kappa[1]))
            with atomic_path(self.job.out_dir / f"model_{key}.pt") as tmp:
                torch.save(model.state_dict(), tmp)
        self.dp.wait()
