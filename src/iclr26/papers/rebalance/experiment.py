"""Stages of card 03, "Efficient Reasoning with Balanced Thinking" (ReBalance, arXiv 2603.12372).

acquire   tiny: chain-arithmetic problems whose teacher traces carry the paper's premises (errors
          fixed by a reflection step, redundant re-checks mostly on easy problems, unfixed errors on
          hard ones), split into train / calibration ("seen") / test; full: the benchmark and
          calibration files of the config (core.lm.benchmarks), as {problem, answer} rows.
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
import re
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
        from iclr26.core.lm.benchmarks import fetch_splits

        return fetch_splits(spec["splits"], job.out_dir)
    if spec["source"] != "chains":
        raise ConfigError(f"data.{job.dataset}.source must be chains or hub, got {spec['source']!r}")
    from iclr26.core.lm import traces as T

    splits = {"train": spec["n_train"], "calibration": spec["n_calibration"], "test": spec["n_test"]}
    return T.write_splits(spec, job.out_dir, splits)


def prepare(job) -> dict:
    if job.cfg["model"].get("source"):
        return {"note": "full scale: model.source is the reasoning model; nothing to train"}
    from iclr26.core.lm.base import train_base_models

    def examples_for(fmt, rows, seed):
        return [fmt.training_example(r["problem"], r["trace"], r["trace_answer"]) for r in rows]

    return train_base_models(job, examples_for)


# The official code reads its prototypes from, and adds its steering vector to, hidden_states[layer]:
# the input of decoder layer `layer` (modeling_qwen2_dynamic_3D.py), which is what core.lm.hooks hooks.
# It splits thinking steps at "\n\n+" in the text, as core.lm.formats does.


def _load(job, seed: int):
    """(model, format): the pretrained model.source (full) or the seed's base model (tiny)."""
    from iclr26.core.lm import model as M
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm.formats import make_format

    M.configure_torch(job.cfg.get("threads", 1))
    device = M.pick_device(job.cfg.get("device"))
    spec = job.cfg["model"]
    if spec.get("source"):
        tokenizer = K.load_tokenizer(spec["source"], spec.get("revision"))
        model = M.build_model(spec, tokenizer, device=device)
    else:
        tokenizer = K.load_tokenizer(job.prepared_dir(DATASET) / "tokenizer")
        model = M.build_model({"source": str(job.prepared_dir(DATASET) / f"base_s{seed}")}, tokenizer, device=device)
    return model.eval(), make_format(job.cfg.get("format"), tokenizer)


# ----------------------------------------------------------------------------- sampling with an arm
def sample(model, fmt, rows: list[dict], cfg: dict, seed: int, arm: str, steering: dict | None = None,
           temperature: float | None = None):
    """Sample the thinking of every row under one arm (at eval.temperature unless given); returns the Generation."""
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import hooks as H

    tokenizer = fmt.tokenizer
    prompts = [fmt.prompt_ids(r["problem"]) for r in rows]
    ev = cfg["eval"]
    kwargs = dict(max_new_tokens=ev["max_new_tokens"], top_p=ev.get("top_p", 1.0), seed=seed,
                  temperature=ev["temperature"] if temperature is None else temperature,
                  batch_size=ev.get("batch_size", 512))
    if arm == "keyword_suppression":   # NoWait-like: the reflection keywords can never be sampled
        kwargs["banned"] = fmt.keyword_ids(cfg["method"]["keywords"])
    if arm not in STEERED:
        return G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, **kwargs)
    end = fmt.end_think_id
    controller = C.Controller(steering, cfg["method"]["slope"], cfg["method"]["high_val_2"])
    state = {}  # row -> (position where the current step started, confidence of the previous step)

    def before_token(rows_idx, last, gen):
        alphas = np.zeros(len(rows_idx))
        for b, row in enumerate(rows_idx):
            tokens = gen.tokens[row]
            if not fmt.ends_step(tokens) or end in tokens:   # steer only at boundaries inside <think>
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
        model, fmt = _load(job, seed)
        cal = calibrate(model, fmt, read_jsonl(job.raw_dir(DATASET) / "calibration.jsonl"), job.cfg, seed)
        atomic_write(job.out_dir / f"steering_s{seed}.json", json.dumps(cal))
        out[f"s{seed}"] = {k: v for k, v in cal.items() if k != "vector"}
    return out


