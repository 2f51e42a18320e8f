"""Phase A/B of card 03: collect step confidences and hidden states on the calibration ("seen") set
and turn them into the steering vector, its LDA magnitudes and the quartiles of the controller.

The official collection pass decodes greedily (transformer_inference_dp.py: do_sample=False), scores
a step by exp(mean log-prob of its greedy tokens), i.e. the geometric mean over the step of the
max-prob (the greedy token is the argmax), reads
the prototypes from hidden_states[layer] (the input of decoder layer `layer`, what core.lm.hooks
captures) at the first token after each blank line, and splits thinking steps at "\\n\\n+" in the
text, as core.lm.formats does. Steering, though, shifts the state at the boundary token itself (the
token that completes the blank line, whose output picks the step's first token). `method.read_at`
chooses where the prototypes are read: `first_token` (official) or `boundary` (where the shift is
applied; our default, a disclosed deviation: in a 2-layer model the state at the first token is
mostly that token's own embedding, "wait" for every reflection step, so the official read gives a
vector that, added one position earlier, raises P(wait) instead of lowering it).
"""
from __future__ import annotations

import re

import numpy as np
import torch

from iclr26.core.errors import ConfigError, DataError
from iclr26.core.lm.hooks import LayerHook

from . import control
from .arms import sample

READ_AT = {"first_token": 0, "boundary": 1}   # positions before a step's first token


def calibrate(model, fmt, rows: list[dict], cfg: dict, seed: int) -> dict:
    """Phase A/B: sample, split steps, confidences, layer-l state at each step's first token; returns
    the steering vector, low_val_1/2, the confidence and variance quartiles, and label counts."""
    method = cfg["method"]
    gen = sample(model, fmt, rows, cfg, seed + 10_000, "original", temperature=method["calibration_temperature"])
    cue = re.compile(r"\b(?:" + "|".join(re.escape(w.lower()) for w in method["cue_words"]) + r")\b")
    read_at = method.get("read_at", "first_token")
    if read_at not in READ_AT:
        raise ConfigError(f"method.read_at must be one of {', '.join(READ_AT)}, got {read_at!r}")
    offset = READ_AT[read_at]
    conf, cues, hidden, variances, labelled_conf = [], [], [], [], []
    prompts = fmt.prompt_ids_many([r["problem"] for r in rows])
    with LayerHook(model, method["layer"], capture=True) as hook, torch.no_grad():
        for prompt, tokens, maxprob in zip(prompts, gen.tokens, gen.maxprob):
            spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
            if not spans:
                continue
            texts = fmt.step_texts(tokens, spans)
            model(input_ids=torch.tensor([prompt + tokens], device=model.device))
            c_prev = None
            for lo, hi in spans:
                # exp(mean log max-prob): the official value under greedy decoding, and still the
                # model's confidence (not the luck of the draw) when the pass samples (audit 03, B1)
                conf.append(control.step_confidence(np.log(np.maximum(maxprob[lo:hi], 1e-30))))
                if c_prev is not None:    # compute_global_diff_quartiles: consecutive steps, j >= 1
                    variances.append(control.variance_proxy(conf[-1], c_prev))
                c_prev = conf[-1]
            # steps after a boundary: the official code reads the state at the first token after
            # each blank line (expected_offset = 1), so never step 0; `boundary` reads one token
            # earlier, at the token that completes the separator (where arms.py shifts it)
            for i in range(1, len(spans)):
                cues.append(bool(cue.search(texts[i].lower())))
                hidden.append(hook.captured[0, len(prompt) + spans[i][0] - offset].float().cpu().numpy())
                labelled_conf.append(conf[-len(spans) + i])
    if not hidden:
        raise DataError("calibration: no sampled trace has more than one step; no step state to label")
    all_conf = np.array(conf)
    conf, cues, hidden = np.array(labelled_conf), np.array(cues), np.stack(hidden)
    # the official quartiles scan every step; `quartiles_over: labelled` takes them over the labelled
    # steps (those after a boundary, where steering acts) only
    over = method.get("quartiles_over", "all")
    if over not in ("all", "labelled"):
        raise ConfigError(f"method.quartiles_over must be all or labelled, got {over!r}")
    positive, negative, q25, q75 = control.labels(conf, cues, reference=all_conf if over == "all" else None)
    if not positive.any() or not negative.any():
        raise DataError(f"calibration: {len(conf)} steps gave {int(positive.sum())} positive and "
                        f"{int(negative.sum())} negative steps; the steering vector needs both "
                        "(more calibration problems)")
    vector = control.steering_vector(hidden, positive, negative)
    if not np.linalg.norm(vector) > 0:
        raise DataError(f"calibration (seed {seed}): the positive and negative prototypes are equal at layer "
                        f"{method['layer']} ({read_at}), e.g. the embedding layer read at the boundary token; "
                        "read a later layer")
    threshold = method.get("lda_threshold", "official")
    low1, low2 = control.lda_magnitudes(hidden, positive, negative, vector, threshold)
    if not low1 < 0:
        raise DataError(f"calibration (seed {seed}): low_val_1 = {low1:.3g} >= 0 with the {threshold} LDA threshold, "
                        "so steering at alpha = low_val_1 would do nothing (or push toward reflection); "
                        "use method.lda_threshold=midpoint or more calibration problems")
    # the controller's thresholds are the offline quartiles of the geometric mean of the max-prob over a
    # step (exp mean log-prob of the greedy token, as shipped), while the online c it compares them with
    # is the arithmetic mean of the same max-prob (modeling_qwen2_dynamic_3D.py): the only official
    # difference; the variance quartiles come from the same offline confidences
    q25v, q75v = np.quantile(variances, [0.25, 0.75]) if variances else (0.0, 0.0)
    return {"vector": vector.tolist(), "low_val_1": low1, "low_val_2": low2, "q25c": float(q25), "q75c": float(q75),
            "q25v": float(q25v), "q75v": float(q75v), "label_q25": q25, "label_q75": q75,
            "n_steps": int(len(conf)), "n_positive": int(positive.sum()), "n_negative": int(negative.sum()),
            "vector_norm": float(np.linalg.norm(vector))}


