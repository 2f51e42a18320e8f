"""CUR and IG (card 14, section 2, the project page's formulas) and the records of one seed.

    u(E_i)   = [acc(f_En) - acc(f_En \\ {E_i})] / acc(f_En)       conditional utilization rate
    gap(En)  = max_i u(E_i) - min_j u(E_j)                          information gap (IG)

acc(f_En \\ {E_i}) is the same trained model evaluated with E_i masked. Accuracies are per category.
"""
from __future__ import annotations

import numpy as np

GROUPS = {"general": ("general",), "knowledge": ("knowledge",), "ocr": ("ocr",), "vision": ("vision",),
          "non_ocr": ("general", "knowledge", "vision"), "overall": ("general", "knowledge", "ocr", "vision")}
NAN = float("nan")
BLANK = {"acc": NAN, "rel_acc": NAN, "cur": NAN, "ig": NAN, "cur_max": NAN, "cur_min": NAN, "best_gain": NAN,
         "params": NAN, "macs": NAN, "train_macs": NAN, "rel_macs": NAN, "rel_train_macs": NAN,
         "kept": "", "n_masked": -1, "encoder": "", "stat": "", "variant": "", "ablation": ""}


def group_acc(correct: np.ndarray, category: np.ndarray) -> dict[str, np.ndarray]:
    """{group: accuracy of each row of `correct` (n_keeps, N)} over the items of that group
    (macro average over its categories, as the paper averages benchmarks within a group)."""
    per = {c: correct[:, category == c].mean(1) for c in np.unique(category)}
    return {g: np.mean([per[c] for c in cats if c in per], axis=0) for g, cats in GROUPS.items()
            if any(c in per for c in cats)}


def cur(acc_full: float, acc_without: float) -> float:
    return (acc_full - acc_without) / acc_full if acc_full > 0 else NAN


def mask_records(correct: np.ndarray, category: np.ndarray, keeps: list[tuple[int, ...]], names: tuple[str, ...],
                 ablation: str, seed: int) -> list[dict]:
    """Records of one seed and ablation from the correctness of every kept subset (keeps[0] = all)."""
    n = len(names)
    acc = group_acc(correct, category)
    rec = []
    base = {**BLANK, "seed": seed, "ablation": ablation, "variant": "full"}
    for g, a in acc.items():
        full = float(a[0])
        for j, keep in enumerate(keeps):
            rec.append({**base, "kind": "mask", "category": g, "kept": "+".join(nm for nm, k in zip(names, keep) if k),
                        "n_masked": n - sum(keep), "acc": float(a[j]), "rel_acc": float(a[j]) / full if full else NAN})
        curs = []
        for i, name in enumerate(names):
            without = keeps.index(tuple(int(k != i) for k in range(n)))
            curs.append(cur(full, float(a[without])))
            rec.append({**base, "kind": "cur", "category": g, "encoder": name, "cur": curs[-1]})
        rec.append({**base, "kind": "summary", "category": g, "acc": full, "ig": max(curs) - min(curs),
                    "cur_max": max(curs), "cur_min": min(curs), "best_gain": float(a[1:].max()) - full})
        for m in range(n):   # graceful degradation: max / min / mean over the subsets with m encoders masked
            pick = np.array([n - sum(k) == m for k in keeps])
            for stat, fn in (("max", np.max), ("min", np.min), ("mean", np.mean)):
                v = float(fn(a[pick]))
                rec.append({**base, "kind": "degrade", "category": g, "n_masked": m, "stat": stat, "acc": v,
                            "rel_acc": v / full if full else NAN})
    return rec


def variant_records(accs: dict[str, dict[str, float]], costs: dict[str, dict], seed: int) -> list[dict]:
    """Re-trained encoder subsets against the full model of the same seed: % of its accuracy per group,
    parameters, MACs per item, training compute (3 x MACs x items seen: forward and backward; the
    wall-clock seconds are in train's metrics, not in the records, which must be reproducible)."""
    full, fc = accs["full"], costs["full"]
    rec = []
    for v, a in accs.items():
        c = costs[v]
        for g, x in a.items():
            rec.append({**BLANK, "seed": seed, "kind": "variant", "variant": v, "category": g, "acc": x,
                        "rel_acc": x / full[g] if full[g] else NAN, "params": c["params"], "macs": c["macs"],
                        "train_macs": c["train_macs"], "rel_macs": c["macs"] / fc["macs"],
                        "rel_train_macs": c["train_macs"] / fc["train_macs"]})
    return rec
