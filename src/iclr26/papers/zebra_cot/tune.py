"""The step budget of card 19's tiny arms, chosen by the learnability gate before any arm runs
(audit 19, finding 1; audit 19b, finding B1).

The gate (config `gate`), on the validation rows, per tune seed: (a) with the gold steps fed, the
interleaved model's per-step image accuracy (arms.fed_image_acc) is above `gate.min_image_acc`,
and (b) the interleaved model drawing its own chain (k = 0) answers above the question-only lookup
(on the same rows) + `gate.k0_over_lookup`; i.e. its margin (arms.gate_margin, the smaller of the
two) is above 0. A budget passes when every tune seed passes (the claims' precondition tests the
evaluation seeds' margins the same way: test every_seed). Validation rows come from generator seed
data_seed + 2
(train is data_seed, test data_seed + 1); the models use `gate.tune_seeds` (never evaluation seeds,
never test rows). Rule, written in the config before running: the smallest budget of
`gate.step_ladder` at which every tune seed passes; if none passes, the ladder's largest (the cap),
and the evaluation precondition (the same gate on the evaluation run) then says untestable. That
budget goes into train.steps for every arm (by hand in config/hydra/paper/zebra_cot.yaml, with this
output quoted there).

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python -m iclr26.papers.zebra_cot.tune [--scale tiny] \
        [--override KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--override", action="append", default=[], help="config override KEY=VALUE (repeatable)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from iclr26.core.config import compose_job_config
    from iclr26.core.lm.tokenizer import build_tokenizer

    from . import data, tokens
    from .arms import fit_and_eval, gate_margin
    from .stages import all_words, baselines, encode_rows

    torch.set_num_threads(1)
    cfg = compose_job_config("zebra_cot", args.scale, tuple(args.override))
    spec, vq, gate = cfg["data"]["counting"], cfg["image_tokenizer"], cfg["gate"]
    seeds = [int(s) for s in gate["tune_seeds"]]
    if set(seeds) & set(int(s) for s in cfg["seeds"]):
        raise SystemExit(f"tune seeds {seeds} overlap the evaluation seeds {cfg['seeds']}")
    seed = int(spec["data_seed"])
    train_rows = data.generate(spec, int(spec["n_train"]), seed)
    val_rows = data.generate(spec, int(gate["n_val"]), seed + 2)
    fit = train_rows[: int(vq["fit_rows"])]
    codebook = tokens.fit_codebook([data.decode_image(r[c]) for r in fit for c in data.image_columns(r)], vq,
                                   int(vq["seed"]))
    train_ex, _ = encode_rows(train_rows, codebook, vq)
    val_ex, _ = encode_rows(val_rows, codebook, vq)
    tok = build_tokenizer(sorted({w for ex in train_ex + val_ex for w in all_words(ex)}
                                 | set(map(tokens.code_word, range(len(codebook)))) | {tokens.BOI, tokens.EOI}))
    base = baselines(train_ex, val_ex)
    need_img, need_k0 = float(gate["min_image_acc"]), base["lookup"] + float(gate["k0_over_lookup"])
    print(f"validation: {len(val_ex)} rows; majority {base['majority']:.3f}, question-only lookup "
          f"{base['lookup']:.3f}; gate: margin = min(fed image-step accuracy - {need_img:.3f}, own-chain (k = 0) "
          f"accuracy - {need_k0:.3f}) > 0 for every seed of {seeds}")
    ladder = [int(x) for x in gate["step_ladder"]]
    chosen, total = None, 0.0
    for steps in ladder:
        run_cfg = {**cfg, "train": {**cfg["train"], "steps": steps}, "eval": {**cfg["eval"], "scaffold_max": 0}}
        img, k0, margins = [], [], []
        started = time.process_time()
        for s in seeds:
            r = fit_and_eval(run_cfg, "interleaved", s, train_ex, val_ex, tok, "cpu", log=lambda *a, **k: None)
            img.append(r["fed_image_acc"])
            k0.append(r["k"]["0"]["accuracy"])
            margins.append(gate_margin(img[-1], k0[-1], need_img, need_k0))
        ok = min(margins) > 0   # every seed passes (the precondition's test every_seed)
        spent = time.process_time() - started
        total += spent
        print(f"steps {steps}: fed image-step accuracy {np.round(img, 3).tolist()}, own chain (k = 0) "
              f"{np.round(k0, 3).tolist()}, margins {np.round(margins, 3).tolist()}, {spent:.1f} CPU-s: "
              f"{'passes' if ok else 'fails'}", flush=True)
        if ok:
            chosen = steps
            break
    if chosen is None:
        print(f"no budget of the ladder passes the gate: train.steps {max(ladder)} (the cap); the evaluation "
              "precondition will say untestable")
    print(f"chosen train.steps: {chosen or max(ladder)}; tune {total:.1f} CPU-s")


if __name__ == "__main__":
    main()
