"""Phase A/B of card 03: collect step confidences and hidden states on the calibration ("seen") set
and turn them into the steering vector, its LDA magnitudes and the quartiles of the controller.

The official collection pass decodes greedily (transformer_inference_dp.py: do_sample=False), reads
the prototypes from hidden_states[layer] (the input of decoder layer `layer`, what core.lm.hooks
captures) at the first token after each blank line, and splits thinking steps at "\\n\\n+" in the
text, as core.lm.formats does.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from iclr26.core.errors import DataError
from iclr26.core.lm.hooks import LayerHook

from . import control
from .arms import sample


def calibrate(model, fmt, rows: list[dict], cfg: dict, seed: int) -> dict:
    """Phase A/B: sample, split steps, confidences, layer-l state at each step's first token; returns
    the steering vector, low_val_1/2, the confidence and variance quartiles, and label counts."""
    method = cfg["method"]
    gen = sample(model, fmt, rows, cfg, seed + 10_000, "original", temperature=method["calibration_temperature"])
    cue = re.compile(r"\b(?:" + "|".join(re.escape(w.lower()) for w in method["cue_words"]) + r")\b")
    conf, cues, hidden, variances, labelled_conf = [], [], [], [], []
    prompts = fmt.prompt_ids_many([r["problem"] for r in rows])
    with LayerHook(model, method["layer"], capture=True) as hook, torch.no_grad():
        for prompt, tokens, logprob in zip(prompts, gen.tokens, gen.logprob):
            spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
            if not spans:
                continue
            texts = fmt.step_texts(tokens, spans)
            model(input_ids=torch.tensor([prompt + tokens], device=model.device))
            c_prev = None
            for lo, hi in spans:
                conf.append(control.step_confidence(logprob[lo:hi]))
                if c_prev is not None:    # compute_global_diff_quartiles: consecutive steps, j >= 1
                    variances.append(control.variance_proxy(conf[-1], c_prev))
                c_prev = conf[-1]
            # steps after a boundary: the official code reads the state at the first token after
            # each blank line (expected_offset = 1), so never step 0
            for i in range(1, len(spans)):
                cues.append(bool(cue.search(texts[i].lower())))
                hidden.append(hook.captured[0, len(prompt) + spans[i][0]].float().cpu().numpy())
                labelled_conf.append(conf[-len(spans) + i])
    if not hidden:
        raise DataError("calibration: no sampled trace has more than one step; no step state to label")
    all_conf = np.array(conf)
    conf, cues, hidden = np.array(labelled_conf), np.array(cues), np.stack(hidden)
    positive, negative, q25, q75 = control.labels(conf, cues, reference=all_conf)
    if not positive.any() or not negative.any():
        raise DataError(f"calibration: {len(conf)} steps gave {int(positive.sum())} positive and "
                        f"{int(negative.sum())} negative steps; the steering vector needs both "
                        "(more calibration problems)")
    vector = control.steering_vector(hidden, positive, negative)
    low1, low2 = control.lda_magnitudes(hidden, positive, negative, vector, method.get("lda_threshold", "official"))
    # the controller's thresholds are the offline quartiles (of exp mean log-prob), as shipped, while the
    # online c it compares them with is the mean max-prob of the step (modeling_qwen2_dynamic_3D.py)
    q25v, q75v = np.quantile(variances, [0.25, 0.75]) if variances else (0.0, 0.0)
    return {"vector": vector.tolist(), "low_val_1": low1, "low_val_2": low2, "q25c": float(q25), "q75c": float(q75),
            "q25v": float(q25v), "q75v": float(q75v), "label_q25": q25, "label_q75": q75,
            "n_steps": int(len(conf)), "n_positive": int(positive.sum()), "n_negative": int(negative.sum()),
            "vector_norm": float(np.linalg.norm(vector))}