def calibrate(model, fmt, rows: list[dict], cfg: dict, seed: int) -> dict:
    """Phase A/B: sample, split steps, confidences, layer-l state at each step's first token."""
    import torch

    from iclr26.core.lm import hooks as H

    # the official collection pass decodes greedily (transformer_inference_dp.py: do_sample=False)
    gen = sample(model, fmt, rows, cfg, seed + 10_000, "original", temperature=cfg["method"]["calibration_temperature"])
    cue = re.compile(r"\b(?:" + "|".join(re.escape(w.lower()) for w in cfg["method"]["cue_words"]) + r")\b")
    conf, cues, hidden, variances, labelled_conf = [], [], [], [], []
    prompts = [fmt.prompt_ids(r["problem"]) for r in rows]
    with H.LayerHook(model, cfg["method"]["layer"], capture=True) as hook, torch.no_grad():
        for prompt, tokens, logprob, maxprob in zip(prompts, gen.tokens, gen.logprob, gen.maxprob):
            spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
            if not spans:
                continue
            texts = fmt.step_texts(tokens, spans)
            model(input_ids=torch.tensor([prompt + tokens], device=model.device))
            c_prev = None
            for lo, hi in spans:
                conf.append(C.step_confidence(logprob[lo:hi]))
                if c_prev is not None:    # compute_global_diff_quartiles: consecutive steps, j >= 1
                    variances.append(C.variance_proxy(conf[-1], c_prev))
                c_prev = conf[-1]
            labelled = range(1, len(spans))   # steps after a boundary: the official code reads the state
            for i in labelled:                # at the first token after each blank line, so not step 0
                cues.append(bool(cue.search(texts[i].lower())))
                hidden.append(hook.captured[0, len(prompt) + spans[i][0]].float().cpu().numpy())
                labelled_conf.append(conf[-len(spans) + i])
    if not hidden:
        from iclr26.core.errors import DataError

        raise DataError("calibration: no sampled trace has more than one step; no step state to label")
    all_conf = np.array(conf)
    conf, cues, hidden = np.array(labelled_conf), np.array(cues), np.stack(hidden)
    positive, negative, q25, q75 = C.labels(conf, cues, reference=all_conf)
    if not positive.any() or not negative.any():
        from iclr26.core.errors import DataError

        raise DataError(f"calibration: {len(conf)} steps gave {int(positive.sum())} positive and "
                        f"{int(negative.sum())} negative steps; the steering vector needs both (more calibration problems)")
    v = C.steering_vector(hidden, positive, negative)
    low1, low2 = C.lda_magnitudes(hidden, positive, negative, v, cfg["method"].get("lda_threshold", "official"))
    # the controller's thresholds are the offline quartiles (of exp mean log-prob), as shipped, while the
    # online c it compares them with is the mean max-prob of the step (modeling_qwen2_dynamic_3D.py)
    q25c, q75c = q25, q75
    q25v, q75v = np.quantile(variances, [0.25, 0.75]) if variances else (0.0, 0.0)
    return {"vector": v.tolist(), "low_val_1": low1, "low_val_2": low2, "q25c": float(q25c), "q75c": float(q75c),
            "q25v": float(q25v), "q75v": float(q75v), "label_q25": q25, "label_q75": q75,
            "n_steps": int(len(conf)), "n_positive": int(positive.sum()), "n_negative": int(negative.sum()),
            "vector_norm": float(np.linalg.norm(v))}


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    cfg = job.cfg
    rows = read_jsonl(job.raw_dir(DATASET) / "test.jsonl")
    keywords = [k.lower() for k in cfg["method"]["keywords"]]
    records = []
    for seed in job.seeds:
        model, fmt = _load(job, seed)
        steering = (json.loads((job.out_dir / f"steering_s{seed}.json").read_text())
                    if job.method in STEERED else None)
        gen = sample(model, fmt, rows, cfg, seed, job.method, steering)
        parsed = [fmt.parse(t) for t in gen.tokens]
        correct = np.array([fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, rows)])
        length = np.array([p["thinking_tokens"] for p in parsed], dtype=float)
        record = {
            "seed": seed, "accuracy": float(correct.mean()), "thinking_tokens": float(length.mean()),
            "len_correct": float(length[correct].mean()) if correct.any() else float("nan"),
            "len_incorrect": float(length[~correct].mean()) if (~correct).any() else float("nan"),
            "reflections": float(np.mean([sum(p["thinking"].lower().count(k) for k in keywords) for p in parsed])),
            "n": len(rows)}
        if cfg["data"][DATASET]["source"] == "chains":
            record.update(_audit(cfg, rows, parsed, correct))
        records.append(record)
    return {"records": records}


def _audit(cfg: dict, rows: list[dict], parsed: list[dict], correct: np.ndarray) -> dict:
    """Tiny task only: accuracy on hard problems and on traces that made an arithmetic error
    (replayed step by step against the problem, core.lm.traces.audit_thinking)."""
    from iclr26.core.lm import traces as T

    modulus = int(cfg["data"][DATASET]["modulus"])
    erred = np.array([T.audit_thinking(r["problem"], p["thinking"], modulus)["errors"] > 0 for p, r in zip(parsed, rows)])
    is_hard = np.array([r["n_ops"] >= int(cfg["eval"]["hard_min_ops"]) for r in rows])
    return {"acc_hard": float(correct[is_hard].mean()) if is_hard.any() else float("nan"),
            "errors_fixed": float(correct[erred].mean()) if erred.any() else float("nan"),
            "traces_with_error": float(erred.mean())}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    from iclr26.core.figures import pyplot, save

    from . import PAPER

    plt = pyplot()
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
    return [save(fig, Path(out_dir) / "accuracy_vs_thinking_tokens.png")]
