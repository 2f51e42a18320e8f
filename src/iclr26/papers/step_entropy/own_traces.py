"""The reasoning model's own traces, which every method of card 07 compresses, and the [SKIP]
augmentation of the tiny base model's training data.

Each step of an own trace is scored from the per-token entropies of the distributions its tokens
were sampled from (section 2.1: the entropy under the model that wrote the trace).

The paper's scorer is a pretrained model that never saw [SKIP]: the token is added for SFT only.
The tiny base model saw random [SKIP] steps in training (card 6.2, so a prefilled [SKIP] is in
distribution), and P([SKIP]) at a step's first token (about 0.1 at step 0, 0.003 by step 8) then
dominates the step entropy: the score measures "how likely a step is skipped here", not the step's
information. With `method.score_without_skip` the entropies are those of the same distributions
renormalised over the vocabulary without [SKIP], q(v) = p(v) / (1 - p([SKIP])) (one teacher-forced
pass over the trace, the greedy trace being the same): the scorer the paper has, a model that cannot
write [SKIP]. Post hoc (config deviations).

Deviation, at full scale only: the official code ends a step only at a token that is exactly
"\\n\\n" (calculate_average_token_entropy_per_sentence), so a step ending in a merged ".\\n\\n" token
joins the next; core.lm.formats splits at every blank line in the text. [SKIP] is written as text,
as the official code writes it.
"""
from __future__ import annotations

import numpy as np

from iclr26.core.lm import generate as generation
from iclr26.core.lm.tokenizer import SKIP

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
    entropies, logprobs = out.entropy, out.logprob
    skip_id = tokenizer.convert_tokens_to_ids(SKIP)
    if cfg.get("score_without_skip") and skip_id is not None and skip_id != tokenizer.unk_token_id:
        # [SKIP] is a token of this vocabulary (tiny); where it is text (full) the model never saw it
        prompts = fmt.prompt_ids_many([r["problem"] for r in rows])
        entropies, logprobs = stats_without(model, prompts, out.tokens, tokenizer.pad_token_id, [skip_id])
    traces = []
    for row, tokens, entropy, logprob in zip(rows, out.tokens, entropies, logprobs):
        parsed = fmt.parse(tokens)
        spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
        traces.append({"problem": row["problem"], "answer": row["answer"], "steps": fmt.step_texts(tokens, spans),
                       "scores": [method.step_score(entropy[lo:hi], logprob[lo:hi], cfg["step_score"])
                                  for lo, hi in spans],
                       "own_answer": parsed["answer"], "correct": fmt.is_correct(parsed["answer"], row["answer"])})
    return traces


def stats_without(model, prompts: list[list[int]], generated: list[list[int]], pad_id: int, excluded: list[int],
                  batch_size: int = 256) -> tuple[list[list[float]], list[list[float]]]:
    """Teacher-forced (entropy, log-prob of the generated token) of the next-token distribution of
    every generated token, renormalised over the vocabulary without the `excluded` ids:
    q(v) = p(v) / (1 - sum_x p(x)), x excluded. With nothing excluded: what the generation reports."""
    import torch

    from iclr26.core.lm.model import pad_batch

    entropies, logprobs = [], []
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            chunk = list(zip(prompts[start: start + batch_size], generated[start: start + batch_size]))
            ids, mask = (t.to(model.device) for t in pad_batch([p + g for p, g in chunk], pad_id, side="right"))
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            logits[..., excluded] = float("-inf")
            logq = torch.log_softmax(logits[:, :-1], dim=-1)
            entropy = torch.special.entr(logq.exp()).sum(-1).tolist()
            chosen = logq.gather(-1, ids[:, 1:, None])[..., 0].tolist()
            for b, (prompt, gen) in enumerate(chunk):   # position t predicts token t + 1
                span = slice(len(prompt) - 1, len(prompt) - 1 + len(gen))
                entropies.append(entropy[b][span])
                logprobs.append(chosen[b][span])
    return entropies, logprobs


def skip_augmented_examples(fmt, rows: list[dict], share: float, seed: int,
                            kind: str = "trailing") -> list[tuple[list[int], int]]:
    """The teacher traces; with probability `share` each, some steps become [SKIP] (answer
    unchanged), so [SKIP] is a known token (card 6.2).
    kind "random" (the card's 6.2): a random kappa ~ U(0.1, 0.9) of all steps; it also skips the
        last computation step while keeping the answer, so the model learns that the answer need
        not be the last value it can read (audit finding 1).
    kind "trailing" (post hoc, chosen on non-evaluation seeds: scripts/tune_step_entropy.py): by
        position only, a random kappa ~ U(0.1, 0.9) of the steps before the last computation step,
        and a run of random length >= 1 of the steps after it; the last computation step is always
        kept, so the answer is always the last computed value the model can read."""
    rng = np.random.default_rng(seed)
    thinkings = []
    for row in rows:
        steps = fmt.split_steps(row["trace"])
        if rng.random() < share:
            if kind == "random" or "kinds" not in row:
                masked = method.masked_steps([0.0] * len(steps), float(rng.uniform(0.1, 0.9)), "random", rng)
            elif kind == "trailing":
                last = max([i for i, k in enumerate(row["kinds"]) if k in ("comp", "fix")], default=-1)
                head = method.masked_steps([0.0] * max(last, 0), float(rng.uniform(0.1, 0.9)), "random", rng)
                tail = len(steps) - last - 1
                run = int(rng.integers(1, tail + 1)) if tail > 0 else 0
                masked = head | set(range(last + 1, last + 1 + run))
            else:
                raise ValueError(f"base.augment must be trailing or random, got {kind!r}")
            steps = method.compress(steps, masked)
        thinkings.append(fmt.join_steps(steps))
    return fmt.training_examples([r["problem"] for r in rows], thinkings, [r["trace_answer"] for r in rows])
