"""The tiny stand-in for a paper's pretrained reasoning model: the task's tokenizer and one small
LM per seed, trained from scratch on the teacher traces (the prepare stage of the LM papers)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from iclr26.core.io import read_jsonl

from . import model as M
from . import tokenizer as K
from . import traces as T
from .formats import TagFormat

# examples_for(format, rows, seed) -> [(token ids, index where the loss starts), ...]
ExamplesFor = Callable[[object, list, int], list]


def train_base_models(job, examples_for: ExamplesFor) -> dict:
    """Write `tokenizer/` and `base_s<seed>/` (save_pretrained) into job.out_dir for every seed."""
    spec = job.cfg["data"][job.dataset]
    M.configure_torch(job.cfg.get("threads", 1))
    tokenizer = K.build_tokenizer(T.vocabulary(int(spec["modulus"])), job.out_dir / "tokenizer")
    rows = read_jsonl(job.raw_dir() / "train.jsonl")
    base, info = job.cfg["base"], {}
    for seed in job.cfg["seeds"]:
        model = M.build_model(job.cfg["model"], tokenizer, seed=seed)
        examples = examples_for(TagFormat(tokenizer), rows, seed)
        losses = M.train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tokenizer.pad_token_id,
                            base["steps"], base["batch_size"], base["lr"], seed, log=job.log)
        model.save_pretrained(job.out_dir / f"base_s{seed}")
        info[f"s{seed}_final_loss"] = float(np.mean(losses[-20:]))
    return info
