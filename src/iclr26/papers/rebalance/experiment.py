"""Stages of card 03, "Efficient Reasoning with Balanced Thinking" (ReBalance, arXiv 2603.12372).

acquire   tiny: chain-arithmetic problems whose teacher traces carry the paper's premises (errors
          fixed by a reflection step, redundant re-checks mostly on easy problems, unfixed errors on
          hard ones), split into train / calibration ("seen") / test; full: the benchmark files.
prepare   tiny: the tokenizer and, per seed, the reasoning model (Qwen2 trained from scratch on the
          teacher traces; at full scale model.source is loaded instead).
train     ReBalance is training-free; the steering arms calibrate here (Phase A/B, control.py): the
          model samples traces on the calibration set, steps get confidences and layer-l states,
          the prototypes give v and the LDA magnitudes. original / keyword_suppression: nothing.
evaluate  every arm samples the test traces (temperature 0.7) and is scored: accuracy (all and on
          hard problems), thinking tokens, lengths of correct and incorrect traces, errors fixed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from iclr26.core.errors import ConfigError
from iclr26.core.io import atomic_write, read_jsonl

from . import control as C

DATASET = "math"
STEERED = ("static_steering", "rebalance")


# ----------------------------------------------------------------------------- acquire, prepare
def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id=spec["hub_id"], repo_type="dataset", revision=spec.get("revision"),
                                 local_dir=job.out_dir / "test")
        from iclr26.core.acquire import download

        calib = download(spec["calibration_url"], job.out_dir / "calibration.jsonl", spec.get("calibration_sha256"))
        return {"test": str(path), "calibration": str(calib)}
    if spec["source"] != "chains":
        raise ConfigError(f"data.{job.dataset}.source must be chains or hub, got {spec['source']!r}")
    from iclr26.core.lm import traces as T

    splits = {"train": spec["n_train"], "calibration": spec["n_calibration"], "test": spec["n_test"]}
    return T.write_splits(spec, job.out_dir, splits)


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        return {"note": "full scale: model.source is the reasoning model; nothing to train"}
    from iclr26.core.lm import traces as T
    from iclr26.core.lm.base import train_base_models

    def examples_for(tokenizer, rows, seed):
        return [T.training_example(tokenizer, r["problem"], r["trace"], r["trace_answer"]) for r in rows]

    return train_base_models(job, examples_for)


def _load(job, seed: int):
    from iclr26.core.lm import model as M
    from iclr26.core.lm import tokenizer as K

    M.configure_torch(job.cfg.get("threads", 1))
    if job.cfg["data"][DATASET]["source"] == "hub":
        spec = job.cfg["model"]
        tokenizer = K.load_tokenizer(spec["source"], spec.get("revision"))
        return tokenizer, M.build_model(spec, tokenizer).eval()
    tokenizer = K.load_tokenizer(job.prepared_dir(DATASET) / "tokenizer")
    return tokenizer, M.build_model({"source": str(job.prepared_dir(DATASET) / f"base_s{seed}")}, tokenizer).eval()


# ----------------------------------------------------------------------------- sampling with an arm
def sample(model, tokenizer, rows: list[dict], cfg: dict, seed: int, arm: str, steering: dict | None = None):
    """Sample the thinking of every row under one arm; returns the Generation."""
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import hooks as H
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    prompts = [T.encode(tokenizer, T.prompt_text(r["problem"])) for r in rows]
    ev = cfg["eval"]
    kwargs = dict(max_new_tokens=ev["max_new_tokens"], temperature=ev["temperature"], seed=seed)
    if arm == "keyword_suppression":   # NoWait-like: the reflection cue can never be sampled
        kwargs["banned"] = T.encode(tokenizer, T.REFLECTION)
    if arm not in STEERED:
        return G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, **kwargs)
    sep, end = tokenizer.convert_tokens_to_ids(K.SEP), tokenizer.convert_tokens_to_ids(K.END_THINK)
    controller = C.Controller(steering, cfg["method"]["slope"], cfg["method"]["high_val_2"], cfg["method"]["k_iqr"])
    state = {}  # row -> (position where the current step started, confidence of the previous step)

    def before_token(rows_idx, last, gen):
        alphas = np.zeros(len(rows_idx))
        for b, row in enumerate(rows_idx):
            tokens = gen.tokens[row]
            if int(last[b]) != sep or end in tokens:      # steer only at boundaries inside <think>
                continue
            start, c_prev = state.get(row, (0, None))
            c = float(np.mean(gen.maxprob[row][start:-1])) if len(tokens) - 1 > start else 1.0
            var = C.variance_proxy(c, c_prev)
            alphas[b] = steering["low_val_1"] if arm == "static_steering" else controller.alpha(c, var)
            state[row] = (len(tokens), c)
        hook.set_shift(alphas, np.asarray(steering["vector"], dtype=np.float32))

    with H.LayerHook(model, cfg["method"]["layer"]) as hook:
        return G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id,
                          before_token=before_token, **kwargs)


# ----------------------------------------------------------------------------- train = calibration
def train(job) -> dict:
    if job.method not in STEERED:
        return {"note": f"{job.method}: training-free, no calibration"}
    out = {}
    for seed in job.seeds:
        tokenizer, model = _load(job, seed)
        cal = calibrate(model, tokenizer, read_jsonl(job.raw_dir(DATASET) / "calibration.jsonl"), job.cfg, seed)
        atomic_write(job.out_dir / f"steering_s{seed}.json", json.dumps(cal))
        out[f"s{seed}"] = {k: v for k, v in cal.items() if k != "vector"}
    return out


def calibrate(model, tokenizer, rows: list[dict], cfg: dict, seed: int) -> dict:
    """Phase A/B: sample, split steps, confidences, layer-l state at each step's first token."""
    import torch

    from iclr26.core.lm import generate as G
    from iclr26.core.lm import hooks as H
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    gen = sample(model, tokenizer, rows, cfg, seed + 10_000, "original")
    sep, end = tokenizer.convert_tokens_to_ids(K.SEP), tokenizer.convert_tokens_to_ids(K.END_THINK)
    cue = T.encode(tokenizer, T.REFLECTION)[0]
    conf, online, cues, hidden, variances = [], [], [], [], []
    prompts = [T.encode(tokenizer, T.prompt_text(r["problem"])) for r in rows]
    with H.LayerHook(model, cfg["method"]["layer"], capture=True) as hook, torch.no_grad():
        for prompt, tokens, logprob, maxprob in zip(prompts, gen.tokens, gen.logprob, gen.maxprob):
            stop = tokens.index(end) if end in tokens else len(tokens)
            spans = G.step_spans(tokens, 0, stop, sep)
            if not spans:
                continue
            model(input_ids=torch.tensor([prompt + tokens]))
            c_prev = None
            for lo, hi in spans:
                c = C.step_confidence(logprob[lo:hi])
                conf.append(c)
                online.append(float(np.mean(maxprob[lo:hi])))
                variances.append(C.variance_proxy(online[-1], c_prev))
                c_prev = online[-1]
                cues.append(cue in tokens[lo:hi])
                hidden.append(hook.captured[0, len(prompt) + lo].numpy())
    conf, cues, hidden = np.array(conf), np.array(cues), np.stack(hidden)
    positive, negative, q25, q75 = C.labels(conf, cues)
    v = C.steering_vector(hidden, positive, negative)
    low1, low2 = C.lda_magnitudes(hidden, positive, negative, v)
    q25c, q75c = np.quantile(online, [0.25, 0.75])   # the online confidence (mean max-prob) sets F and the gates
    q25v, q75v = np.quantile(variances, [0.25, 0.75])
    return {"vector": v.tolist(), "low_val_1": low1, "low_val_2": low2, "q25c": float(q25c), "q75c": float(q75c),
            "q25v": float(q25v), "q75v": float(q75v), "label_q25": q25, "label_q75": q75,
            "n_steps": int(len(conf)), "n_positive": int(positive.sum()), "n_negative": int(negative.sum()),
            "vector_norm": float(np.linalg.norm(v))}


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    from iclr26.core.lm import traces as T

    cfg = job.cfg
    rows = read_jsonl(job.raw_dir(DATASET) / "test.jsonl")
    hard = int(cfg["eval"]["hard_min_ops"])
    records = []
    for seed in job.seeds:
        tokenizer, model = _load(job, seed)
        steering = (json.loads((job.out_dir / f"steering_s{seed}.json").read_text())
                    if job.method in STEERED else None)
        gen = sample(model, tokenizer, rows, cfg, seed, job.method, steering)
        parsed = [T.parse_completion(tokenizer, t) for t in gen.tokens]
        correct = np.array([p["answer"] == r["answer"] for p, r in zip(parsed, rows)])
        length = np.array([p["thinking_tokens"] for p in parsed], dtype=float)
        audits = [T.audit_thinking(r["problem"], p["thinking"], int(cfg["data"][DATASET]["modulus"]))
                  for p, r in zip(parsed, rows)]
        erred = np.array([a["errors"] > 0 for a in audits])
        is_hard = np.array([r["n_ops"] >= hard for r in rows])
        records.append({
            "seed": seed, "accuracy": float(correct.mean()), "acc_hard": float(correct[is_hard].mean()),
            "thinking_tokens": float(length.mean()),
            "len_correct": float(length[correct].mean()) if correct.any() else float("nan"),
            "len_incorrect": float(length[~correct].mean()) if (~correct).any() else float("nan"),
            "errors_fixed": float(correct[erred].mean()) if erred.any() else float("nan"),
            "traces_with_error": float(erred.mean()),
            "reflections": float(np.mean([p["thinking"].split().count(T.REFLECTION) for p in parsed])),
            "n": len(rows)})
    return {"records": records}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import PAPER

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for method in PAPER.methods:
        rows = records[records["method"] == method]
        if rows.empty:
            continue
        ax.scatter(rows["thinking_tokens"], rows["accuracy"], alpha=0.4)
        ax.errorbar(rows["thinking_tokens"].mean(), rows["accuracy"].mean(), xerr=rows["thinking_tokens"].std(),
                    yerr=rows["accuracy"].std(), marker="o", capsize=3, label=f"{method} (n={len(rows)})")
    ax.set(title="accuracy vs thinking tokens (dots: seeds)", xlabel="mean thinking tokens", ylabel="accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "accuracy_vs_thinking_tokens.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
