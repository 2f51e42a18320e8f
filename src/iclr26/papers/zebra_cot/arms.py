"""One arm, one seed: train the decoder on the arm's sequences, then decode the test rows.

Shared by the train stage (evaluation seeds, test rows) and tune.py (the step-budget choice on
seeds outside the evaluation seeds, validation rows). Rows whose longest arm sequence (text CoT or
interleaved) exceeds `train.max_length` are dropped from every arm, in training and in test alike;
how many is returned (`n_dropped`) and logged, never silent. `max_length` may not exceed the
model's position range.
"""
from __future__ import annotations

import numpy as np

from . import tokens


def seq_len(ex: dict) -> int:
    return max(sum(map(len, tokens.target(ex, arm))) + 1 for arm in tokens.ARMS)


def decode(model, tok, examples: list[dict], arm: str, given, cfg: dict) -> dict:
    """Greedy decoding with `given` gold steps in the prompt (an int, or "all": every step of the
    row); answer accuracy and, for the interleaved arm, the exact-match rate of each reasoning image
    it draws (against the gold image of the same step)."""
    import torch

    from iclr26.core.lm.generate import generate

    ecfg = cfg["eval"]
    ks = [len(ex["steps"]) if given == "all" else min(given, len(ex["steps"])) for ex in examples]
    prompts = [tok.convert_tokens_to_ids(tokens.target(ex, arm, k)[0]) for ex, k in zip(examples, ks)]
    with torch.no_grad():
        gen = generate(model, prompts, tok.pad_token_id, tok.eos_token_id, int(ecfg["max_new_tokens"]),
                       batch_size=int(ecfg["batch_size"]))
    correct, steps_ok = [], []
    for ex, k, out in zip(examples, ks, gen.tokens):
        parsed = tokens.parse([w for w in tok.convert_ids_to_tokens(out) if w != tok.eos_token])
        correct.append(parsed["answer"] == " ".join(ex["answer"][2:]))
        gold = [s["image"][1:-1] for s in ex["steps"][k:]]
        if arm == "interleaved" and gold:
            steps_ok.append(np.mean([i < len(parsed["images"]) and parsed["images"][i] == g
                                     for i, g in enumerate(gold)]))
    return {"accuracy": float(np.mean(correct)), "image_step_acc": float(np.mean(steps_ok)) if steps_ok else None,
            "n_test": len(examples)}


def fit_and_eval(cfg: dict, arm: str, seed: int, train_ex: list[dict], test_ex: list[dict], tok, device,
                 log=print) -> dict:
    from iclr26.core.lm.model import build_model, train_lm

    tcfg = cfg["train"]
    limit = int(tcfg["max_length"])
    positions = (cfg["model"].get("config") or {}).get("max_position_embeddings")
    if positions is not None and limit > int(positions):
        raise ValueError(f"train.max_length {limit} exceeds the model's max_position_embeddings {positions}")
    kept_train = [ex for ex in train_ex if seq_len(ex) <= limit]
    kept_test = [ex for ex in test_ex if seq_len(ex) <= limit]
    dropped = {"train": len(train_ex) - len(kept_train), "test": len(test_ex) - len(kept_test)}
    if dropped["train"] or dropped["test"]:
        log(f"rows longer than max_length {limit} dropped from every arm: {dropped['train']} train, "
            f"{dropped['test']} test")

    seqs, starts = [], []
    for ex in kept_train:
        prompt, tgt = tokens.target(ex, arm)
        seqs.append(tok.convert_tokens_to_ids(prompt + tgt) + [tok.eos_token_id])
        starts.append(len(prompt))
    model = build_model(cfg["model"], tok, seed=seed, device=device).to(device)
    losses = train_lm(model, seqs, starts, tok.pad_token_id, int(tcfg["steps"]), int(tcfg["batch_size"]),
                      float(tcfg["lr"]), seed, weight_decay=float(tcfg["weight_decay"]),
                      warmup=int(tcfg["warmup"]), log=log)
    result = {"final_loss": float(np.mean(losses[-max(1, len(losses) // 10):])), "n_train": len(kept_train),
              "n_dropped": dropped["train"] + dropped["test"],
              "tokens_per_example": float(np.mean([len(s) for s in seqs])), "k": {}, "gold_chain_acc": None}
    ks = range(int(cfg["eval"]["scaffold_max"]) + 1) if arm in tokens.CHAIN_ARMS else [0]
    for k in ks:
        result["k"][str(k)] = decode(model, tok, kept_test, arm, k, cfg)
    if arm in tokens.CHAIN_ARMS:
        top = max(ks)
        every = top >= max(len(ex["steps"]) for ex in kept_test)   # k = top already gave every row its whole chain
        whole = result["k"][str(top)] if every else decode(model, tok, kept_test, arm, "all", cfg)
        result["gold_chain_acc"] = whole["accuracy"]
    log(f"{arm} seed {seed}: loss {result['final_loss']:.3f} "
        + " ".join(f"k{k} acc {v['accuracy']:.3f}" for k, v in result["k"].items())
        + (f" gold chain {result['gold_chain_acc']:.3f}" if result["gold_chain_acc"] is not None else ""))
    return result
