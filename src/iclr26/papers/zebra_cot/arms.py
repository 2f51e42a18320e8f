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
    """One model's learnability-gate margin: the smaller of (a) its image accuracy with the gold
    steps fed minus `need_image` and (b) its own-chain (k = 0) accuracy minus `need_k0` (the
    question-only lookup + gate.k0_over_lookup). The model passes when the margin is above 0; a
    design passes when every seed's model does (tune.py; the claims' precondition, test every_seed)."""
    return float(min(fed_image_acc - need_image, k0_acc - need_k0))


def gate_part_a(gate: dict, result: dict) -> tuple[float | None, float | None]:
    """(value, threshold) of the gate's part a for one model's result. gate.part_a:
    exact_step     the fraction of image steps whose every token is the argmax with the gold steps fed
                   (fed_image_acc) against gate.min_image_acc (tiny: the tune's rule);
    token_over_copy  the per-token image accuracy with the gold steps fed (fed_token_acc) against the
                   copy-the-previous-image baseline of the same rows and positions (copy_token_acc) +
                   gate.token_over_copy (full: fixed on 2026-12-01 before any full run, see full.yaml)."""
    kind = gate.get("part_a", "exact_step")
    if kind == "exact_step":
        return result.get("fed_image_acc"), float(gate["min_image_acc"])
    if kind == "token_over_copy":
        value, copy = result.get("fed_token_acc"), result.get("copy_token_acc")
        return value, None if copy is None else float(copy) + float(gate["token_over_copy"])
    raise ValueError(f"gate.part_a must be exact_step or token_over_copy, not {kind!r}")


def image_vocab(tok, examples: list[dict]) -> dict:
    """The image grammar of the examples: image-start and image-end ids, the ids an image's codes can
    take (Anole: its VQ tokens; tiny: the codebook's words) and the number of codes of an image
    (every picture has the same: the VQ-VAE's fixed input, or the patch grid)."""
    if hasattr(tok, "image_token_ids"):   # Anole (anole.IdTokenizer)
        codes, boi, eoi = list(tok.image_token_ids), tok.boi, tok.eoi
    else:
        codes = sorted(i for w, i in tok.get_vocab().items() if w.startswith("<img_"))
        boi, eoi = tok.convert_tokens_to_ids(tokens.BOI), tok.convert_tokens_to_ids(tokens.EOI)
    lengths = {len(s["image"]) - 2 for ex in examples for s in ex["steps"]}
    if len(lengths) > 1:
        raise ValueError(f"reasoning images of different code counts {sorted(lengths)}: the grammar needs one")
    return {"boi": int(boi), "eoi": int(eoi), "codes": codes, "length": lengths.pop() if lengths else 0}


class ImageGrammar:
    """Constrained decoding (a per-row logits mask around a model, in core.lm.generate's call shape):
    after an image-start token only image-code tokens, exactly `length` of them, then image-end is
    forced; outside an image, image codes and image-end are banned, and so is image-start for the
    arms without images (answer_only, text_trace, text_cot). The row's state is read from its prompt
    on the first call (no cache) and then from every token fed."""

    NEG = -1e30   # finite: the sampled token's statistics stay finite

    def __init__(self, model, grammar: dict, draws_images: bool):
        import torch

        self.model, self.g, self.draws = model, grammar, draws_images
        # saved generation batches (core.lm.generate) are keyed by it: grammar on/off never share them
        self.resume_key = ("image_grammar", bool(draws_images), int(grammar["length"]),
                           getattr(model, "resume_key", None))
        self.config = getattr(model, "config", None)
        self.left = None   # per row: -1 outside an image, else codes still to draw
        vocab = int(model.config.vocab_size)
        self.codes = torch.zeros(vocab, dtype=torch.bool)
        self.codes[grammar["codes"]] = True

    @property
    def device(self):
        return self.model.device

    def parameters(self):
        return self.model.parameters()

    def _feed(self, row: int, token: int) -> None:
        if token == self.g["boi"]:
            self.left[row] = self.g["length"]
        elif token == self.g["eoi"]:
            self.left[row] = -1
        elif self.left[row] > 0:
            self.left[row] -= 1

    def __call__(self, input_ids, cache=None, **kw):
        import torch

        if cache is None:
            self.left = [-1] * input_ids.shape[0]
        for row, seq in enumerate(input_ids.tolist()):
            for token in seq:
                self._feed(row, token)
        out = self.model(input_ids=input_ids, cache=cache, **kw)
        logits = out.logits.clone()
        vocab = logits.shape[-1]
        codes = self.codes[:vocab].to(logits.device)
        outside = ~codes
        outside[self.g["eoi"]] = False
        if not self.draws:
            outside[self.g["boi"]] = False
        end = torch.zeros_like(codes)
        end[self.g["eoi"]] = True
        left = torch.tensor(self.left, device=logits.device)[:, None]
        allowed = torch.where(left > 0, codes[None], torch.where(left == 0, end[None], outside[None]))
        logits[:, -1] = logits[:, -1].masked_fill(~allowed, self.NEG)
        out.logits = logits
        return out


