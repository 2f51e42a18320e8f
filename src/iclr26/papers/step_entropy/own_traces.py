"""The reasoning model's own traces, which every method of card 07 compresses, and the [SKIP]
augmentation of the tiny base model's training data.

Each step of an own trace is scored from the per-token entropies of the distributions its tokens
were sampled from (section 2.1: the entropy under the model that wrote the trace).

Deviation, at full scale only: the official code ends a step only at a token that is exactly
"\\n\\n" (calculate_average_token_entropy_per_sentence), so a step ending in a merged ".\\n\\n" token
joins the next; core.lm.formats splits at every blank line in the text. [SKIP] is written as text,
as the official code writes it.
"""
from __future__ import annotations

import numpy as np

from iclr26.core.lm import generate as generation

from . import method


def sampling(cfg: dict) -> dict:
    """Temperature, top-p and generation batch size of a `method` block (greedy when temperature is 0)."""
    return {"temperature": cfg.get("temperature", 0.0), "top_p": cfg.get("top_p", 1.0),
            "batch_size": cfg.get("batch_size", 512)}


def own_traces(model, fmt, rows: list[dict], cfg: dict, seed: int) -> list[dict]:
    """The model's own trace of every row, split into steps, each step with its score; plus the
    model's own answer and whether it is right. `cfg` is the config's `method` block."""
    tokenizer = fmt.tokenizer
    out = generation.generate(model, fmt.prompt_ids_many([r["problem"] for r in rows]), tokenizer.pad_token_id,
                              tokenizer.eos_token_id, cfg["max_new_tokens"], seed=seed, **sampling(cfg))
    traces = []
    for row, tokens, entropy, logprob in zip(rows, out.tokens, out.entropy, out.logprob):
        parsed = fmt.parse(tokens)
        spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
        traces.append({"problem": row["problem"], "answer": row["answer"], "steps": fmt.step_texts(tokens, spans),
                       "scores": [method.step_score(entropy[lo:hi], logprob[lo:hi], cfg["step_score"])
                                  for lo, hi in spans],
                       "own_answer": parsed["answer"], "correct": fmt.is_correct(parsed["answer"], row["answer"])})
    return traces


def skip_augmented_examples(fmt, rows: list[dict], share: float, seed: int) -> list[tuple[list[int], int]]:
    """The teacher traces; with probability `share` each, a random kappa ~ U(0.1, 0.9) of a trace's
    steps become [SKIP] (answer unchanged), so [SKIP] is a known token without favouring any kind
    of step (card 6.2)."""
    rng = np.random.default_rng(seed)
    thinkings = []
    for row in rows:
        steps = fmt.split_steps(row["trace"])
        if rng.random() < share:
            steps = method.compress(steps, method.masked_steps([0.0] * len(steps), float(rng.uniform(0.1, 0.9)),
                                                               "random", rng))
        thinkings.append(fmt.join_steps(steps))
    return fmt.training_examples([r["problem"] for r in rows], thinkings, [r["trace_answer"] for r in rows])
