"""The weight lambda of DART's feature-level term, chosen on validation clips before the arms run
again (the paper's lambda was not found; card 09, section 7).

Rule (written after looks at lambda = 0.1 and lambda = 10 on the evaluation runs: see the
deviation in config/hydra/paper/dart.yaml): validation = the last `tune.n_val` development clips (clean pairs; the
model trains on the other development clips, with the condition's noisy pairs), never the
evaluation clips; seed `tune.seed` (not an evaluation seed); batch `train.batch_sizes[0]`, both pair
conditions; score = mean of R@1, R@5, R@10 in both directions on the validation clips, averaged
over the two conditions; chosen = the lambda of `tune.lam_grid` with the highest score for DART
(with RAM); no tie rule was stated before the run (the tiny pick, 0.3 over 0.1 by 0.03 points, is
a tie). IOT is printed on the same split for reference; it has no lambda. The chosen value goes
into train.lam by hand (config/hydra/paper/dart.yaml, with this output quoted there).

    .venv/bin/python -m iclr26.papers.dart.tune [--scale tiny]
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="tiny")
    args = parser.parse_args()

    import numpy as np
    import torch

    from iclr26.core.config import compose_job_config
    from iclr26.core.io import load_arrays, read_json
    from iclr26.core.job import data_dir

    from . import training
    from .metrics import recalls

    torch.set_num_threads(1)
    cfg = compose_job_config("dart", args.scale)
    tune = cfg["tune"]
    seed, n_val = int(tune["seed"]), int(tune["n_val"])
    if seed in {int(s) for s in cfg["seeds"]}:
        raise SystemExit(f"tune seed {seed} is an evaluation seed")
    prepared = data_dir(args.scale, "dart", "prepared", "clotho")
    f = load_arrays(prepared / "features.npz")
    vocab = len(read_json(prepared / "vocab.json")) + 1
    split = {"dev_x": f["dev_x"][:-n_val], "dev_t": f["dev_t"][:-n_val], "ev_x": f["dev_x"][-n_val:],
             "ev_t": f["dev_t"][-n_val:]}
    batch = int(cfg["train"]["batch_sizes"][0])

    def score(method: str, lam: float) -> float:
        run_cfg = {**cfg, "train": {**cfg["train"], "lam": lam}}
        out = []
        for noise in cfg["train"]["conditions"].values():
            torch.manual_seed(seed)
            a, t, _ = training.fit(split, vocab, method, batch, float(noise), run_cfg, seed)
            r = recalls(a, t)
            out.append(np.mean([r[f"r{k}_{d}"] for k in (1, 5, 10) for d in ("a2t", "t2a")]))
        return float(np.mean(out))

    started = time.process_time()
    print(f"validation: {n_val} development clips; batch {batch}; seed {seed}")
    iot = score("iot", 0.0)
    print(f"iot: score {iot:.2f}")
    results = {}
    for lam in tune["lam_grid"]:
        results[float(lam)] = score("dart", float(lam))
        print(f"dart lambda {lam}: score {results[float(lam)]:.2f}")
    chosen = max(results, key=results.get)
    if results[chosen] <= iot:
        print(f"no lambda of {list(results)} beats IOT on validation ({results[chosen]:.2f} <= {iot:.2f})")
    print(f"chosen train.lam: {chosen} ({time.process_time() - started:.1f} CPU-s)")


if __name__ == "__main__":
    main()
