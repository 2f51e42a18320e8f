"""The step budget of card 19's tiny arms, chosen by the learnability gate before any arm runs
(audit 19, finding 1).

The gate (config `gate`): with the full gold chain given in the prompt (every thought and reasoning
image, teacher-forced), the interleaved model's answer accuracy on the validation rows is at least
`gate.min_accuracy` and above the question-only lookup baseline on the same rows. Validation rows
come from generator seed data_seed + 2 (train is data_seed, test data_seed + 1); the models use
`gate.tune_seeds` (never evaluation seeds). Rule, fixed before running: the smallest budget of
`gate.step_ladder` at which every tune seed passes; that budget goes into train.steps for every arm
(by hand in config/hydra/paper/zebra_cot.yaml, with this output quoted there).

    .venv/bin/python -m iclr26.papers.zebra_cot.tune [--scale tiny] [--override KEY=VALUE ...]
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
    from .arms import fit_and_eval
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
    floor = max(float(gate["min_accuracy"]), base["lookup"])
    print(f"validation: {len(val_ex)} rows; majority {base['majority']:.3f}, question-only lookup "
          f"{base['lookup']:.3f}; gate: gold-chain accuracy >= {floor:.3f} (and > lookup) for seeds {seeds}")
    chosen = None
    for steps in gate["step_ladder"]:
        run_cfg = {**cfg, "train": {**cfg["train"], "steps": int(steps)}, "eval": {**cfg["eval"], "scaffold_max": 0}}
        accs, k0 = [], []
        started = time.process_time()
        for s in seeds:
            r = fit_and_eval(run_cfg, "interleaved", s, train_ex, val_ex, tok, "cpu", log=lambda *a, **k: None)
            accs.append(r["gold_chain_acc"])
            k0.append(r["k"]["0"]["accuracy"])
        ok = all(a >= float(gate["min_accuracy"]) and a > base["lookup"] for a in accs)
        print(f"steps {steps}: gold-chain accuracy {np.round(accs, 3).tolist()}, own chain (k = 0) "
              f"{np.round(k0, 3).tolist()}, {time.process_time() - started:.1f} CPU-s: {'passes' if ok else 'fails'}")
        if ok:
            chosen = int(steps)
            break
    print(f"chosen train.steps: {chosen}" if chosen else "no budget of the ladder passes the gate")


if __name__ == "__main__":
    main()
