"""DART's full-scale path (model.encoder: pretrained): Clotho waveforms at PANNs' rate into
ResNet38, captions tokenised for BERT, the three losses of training.py on the joint embedding.

    acquire_encoders  the PANNs ResNet38 checkpoint (md5-pinned Zenodo file, core.acquire) and the
                      BERT snapshot at its pinned commit (core.acquire.snapshot_model)
    prepare           clips -> mono at model.audio.frontend.sample_rate, zero-padded / cropped to
                      model.audio.max_seconds -> float16 arrays (N, samples); captions -> BERT ids
    fit               one run (method, batch, noise): Adam over encoders and heads (m-LTM: lr 5e-5,
                      gradient norm clipped at 2, lr x 0.1 at train.lr_decay_at of the steps),
                      bf16 autocast on CUDA; the batch's embeddings are computed in chunks of
                      train.chunk clips and the gradient of the batch-level loss is pushed back chunk
                      by chunk (gradient caching: no-grad pass -> loss gradient w.r.t. U, V -> each
                      chunk re-run with its own RNG state and back-propagated), so batch 256 of 30 s
                      clips fits one GPU; batch norm sees a chunk's statistics, as in multi-GPU runs
The batch, its noisy pairs and caption draws use the same generator calls as training.fit.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from iclr26.core.errors import DataError

from . import losses

WAVES = "waves_{split}.npy"


def checkpoint_path(raw: Path, cfg: dict) -> Path:
    return raw / "encoders" / cfg["data"]["clotho"]["panns"]["file"]


def acquire_encoders(cfg: dict, raw: Path) -> dict:
    from iclr26.core.acquire import download_pinned, snapshot_model

    out = {"panns": download_pinned(cfg["data"]["clotho"]["panns"], checkpoint_path(raw, cfg))}
    if not Path(cfg["text_encoder"]["source"]).exists():     # a hub id: the pinned snapshot (GPU nodes are offline)
        out["text_encoder"] = snapshot_model(cfg["text_encoder"])
    return out


def text_dir(cfg: dict) -> str:
    from iclr26.core.acquire import model_path

    return model_path(cfg["text_encoder"])


def samples(cfg: dict) -> int:
    a = cfg["model"]["audio"]
    return int(round(float(a["max_seconds"]) * int(a["frontend"]["sample_rate"])))


def prepare(raw: Path, out: Path, cfg: dict, splits) -> dict:
    from transformers import AutoTokenizer

    from iclr26.core.audio import read_clip, read_clotho_captions

    spec = cfg["data"]["clotho"]
    rate, n_samples = int(cfg["model"]["audio"]["frontend"]["sample_rate"]), samples(cfg)
    tok = AutoTokenizer.from_pretrained(text_dir(cfg))
    max_len = int(cfg["text_encoder"]["max_length"])
    arrays, info = {}, {}
    for split in splits:
        rows = [r for r in read_clotho_captions(raw / f"clotho_captions_{split}.csv")
                if (raw / split / r["file_name"]).exists()]
        if spec.get("max_per_split"):
            rows = rows[: int(spec["max_per_split"])]
        if not rows:
            raise DataError(f"dart: no {split} clips under {raw / split}")
        waves = np.lib.format.open_memmap(out / WAVES.format(split=split), mode="w+", dtype=np.float16,
                                          shape=(len(rows), n_samples))
        for i, r in enumerate(rows):
            waves[i] = read_clip(raw / split / r["file_name"], rate, 1, n_samples)[0]
        waves.flush()
        caps = [c for r in rows for c in r["captions"]]
        enc = tok(caps, padding="longest", truncation=True, max_length=max_len, return_tensors="np")
        width = enc["input_ids"].shape[1]
        arrays[f"{split}_ids"] = enc["input_ids"].astype(np.int64).reshape(len(rows), 5, width)
        arrays[f"{split}_mask"] = enc["attention_mask"].astype(np.int8).reshape(len(rows), 5, width)
        full = tok(caps, truncation=False)["input_ids"]
        info[split] = {"clips": len(rows), "tokens": width, "truncated": int(sum(len(t) > max_len for t in full))}
    np.savez(out / "tokens.npz", **arrays)
    return info


def load(prepared: Path) -> dict:
    f = dict(np.load(prepared / "tokens.npz"))
    for split in ("development", "evaluation"):
        f[f"{split}_wave"] = np.load(prepared / WAVES.format(split=split), mmap_mode="r")
    return f


def _rng_state(device: str):
    import torch

    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.startswith("cuda") else None)


def _set_rng_state(state, device: str):
    import torch

    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _bn_momentum(net, value):
    """Set every batch norm's momentum to `value` (0: use batch statistics, update no running
    statistics: the gradient-caching pass without gradients) and return the old values."""
    import torch

    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    old = [m.momentum for m in bns]
    for m, v in zip(bns, value if isinstance(value, list) else [value] * len(bns)):
        m.momentum = v
    return old


def batch_loss(U, V, method: str, cfg: dict, ram, uniform):
    """L_IOT (+ lambda L_UWD with uniform or RAM marginals) of training.fit on fp32 embeddings."""
    tcfg = cfg["train"]
    loss = losses.iot_loss(U, V, float(tcfg["eps"]), int(tcfg["iot_iters"]))
    marginal = uniform
    if method != "iot":
        if method == "dart":
            marginal = ram.update(U.detach(), V.detach())
        loss = loss + float(tcfg["lam"]) * losses.uwd_loss(U, V, marginal, float(tcfg["uwd_eps"]), float(tcfg["tau"]),
                                                           int(tcfg["uwd_iters"]))
    return loss, marginal


def step_grads(net, waves, ids, mask, chunk: int, device: str, loss_fn, autocast: bool):
    """Accumulate into net's .grad the gradient of loss_fn(U, V) for the batch, computing the
    embeddings `chunk` clips at a time (gradient caching; one plain pass when the batch fits a
    chunk). Returns the loss (float) and loss_fn's extra output."""
    import torch

    k = len(waves)
    parts = [slice(s, min(s + chunk, k)) for s in range(0, k, chunk)]

    def embed(p):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            return net.enc_audio(waves[p]), net.enc_text(ids[p], mask[p])

    if len(parts) == 1:
        U, V = embed(parts[0])
        loss, extra = loss_fn(U, V)
        loss.backward()
        return float(loss.detach()), extra
    states, us, vs = [], [], []
    old = _bn_momentum(net, 0.0)
    with torch.no_grad():
        for p in parts:
            states.append(_rng_state(device))
            u, v = embed(p)
            us.append(u)
            vs.append(v)
    _bn_momentum(net, old)
    U, V = torch.cat(us).requires_grad_(True), torch.cat(vs).requires_grad_(True)
    loss, extra = loss_fn(U, V)
    loss.backward()
    end = _rng_state(device)
    for p, state in zip(parts, states):
        _set_rng_state(state, device)
        u, v = embed(p)
        torch.autograd.backward([u, v], [U.grad[p], V.grad[p]])
    _set_rng_state(end, device)
    return float(loss.detach()), extra