def malformed(ids: list[int], grammar: dict, draws_images: bool, ended: bool = True) -> bool:
    """Whether one generation (without its end-of-sequence token) breaks the image grammar: an image
    of another code count, a non-code token inside an image, an image still open when the generation
    `ended` (not cut by max_new_tokens), codes or image-end outside an image, or an image from an
    arm without images."""
    inside = None
    for t in ids:
        if t == grammar["boi"]:
            if inside is not None or not draws_images:
                return True
            inside = 0
        elif t == grammar["eoi"]:
            if inside != grammar["length"]:
                return True
            inside = None
        elif inside is not None:
            if t not in grammar["code_set"]:
                return True
            inside += 1
        elif t in grammar["code_set"]:
            return True
    return inside is not None and ended


def seq_len(ex: dict) -> int:
    return max(sum(map(len, tokens.target(ex, arm))) + 1 for arm in tokens.ARMS)


def decode(model, tok, examples: list[dict], arm: str, given, cfg: dict, grammar: dict | None = None) -> dict:
    """Greedy decoding with `given` gold steps in the prompt (an int, or "all": every step of the
    row); answer accuracy and, for the interleaved arm, the exact-match rate of each reasoning image
    it draws (against the gold image of the same step). With `grammar` (image_vocab) and
    eval.image_grammar true, decoding is constrained by ImageGrammar; `malformed` is the fraction of
    generations that break the image grammar (0 when constrained)."""
    import torch

    from iclr26.core.lm.generate import generate

    ecfg = cfg["eval"]
    ks = [len(ex["steps"]) if given == "all" else min(given, len(ex["steps"])) for ex in examples]
    prompts = [tok.convert_tokens_to_ids(tokens.target(ex, arm, k)[0]) for ex, k in zip(examples, ks)]
    draws = arm == "interleaved"
    constrained = grammar is not None and bool(ecfg.get("image_grammar"))
    runner = ImageGrammar(model, grammar, draws) if constrained else model
    with torch.no_grad():
        gen = generate(runner, prompts, tok.pad_token_id, tok.eos_token_id, int(ecfg["max_new_tokens"]),
                       batch_size=int(ecfg["batch_size"]),
                       resume_key=("image_grammar", grammar["length"], draws) if constrained else None)
    correct, steps_ok, bad = [], [], []
    for ex, k, out in zip(examples, ks, gen.tokens):
        if hasattr(tok, "parse_output"):   # Anole token ids (anole.IdTokenizer)
            parsed, gold_answer = tok.parse_output(out), tok.answer_text(ex)
        else:
            parsed = tokens.parse([w for w in tok.convert_ids_to_tokens(out) if w != tok.eos_token])
            gold_answer = " ".join(ex["answer"][2:])
        correct.append(parsed["answer"] == gold_answer)
        if grammar is not None:
            bad.append(malformed([t for t in out if t != tok.eos_token_id], grammar, draws,
                                 ended=bool(out) and out[-1] == tok.eos_token_id))
        gold = [s["image"][1:-1] for s in ex["steps"][k:]]
        if arm == "interleaved" and gold:
            steps_ok.append(np.mean([i < len(parsed["images"]) and parsed["images"][i] == g
                                     for i, g in enumerate(gold)]))
    return {"accuracy": float(np.mean(correct)), "image_step_acc": float(np.mean(steps_ok)) if steps_ok else None,
            "n_test": len(examples), "malformed": float(np.mean(bad)) if bad else None}


def last_image(ids: list[int], boi: int, eoi: int) -> list[int] | None:
    """The codes of the last complete image in `ids` (None when there is none)."""
    starts = [i for i, t in enumerate(ids) if t == boi]
    for at in reversed(starts):
        if eoi in ids[at + 1:]:
            return ids[at + 1: ids.index(eoi, at + 1)]
    return None