def probe_rows(rows: list[dict], cfg: dict) -> list[dict]:
    """The calibration problems on which steering is checked (the first method.probe_problems)."""
    return rows[: int(cfg["method"].get("probe_problems", len(rows)))]


def probe(model, fmt, rows: list[dict], cfg: dict, seed: int, arm: str, steering: dict | None, dataset: str,
          stream: int = 0) -> dict:
    """format_ok and reflect_rate (scoring.boundary_behaviour), accuracy and mean thinking tokens of the
    traces an arm samples on the probe problems of the calibration set, at the evaluation temperature
    (seed apart from the test's; `stream` gives each grid point its own: core.lm.generate's resumable
    store at full scale keys a call by prompts, settings and seed, not by the steering strength)."""
    import numpy as np

    from .scoring import boundary_behaviour

    checked = probe_rows(rows, cfg)
    gen = sample(model, fmt, checked, cfg, seed + 20_000 + 1_000 * stream, arm, steering)
    parsed = [fmt.parse(t) for t in gen.tokens]
    correct = [fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, checked)]
    return {**boundary_behaviour(cfg, dataset, fmt, parsed), "accuracy": float(np.mean(correct)),
            "thinking_tokens": float(np.mean([p["thinking_tokens"] for p in parsed]))}


def static_strength(model, fmt, rows: list[dict], cfg: dict, seed: int, calibration: dict, dataset: str) -> dict:
    """The SEAL-like baseline's one fixed alpha, chosen on the calibration probe problems before any
    test trace, by accuracy (audit 03, M1; before: the strongest alpha that kept the format, i.e. the
    most pruning): of alpha = 0 and alpha = f * low_val_1 for f in method.static_grid, the one with the
    shortest thinking whose accuracy is within method.static_accuracy_tolerance of the unsteered
    model's (alpha = 0 always qualifies: the static arm is then the original model, and says so).
    Also the steering check of the vector itself (audit 03, B2): the probe traces at the fixed
    alpha = low_val_1 (the grid point f = 1 when there is one), the precondition of the steering claims."""
    method = cfg["method"]
    base = probe(model, fmt, rows, cfg, seed, "original", None, dataset)
    tolerance = float(method["static_accuracy_tolerance"])
    grid, vector_check = [], None
    factors = sorted(float(x) for x in method["static_grid"])
    for i, f in enumerate(factors):
        alpha = f * calibration["low_val_1"]
        result = probe(model, fmt, rows, cfg, seed, "static_steering", {**calibration, "alpha": alpha}, dataset,
                       stream=i + 1)
        grid.append({"factor": f, "alpha": alpha, **result})
        if f == 1.0:
            vector_check = grid[-1]
    if vector_check is None:
        alpha = calibration["low_val_1"]
        vector_check = {"factor": 1.0, "alpha": alpha, **probe(
            model, fmt, rows, cfg, seed, "static_steering", {**calibration, "alpha": alpha}, dataset,
            stream=len(factors) + 1)}
    eligible = [{"alpha": 0.0, **base}] + [g for g in grid if g["accuracy"] >= base["accuracy"] - tolerance]
    chosen = min(eligible, key=lambda g: (g["thinking_tokens"], abs(g["alpha"])))
    return {"alpha": chosen["alpha"], "original": base, "grid": grid, "vector_check": vector_check}