def fit(f: dict, method: str, batch: int, noise: float, cfg: dict, seed: int, raw: Path, log=print):
    """One run on the pretrained encoders: (evaluation audio (N, d), text (N, 5, d), info)."""
    import torch

    from iclr26.core.runtime import pick_device

    from . import encoders
    from .training import total_steps

    device = pick_device(cfg.get("device"))
    tcfg, m = cfg["train"], cfg["model"]
    gen = np.random.default_rng(seed)
    waves, ids, masks = f["development_wave"], f["development_ids"], f["development_mask"]
    n = len(waves)
    steps = total_steps(tcfg, n)                 # train.steps at every batch size (audit 09 finding 2)
    pair = np.arange(n)
    noisy = gen.choice(n, int(round(noise * n)), replace=False)
    pair[noisy] = gen.permutation(noisy)
    net = encoders.build(cfg, text_dir(cfg), checkpoint_path(raw, cfg)).to(device)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(tcfg["lr"]))
    decay_at = int(round(float(tcfg["lr_decay_at"]) * steps))
    d = int(m["d"])
    ram = losses.RAM(d, float(tcfg["ram_beta"]))
    uniform = torch.full((d,), 1.0 / d, device=device)
    marginal = uniform
    autocast = device.startswith("cuda") and tcfg.get("precision") == "bf16-mixed"
    chunk = int(tcfg["chunk"])
    per_epoch = n // batch
    net.train()
    started = time.monotonic()
    for step in range(steps):
        if step % per_epoch == 0:
            order = gen.permutation(n)
        if step == decay_at:
            for g in opt.param_groups:
                g["lr"] *= float(tcfg["lr_decay_gamma"])
        idx = np.sort(order[(step % per_epoch) * batch: (step % per_epoch + 1) * batch])
        cap = gen.integers(0, 5, batch)
        w = torch.as_tensor(np.asarray(waves[idx], dtype=np.float32), device=device)
        t_ids, t_mask = ids[pair[idx], cap], masks[pair[idx], cap]
        width = int(t_mask.sum(1).max())
        t_ids = torch.as_tensor(t_ids[:, :width], device=device)
        t_mask = torch.as_tensor(t_mask[:, :width].astype(np.int64), device=device)
        opt.zero_grad()
        loss, marginal = step_grads(net, w, t_ids, t_mask, chunk, device,
                                    lambda U, V: batch_loss(U, V, method, cfg, ram, uniform), autocast)
        torch.nn.utils.clip_grad_norm_(params, float(tcfg["clip_grad"]))
        opt.step()
        log(f"dart {method} batch {batch} noise {noise}: step {step + 1}/{steps} loss {loss:.4f} "
            f"({time.monotonic() - started:.0f} s)")
    a, t = embed_eval(net, f, int(tcfg["eval_chunk"]), device, autocast)
    info = {"ram_ratio": float(marginal.max() / marginal.min()) if method == "dart" else float("nan"),
            "ram_nuis_corr": float("nan"), "train_seconds": round(time.monotonic() - started, 1)}
    return a, t, info


def embed_eval(net, f: dict, chunk: int, device: str, autocast: bool):
    """Evaluation embeddings in eval mode: audio (N, d), text (N, 5, d), float32 numpy."""
    import torch

    net.eval()
    waves, ids, masks = f["evaluation_wave"], f["evaluation_ids"], f["evaluation_mask"]
    n, width = ids.shape[0], ids.shape[2]
    flat_ids, flat_mask = ids.reshape(-1, width), masks.reshape(-1, width).astype(np.int64)
    audio, text = [], []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for s in range(0, n, chunk):
            audio.append(net.enc_audio(torch.as_tensor(np.asarray(waves[s:s + chunk], dtype=np.float32),
                                                       device=device)).cpu())
        for s in range(0, 5 * n, chunk):
            text.append(net.enc_text(torch.as_tensor(flat_ids[s:s + chunk], device=device),
                                     torch.as_tensor(flat_mask[s:s + chunk], device=device)).cpu())
    a = torch.cat(audio).float().numpy()
    return a, torch.cat(text).float().numpy().reshape(n, 5, -1)