def fed_image_acc(model, tok, examples: list[dict], cfg: dict, grammar: dict | None = None) -> dict:
    """The gate's part a, with the gold steps fed: one teacher-forced pass over each row's whole gold
    interleaved sequence. Three numbers over the rows' reasoning images:
    fed_image_acc   a step counts as drawn when the argmax (whole vocabulary) at every position of its
                    image (<boi>, codes, <eoi>) is the gold word; by induction this is exactly the
                    unconstrained greedy drawing of that image after the gold prefix (every earlier
                    step and the step's thought);
    fed_token_acc   the fraction of the images' code positions where the argmax over the image codes
                    (what ImageGrammar lets the model draw there) is the gold code;
    copy_token_acc  the same fraction for copying the previous image (the previous step's, or the
                    prompt's last for the first step) position by position: the baseline of
                    fed_token_acc (same rows, same positions, same code)."""
    import torch

    from iclr26.core.lm.model import pad_batch

    device = next(model.parameters()).device
    size = int(cfg["eval"].get("score_batch_size") or cfg["eval"]["batch_size"])   # full logits: rows x length x vocab
    code_ids = None if grammar is None else torch.tensor(grammar["codes"], dtype=torch.long)
    hits: list[float] = []
    token_hits, copy_hits = [], []
    for start in range(0, len(examples), size):
        chunk = examples[start:start + size]
        rows, spans = [], []
        for ex in chunk:
            prompt, tgt = tokens.target(ex, "interleaved")
            rows.append(tok.convert_tokens_to_ids(prompt + tgt))
            at, mine = len(prompt), []
            for step in ex["steps"]:
                at += len(step["text"])
                # the image just before this step's: the previous step's, or the prompt's last
                before = None if grammar is None else last_image(rows[-1][:at], grammar["boi"], grammar["eoi"])
                mine.append((at, at + len(step["image"]), before))
                at += len(step["image"])
            spans.append(mine)
        ids, mask = pad_batch(rows, tok.pad_token_id)
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            pred = logits.argmax(-1).cpu()
            pred_code = None if code_ids is None else code_ids[logits[..., code_ids.to(device)].argmax(-1).cpu()]
        del logits
        for i, mine in enumerate(spans):
            for a, b, before in mine:   # the logits at t - 1 predict the word at t
                hits.append(float(torch.equal(pred[i, a - 1:b - 1], ids[i, a:b])))
                if pred_code is None:
                    continue
                gold = ids[i, a + 1:b - 1]   # the codes (between <boi> and <eoi>)
                token_hits.extend((pred_code[i, a:b - 2] == gold).tolist())
                before = before or []
                copy_hits.extend(j < len(before) and before[j] == g for j, g in enumerate(gold.tolist()))

    def mean(values):
        return float(np.mean(values)) if len(values) else float("nan")

    return {"fed_image_acc": mean(hits), "fed_token_acc": mean(token_hits) if grammar is not None else None,
            "copy_token_acc": mean(copy_hits) if grammar is not None else None}


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
              "k": {}, "fed_image_acc": None, "fed_token_acc": None, "copy_token_acc": None, "gate_k0_acc": None}
    grammar = image_vocab(tok, kept_train + kept_test)
    grammar["code_set"] = set(grammar["codes"])
    ks = range(int(cfg["eval"]["scaffold_max"]) + 1) if arm in tokens.CHAIN_ARMS else [0]
    for k in ks:
        result["k"][str(k)] = decode(model, tok, kept_test, arm, k, cfg, grammar)
    if arm == "interleaved":
        rows = kept_test if kept_val is None else kept_val
        result.update(fed_image_acc(model, tok, rows, cfg, grammar))
        own = result["k"]["0"] if kept_val is None else decode(model, tok, rows, arm, 0, cfg, grammar)
        result["gate_k0_acc"] = own["accuracy"]
        result["gate_malformed"] = own["malformed"]   # the gate's own-chain decode on the validation rows
        result["n_val"] = len(rows)
    log(f"{arm} seed {seed}: loss {result['final_loss']:.3f} "
        + " ".join(f"k{k} acc {v['accuracy']:.3f}" for k, v in result["k"].items())
        + (f" gate (validation): fed image-step acc {result['fed_image_acc']:.3f}, fed per-token acc "
           f"{result['fed_token_acc']:.3f} (copy the previous image {result['copy_token_acc']:.3f}), "
           f"k0 acc {result['gate_k0_acc']:.3f} (malformed {result['gate_malformed']:.3f})"
           if result["fed_image_acc"] is not None else "")
        + " malformed generations " + " ".join(f"k{k} {v['malformed']:.3f}" for k, v in result["k"].items()))
    return result
