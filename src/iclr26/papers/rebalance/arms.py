"""How each arm of card 03 samples its traces (Phase C, online).

original             the model as it is
keyword_suppression  NoWait-like: the reflection keywords can never be sampled
static_steering      SEAL-like: at every step boundary inside <think>, h <- h + alpha v with one
                     fixed alpha (`steering["alpha"]`: of 0 and the fractions of low_val_1 on the
                     config's grid, the shortest-thinking one that keeps accuracy on the calibration
                     probe problems, chosen in prepare by calibration.static_strength; low_val_1
                     itself when absent)
rebalance            the same push with alpha from the control function of the step just finished:
                     its confidence c (mean max-prob of its tokens) and var = (c - c_prev)^2 / 4

The official code adds its steering vector to hidden_states[layer], the input of decoder layer
`layer` (modeling_qwen2_dynamic_3D.py), which is what core.lm.hooks shifts.
"""
from __future__ import annotations

import contextlib

import numpy as np

from iclr26.core.lm import generate as generation
from iclr26.core.lm.hooks import LayerHook

from . import control
from .control import STEERED


def sample(model, fmt, rows: list[dict], cfg: dict, seed: int, arm: str, steering: dict | None = None,
           temperature: float | None = None, fired: list | None = None):
    """Sample the thinking of every row under one arm (at eval.temperature unless given); returns the
    Generation. `steering` (the calibration: vector, low_val_1, quartiles) is needed by the steered arms.
    `fired`, when given, receives the alpha applied at every step boundary (the firing statistics; a
    generation resumed from the store at full scale logs only the passes it runs)."""
    tokenizer = fmt.tokenizer
    prompts = fmt.prompt_ids_many([r["problem"] for r in rows])
    settings = cfg["eval"]
    kwargs = dict(max_new_tokens=settings["max_new_tokens"], top_p=settings.get("top_p", 1.0), seed=seed,
                  temperature=settings["temperature"] if temperature is None else temperature,
                  batch_size=settings.get("batch_size", 512))
    if arm == "keyword_suppression":   # NoWait-like: the reflection keywords can never be sampled
        kwargs["banned"] = fmt.keyword_ids(cfg["method"]["keywords"])
    if arm not in STEERED:
        return generation.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, **kwargs)
    end_think = fmt.end_think_id
    controller = control.Controller(steering, cfg["method"]["slope"], control.high_val_2(steering, cfg["method"]))
    vector = np.asarray(steering["vector"], dtype=np.float32)
    static_alpha = steering.get("alpha", steering["low_val_1"]) if arm == "static_steering" else None
    state = {}  # row -> (position where the current step started, confidence of the previous step)

    def before_token(rows_idx, last, gen):
        alphas = np.zeros(len(rows_idx))
        for b, row in enumerate(rows_idx):
            tokens = gen.tokens[row]
            if not fmt.ends_step(tokens) or end_think in tokens:   # steer only at boundaries inside <think>
                continue
            start, c_prev = state.get(row, (0, None))
            c = float(np.mean(gen.maxprob[row][start:-1])) if len(tokens) - 1 > start else 1.0
            var = control.variance_proxy(c, c_prev)
            alphas[b] = static_alpha if arm == "static_steering" else controller.alpha(c, var)
            state[row] = (len(tokens), c)
            if fired is not None:
                fired.append(float(alphas[b]))
        hook.set_shift(alphas, vector)

    with LayerHook(model, cfg["method"]["layer"]) as hook, fresh_alpha_at_prefill(model, hook):
        return generation.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id,
                                   before_token=before_token, resume_key=[arm, static_alpha, steering], **kwargs)


@contextlib.contextmanager
def fresh_alpha_at_prefill(model, hook: LayerHook):
    """No alpha at a chunk's first pass (the prefill, the only pass without a cache): before_token
    sets alpha before every later pass, but not before a prefill, so without this reset the last
    pass of the previous chunk would shift the next chunk's prompt (and crash when the chunks
    differ in size: issue 11, item 5)."""
    def reset(module, args, kwargs):
        if kwargs.get("cache") is None and kwargs.get("past_key_values") is None:
            hook.set_shift(None)

    handle = model.register_forward_pre_hook(reset, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
