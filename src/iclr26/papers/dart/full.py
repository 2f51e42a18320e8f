"""DART's full-scale path (model.encoder: pretrained): Clotho waveforms at PANNs' rate into
ResNet38, captions tokenised for BERT, the three losses of training.py on the joint embedding.

    acquire_encoders  the PANNs ResNet38 checkpoint (md5-pinned Zenodo file, core.acquire) and the
                      BERT snapshot at its pinned commit (core.acquire.snapshot_model)
    prepare           clips -> mono at model.audio.frontend.sample_rate, zero-padded / cropped to
                      model.audio.max_seconds -> float16 arrays (N, samples); captions -> BERT ids;
                      clips listed in a captions CSV but absent on disk are counted, and a split
                      below data.clotho.min_clips is one DataError
    fit               one run (method, batch, noise): Adam over encoders and heads (m-LTM: lr 5e-5,
                      gradient norm clipped at 2; train.epochs caption-epochs, constant lr, as
                      m-LTM's released settings), bf16 autocast on CUDA; after every caption-epoch
                      the model is scored on the Clotho validation split (train.select: R@1+R@5+R@10
                      of both directions) and the evaluation embeddings of the best epoch are kept
                      (m-LTM keeps the best epoch per direction); the norms of the gradients of
                      L_IOT and lambda L_UWD w.r.t. the embeddings are logged every step and their
                      late-training medians returned; the batch's embeddings are computed in chunks of
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


def splits(cfg: dict) -> tuple[str, ...]:
    """The Clotho splits of a full-scale config: those of data.clotho.files (development, validation,
    evaluation), else development and evaluation."""
    files = cfg["data"]["clotho"].get("files") or {}
    return tuple(files) or ("development", "evaluation")


def prepare(raw: Path, out: Path, cfg: dict, splits) -> dict:
    from transformers import AutoTokenizer

    from iclr26.core.audio import read_clip, read_clotho_captions

    spec = cfg["data"]["clotho"]
    rate, n_samples = int(cfg["model"]["audio"]["frontend"]["sample_rate"]), samples(cfg)
    tok = AutoTokenizer.from_pretrained(text_dir(cfg))
    max_len = int(cfg["text_encoder"]["max_length"])
    minimum = spec.get("min_clips") or {}
    arrays, info = {}, {}
    for split in splits:
        listed = read_clotho_captions(raw / f"clotho_captions_{split}.csv")
        rows = [r for r in listed if (raw / split / r["file_name"]).exists()]
        missing = [r["file_name"] for r in listed if not (raw / split / r["file_name"]).exists()]
        if missing:
            print(f"dart: {len(missing)} of the {len(listed)} {split} clips of the captions CSV are not under "
                  f"{raw / split} (dropped), e.g. {missing[:3]}")
        if spec.get("max_per_split"):
            rows = rows[: int(spec["max_per_split"])]
        if not rows:
            raise DataError(f"dart: no {split} clips under {raw / split}")
        if split in minimum and len(rows) < int(minimum[split]):
            raise DataError(f"dart: {len(rows)} {split} clips under {raw / split}, fewer than data.clotho.min_clips."
                            f"{split} = {minimum[split]} ({len(missing)} of the CSV's {len(listed)} missing, e.g. "
                            f"{missing[:3]}): an incomplete unpack?")
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
        info[split] = {"clips": len(rows), "missing": len(missing), "tokens": width,
                       "truncated": int(sum(len(t) > max_len for t in full))}
    np.savez(out / "tokens.npz", **arrays)
    return info


def load(prepared: Path) -> dict:
    f = dict(np.load(prepared / "tokens.npz"))
    for split in ("development", "validation", "evaluation"):
        if (prepared / WAVES.format(split=split)).exists():
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


def batch_loss(U, V, method: str, cfg: dict, ram, uniform, norms: bool = False):
    """L_IOT (+ lambda L_UWD with uniform or RAM marginals) of training.fit on fp32 embeddings.
    Returns (loss, (marginal, norms)): with `norms`, the norms of the gradients of L_IOT and of
    lambda L_UWD w.r.t. the batch's embeddings (U, V together; UWD's None for IOT), else None."""
    import torch

    tcfg = cfg["train"]
    iot = losses.iot_loss(U, V, float(tcfg["eps"]), int(tcfg["iot_iters"]))
    loss, uwd, marginal = iot, None, uniform
    if method != "iot":
        if method == "dart":
            marginal = ram.update(U.detach(), V.detach())
        uwd = float(tcfg["lam"]) * losses.uwd_loss(U, V, marginal, float(tcfg["uwd_eps"]), float(tcfg["tau"]),
                                                   int(tcfg["uwd_iters"]))
        loss = iot + uwd

    def norm(term):
        if term is None or not term.requires_grad:
            return None
        grads = torch.autograd.grad(term, [U, V], retain_graph=True, allow_unused=True)
        return float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)))

    return loss, (marginal, (norm(iot), norm(uwd)) if norms else None)


def run_steps(tcfg: dict, n: int, batch: int) -> tuple[int, int]:
    """(Adam steps of a run, steps per caption-epoch). train.epochs (full scale, m-LTM's released
    schedule): that many passes over the 5 n (clip, caption) pairs at this batch size, so a smaller
    batch takes more steps; otherwise train.steps at every batch size (training.total_steps)."""
    from .training import total_steps

    per_epoch = max(1, int(round(5 * n / batch)))
    if tcfg.get("epochs"):
        if n < batch:
            raise ValueError(f"dart: {n} clips too few for batch {batch}")
        return int(tcfg["epochs"]) * per_epoch, per_epoch
    return total_steps(tcfg, n), per_epoch


def selection_score(r: dict) -> float:
    """m-LTM's validation score, R@1 + R@5 + R@10, summed over both directions (m-LTM keeps one
    checkpoint per direction; here one checkpoint for both)."""
    return float(sum(r[f"r{k}_{d}"] for k in (1, 5, 10) for d in ("a2t", "t2a")))


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
    """One run on the pretrained encoders: (evaluation audio (N, d), text (N, 5, d), info). With a
    validation split in `f` and train.select = validation, the evaluation embeddings are those of
    the caption-epoch with the best validation score (ties: the later, as m-LTM's >=); otherwise
    those after the last step."""
    import torch

    from iclr26.core.runtime import pick_device

    from . import encoders
    from .metrics import recalls

    device = pick_device(cfg.get("device"))
    tcfg, m = cfg["train"], cfg["model"]
    gen = np.random.default_rng(seed)
    waves, ids, masks = f["development_wave"], f["development_ids"], f["development_mask"]
    n = len(waves)
    steps, caption_epoch = run_steps(tcfg, n, batch)
    select = tcfg.get("select") == "validation"
    if select and "validation_wave" not in f:
        raise DataError("dart: train.select is validation but the prepared data has no validation split")
    pair = np.arange(n)
    noisy = gen.choice(n, int(round(noise * n)), replace=False)
    pair[noisy] = gen.permutation(noisy)
    net = encoders.build(cfg, text_dir(cfg), checkpoint_path(raw, cfg)).to(device)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(tcfg["lr"]))
    decay_at = int(round(float(tcfg["lr_decay_at"]) * steps)) if tcfg.get("lr_decay_at") is not None else None
    d = int(m["d"])
    ram = losses.RAM(d, float(tcfg["ram_beta"]))
    uniform = torch.full((d,), 1.0 / d, device=device)
    marginal = uniform
    autocast = device.startswith("cuda") and tcfg.get("precision") == "bf16-mixed"
    chunk = int(tcfg["chunk"])
    per_epoch = n // batch
    norms = []                      # (|grad L_IOT|, |grad lambda L_UWD|) w.r.t. (U, V), per step
    best, history, kept = -np.inf, [], None
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
        loss, (marginal, norm) = step_grads(
            net, w, t_ids, t_mask, chunk, device,
            lambda U, V: batch_loss(U, V, method, cfg, ram, uniform, norms=True), autocast)
        norms.append(norm)
        torch.nn.utils.clip_grad_norm_(params, float(tcfg["clip_grad"]))
        opt.step()
        log(f"dart {method} batch {batch} noise {noise}: step {step + 1}/{steps} loss {loss:.4f} "
            f"|grad L_IOT| {norm[0]:.3g} |grad lam L_UWD| {norm[1] if norm[1] is None else f'{norm[1]:.3g}'} "
            f"({time.monotonic() - started:.0f} s)")
        if select and ((step + 1) % caption_epoch == 0 or step + 1 == steps):
            va, vt = embed_eval(net, f, int(tcfg["eval_chunk"]), device, autocast, split="validation")
            score = selection_score(recalls(va, vt))
            history.append([step + 1, round(score, 4)])
            log(f"dart {method} batch {batch} noise {noise}: step {step + 1} validation R@1+5+10 (both ways) "
                f"{score:.2f} (best so far {max(best, score):.2f})")
            if score >= best:
                best, kept = score, (step + 1, *embed_eval(net, f, int(tcfg["eval_chunk"]), device, autocast))
            net.train()
    if kept is None:
        kept = (steps, *embed_eval(net, f, int(tcfg["eval_chunk"]), device, autocast))
    best_step, a, t = kept
    info = {"ram_ratio": float(marginal.max() / marginal.min()) if method == "dart" else float("nan"),
            "ram_nuis_corr": float("nan"), "train_seconds": round(time.monotonic() - started, 1),
            "steps": steps, "selected_step": best_step, "validation": history, **late_norms(norms)}
    return a, t, info


def late_norms(norms: list, share: float = 0.1) -> dict:
    """Medians over the last `share` of the steps of |grad L_IOT|, |grad lambda L_UWD| (w.r.t. the
    embeddings) and of their ratio (audit 09c finding 3: whether the feature-level term dominates
    late in training at the untuned lambda)."""
    late = norms[-max(1, int(round(share * len(norms)))):]
    iot = [x[0] for x in late if x and x[0] is not None]
    uwd = [x[1] for x in late if x and x[1] is not None]
    ratio = [x[1] / x[0] for x in late if x and x[0] and x[1] is not None]

    def med(v):
        return float(np.median(v)) if v else float("nan")

    return {"grad_iot_late": med(iot), "grad_uwd_late": med(uwd), "grad_ratio_late": med(ratio)}


def embed_eval(net, f: dict, chunk: int, device: str, autocast: bool, split: str = "evaluation"):
    """Embeddings of a split's clips and captions in eval mode: audio (N, d), text (N, 5, d), float32
    numpy."""
    import torch

    net.eval()
    waves, ids, masks = f[f"{split}_wave"], f[f"{split}_ids"], f[f"{split}_mask"]
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
