"""Run core.lm.train.train_recipe on a save_pretrained tiny Qwen2 for each recipe in argv[2] (JSON),
save each trained model (save_trained: gathered from the shards) under argv[4]/<name>, and write
{name: losses} as JSON to argv[3] from the main process. Started by test_lm_train.py under
`accelerate launch` (several gloo processes); test_lm_train calls run() in one process."""
import json
import sys

import numpy as np


def examples(n: int = 24, vocab: int = 40, seed: int = 0):
    """Token sequences of varied length, the loss from a varied prompt length (row i: loss_from[i])."""
    rng = np.random.default_rng(seed)
    seqs = [[int(t) for t in rng.integers(2, vocab, size=int(rng.integers(6, 15)))] for _ in range(n)]
    return seqs, [int(rng.integers(1, 4)) for _ in seqs]


def run(model_dir: str, recipes: dict, save_dir: str | None = None, models: dict | None = None) -> dict:
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from iclr26.core.distributed import is_main_process
    from iclr26.core.lm.train import save_trained, train_recipe

    seqs, starts = examples()
    out = {}
    for name, spec in recipes.items():
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        trained, losses = train_recipe(model, seqs, starts, 0, spec, seed=0)
        out[name] = losses
        if save_dir:
            save_trained(trained, Path(save_dir) / name, is_main_process())
        if models is not None:
            models[name] = trained
    return out


if __name__ == "__main__":
    from iclr26.core.distributed import is_main_process

    result = run(sys.argv[1], json.loads(sys.argv[2]), save_dir=sys.argv[4])
    if is_main_process():
        with open(sys.argv[3], "w") as handle:
            json.dump(result, handle)
