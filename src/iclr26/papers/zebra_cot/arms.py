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


def gate_margin(fed_image_acc: float, k0_acc: float, need_image: float, need_k0: float) -> float:
    """One model's learnability-gate margin: the smaller of (a) its per-step image accuracy with the
    gold steps fed minus `need_image` and (b) its own-chain (k = 0) accuracy minus `need_k0` (the
    question-only lookup + gate.k0_over_lookup). The model passes when the margin is above 0; a
    design passes when every seed's model does (tune.py; the claims' precondition, test every_seed)."""
    return float(min(fed_image_acc - need_image, k0_acc - need_k0))


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
        if hasattr(tok, "parse_output"):   # Anole token ids (anole.IdTokenizer)
            parsed, gold_answer = tok.parse_output(out), tok.answer_text(ex)
        else:
            parsed = tokens.parse([w for w in tok.convert_ids_to_tokens(out) if w != tok.eos_token])
            gold_answer = " ".join(ex["answer"][2:])
        correct.append(parsed["answer"] == gold_answer)
        gold = [s["image"][1:-1] for s in ex["steps"][k:]]
        if arm == "interleaved" and gold:
            steps_ok.append(np.mean([i < len(parsed["images"]) and parsed["images"][i] == g
                                     for i, g in enumerate(gold)]))
    return {"accuracy": float(np.mean(correct)), "image_step_acc": float(np.mean(steps_ok)) if steps_ok else None,
            "n_test": len(examples)}


def fed_image_acc(model, tok, examples: list[dict], cfg: dict) -> float:
    """Per-step image accuracy with the gold steps fed (the gate's part a): one teacher-forced pass
    over each row's whole gold interleaved sequence; a step counts as drawn when the argmax at every
    position of its image (<boi>, codes, <eoi>) is the gold word. By induction this is exactly the
    greedy drawing of that image after the gold prefix (every earlier step and the step's thought)."""
    import torch

    from iclr26.core.lm.model import pad_batch

    device = next(model.parameters()).device
    size = int(cfg["eval"].get("score_batch_size") or cfg["eval"]["batch_size"])   # full logits: rows x length x vocab
    hits: list[float] = []
    for start in range(0, len(examples), size):
        chunk = examples[start:start + size]
        rows, spans = [], []
        for ex in chunk:
            prompt, tgt = tokens.target(ex, "interleaved")
            rows.append(tok.convert_tokens_to_ids(prompt + tgt))
            at, mine = len(prompt), []
            for step in ex["steps"]:
                at += len(step["text"])
                mine.append((at, at + len(step["image"])))
                at += len(step["image"])
            spans.append(mine)
        ids, mask = pad_batch(rows, tok.pad_token_id)
        with torch.no_grad():
            pred = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.argmax(-1).cpu()
        for i, mine in enumerate(spans):
            for a, b in mine:   # the logits at t - 1 predict the word at t
                hits.append(float(torch.equal(pred[i, a - 1:b - 1], ids[i, a:b])))
    return float(np.mean(hits)) if hits else float("nan")


def fit_and_eval(cfg: dict, arm: str, seed: int, train_ex: list[dict], test_ex: list[dict], tok, device,
                 log=print, val_ex: list[dict] | None = None) -> dict:
    """Train one arm and decode `test_ex` at k = 0..scaffold_max. For the interleaved arm, the
    learnability gate's two numbers on `val_ex` (the validation rows; `test_ex` when None, as in
    tune.py, whose test rows are validation rows): `fed_image_acc` and `gate_k0_acc`."""
    from iclr26.core.lm.model import build_model, train_lm

    tcfg = cfg["train"]
    limit = int(tcfg["max_length"])
    positions = (cfg["model"].get("config") or {}).get("max_position_embeddings")
    if positions is not None and limit > int(positions):
        raise ValueError(f"train.max_length {limit} exceeds the model's max_position_embeddings {positions}")
    kept_train = [ex for ex in train_ex if seq_len(ex) <= limit]
    kept_test = [ex for ex in test_ex if seq_len(ex) <= limit]
    kept_val = None if val_ex is None else [ex for ex in val_ex if seq_len(ex) <= limit]
    dropped = {"train": len(train_ex) - len(kept_train), "test": len(test_ex) - len(kept_test)}
    if dropped["train"] or dropped["test"]:
        log(f"rows longer than max_length {limit} dropped from every arm: {dropped['train']} train, "
            f"{dropped['test']} test")

    seqs, starts = [], []
    for ex in kept_train:
        prompt, tgt = tokens.target(ex, arm)
        seqs.append(tok.convert_tokens_to_ids(prompt + tgt) + [tok.eos_token_id])
        starts.append(len(prompt))
    if cfg["model"].get("kind") == "anole":   # full scale: the paper's Anole-7B, interleaved loss (anole.py)
        from . import anole

        model = anole.load(cfg["model"], seed, device, tcfg)
        losses = anole.train(model, seqs, starts, tok.pad_token_id, tcfg, seed, log=log)
    else:
        model = build_model(cfg["model"], tok, seed=seed, device=device).to(device)
        losses = train_lm(model, seqs, starts, tok.pad_token_id, int(tcfg["steps"]), int(tcfg["batch_size"]),
                          float(tcfg["lr"]), seed, weight_decay=float(tcfg["weight_decay"]),
                          warmup=int(tcfg["warmup"]), log=log)
    result = {"final_loss": float(np.mean(losses[-max(1, len(losses) // 10):])), "n_train": len(kept_train),
              "n_dropped": dropped["train"] + dropped["test"],
              "tokens_per_example": float(np.mean([len(s) for s in seqs])),
              "supervised_tokens": float(np.mean([len(s) - b for s, b in zip(seqs, starts)])),
              "k": {}, "fed_image_acc": None, "gate_k0_acc": None}
    ks = range(int(cfg["eval"]["scaffold_max"]) + 1) if arm in tokens.CHAIN_ARMS else [0]
    for k in ks:
        result["k"][str(k)] = decode(model, tok, kept_test, arm, k, cfg)
    if arm == "interleaved":
        rows = kept_test if kept_val is None else kept_val
        result["fed_image_acc"] = fed_image_acc(model, tok, rows, cfg)
        own = result["k"]["0"] if kept_val is None else decode(model, tok, rows, arm, 0, cfg)
        result["gate_k0_acc"] = own["accuracy"]
        result["n_val"] = len(rows)
    log(f"{arm} seed {seed}: loss {result['final_loss']:.3f} "
        + " ".join(f"k{k} acc {v['accuracy']:.3f}" for k, v in result["k"].items())
        + (f" gate (validation): fed image-step acc {result['fed_image_acc']:.3f}, k0 acc {result['gate_k0_acc']:.3f}"
           if result["fed_image_acc"] is not None else ""))
    return result
