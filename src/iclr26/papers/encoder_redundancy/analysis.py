"""CUR and IG (card 14, section 2, the project page's formulas) and the records of one seed.

    u(E_i)   = [acc(f_En) - acc(f_En \\ {E_i})] / acc(f_En)       conditional utilization rate
    gap(En)  = max_i u(E_i) - min_j u(E_j)                          information gap (IG)

acc(f_En \\ {E_i}) is the same trained model evaluated with E_i masked. Accuracies are per category
(a group's accuracy is the macro average over its categories / benchmarks). With a chance level c
the CUR cannot exceed 1 - c / acc(f_En) (the masked model still guesses): `cur_cap`.

Subset selection ("masking can help", graceful degradation) picks the subset on the VALIDATION items
and scores it on the test items, so the reported gain is not selected on the items it is scored on.
"""
from __future__ import annotations

import numpy as np

GROUPS = {"general": ("general",), "knowledge": ("knowledge",), "ocr": ("ocr",), "vision": ("vision",),
          "non_ocr": ("general", "knowledge", "vision"), "overall": ("general", "knowledge", "ocr", "vision")}
NAN = float("nan")
BLANK = {"acc": NAN, "rel_acc": NAN, "train_acc": NAN, "cur": NAN, "ig": NAN, "cur_max": NAN, "cur_min": NAN,
         "cur_cap": NAN, "best_gain": NAN, "ig_drop": NAN, "params": NAN, "macs": NAN, "train_macs": NAN,
         "rel_macs": NAN, "rel_train_macs": NAN, "kept": "", "n_masked": -1, "encoder": "", "stat": "",
         "variant": "", "ablation": "", "world": ""}


def group_acc(correct: np.ndarray, category: np.ndarray, groups: dict | None = None) -> dict[str, np.ndarray]:
    """{group: accuracy of each row of `correct` (n_keeps, N)} over the items of that group
    (macro average over its categories, as the paper averages benchmarks within a group).
    `groups`: {group: categories}, default MiniMME's; at full scale the categories are benchmarks."""
    per = {c: correct[:, category == c].mean(1) for c in np.unique(category)}
    return {g: np.mean([per[c] for c in cats if c in per], axis=0) for g, cats in (groups or GROUPS).items()
            if any(c in per for c in cats)}


def group_chance(chance: dict[str, float], category: np.ndarray, groups: dict | None = None) -> dict[str, float]:
    present = set(np.unique(category))
    return {g: float(np.mean([chance[c] for c in cats if c in present])) for g, cats in (groups or GROUPS).items()
            if present & set(cats)}


def cur(acc_full: float, acc_without: float) -> float:
    return (acc_full - acc_without) / acc_full if acc_full > 0 else NAN


def mask_records(test: np.ndarray, test_cat: np.ndarray, val: np.ndarray, val_cat: np.ndarray,
                 keeps: list[tuple[int, ...]], names: tuple[str, ...], ablation: str, seed: int,
                 chance: dict[str, float], world: str = "asymmetric", groups: dict | None = None) -> list[dict]:
    """Records of one seed, world and ablation from the correctness (n_keeps, N) of every kept subset
    (keeps[0] = all) on the test and on the validation items."""
    n = len(names)
    acc, vacc = group_acc(test, test_cat, groups), group_acc(val, val_cat, groups)
    ch = group_chance(chance, test_cat, groups)
    rec = []
    base = {**BLANK, "seed": seed, "ablation": ablation, "variant": "full", "world": world}
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
        pick = 1 + int(np.argmax(vacc[g][1:]))   # the proper subset best on the validation items
        rec.append({**base, "kind": "summary", "category": g, "acc": full, "ig": max(curs) - min(curs),
                    "cur_max": max(curs), "cur_min": min(curs), "cur_cap": 1 - ch[g] / full if full else NAN,
                    "best_gain": float(a[pick]) - full,
                    "kept": "+".join(nm for nm, k in zip(names, keeps[pick]) if k)})
        for m in range(n):   # graceful degradation: max / min / mean over the subsets with m encoders masked
            idx = np.flatnonzero([n - sum(k) == m for k in keeps])
            for stat, fn in (("max", np.max), ("min", np.min), ("mean", np.mean)):
                v = float(fn(a[idx]))
                rec.append({**base, "kind": "degrade", "category": g, "n_masked": m, "stat": stat, "acc": v,
                            "rel_acc": v / full if full else NAN})
            sel = idx[int(np.argmax(vacc[g][idx]))]   # chosen on validation, scored on test
            rec.append({**base, "kind": "degrade", "category": g, "n_masked": m, "stat": "val_best",
                        "acc": float(a[sel]), "rel_acc": float(a[sel]) / full if full else NAN,
                        "kept": "+".join(nm for nm, k in zip(names, keeps[sel]) if k)})
    return rec


def control_records(main: list[dict], control: list[dict], seed: int) -> list[dict]:
    """IG of the asymmetric world minus IG of the control world (every encoder sees the full image),
    per group, zero ablation: positive where the category's CUR spread comes from what the encoders
    can see."""
    def igs(rec):
        return {r["category"]: r["ig"] for r in rec if r["kind"] == "summary" and r["ablation"] == "zero"}

    a, c = igs(main), igs(control)
    return [{**BLANK, "seed": seed, "kind": "control", "category": g, "ablation": "zero", "ig": c[g],
             "ig_drop": a[g] - c[g], "world": "control"} for g in a if g in c]


def variant_records(accs: dict[str, dict[str, float]], train_accs: dict[str, dict[str, float]],
                    costs: dict[str, dict], seed: int) -> list[dict]:
    """Re-trained encoder subsets against the full model of the same seed: % of its accuracy per group,
    training accuracy (over-fitting check), parameters, MACs per item, training compute (3 x MACs x
    items seen for what is trained, 1 x for frozen feature extraction; wall seconds are in train's
    metrics, not in the records, which must be reproducible)."""
    full, fc = accs["full"], costs["full"]
    rec = []
    for v, a in accs.items():
        c = costs[v]
        for g, x in a.items():
            rec.append({**BLANK, "seed": seed, "kind": "variant", "variant": v, "category": g, "acc": x,
                        "train_acc": train_accs[v][g], "rel_acc": x / full[g] if full[g] else NAN,
                        "params": c["params"], "macs": c["macs"], "train_macs": c["train_macs"],
                        "rel_macs": c["macs"] / fc["macs"], "rel_train_macs": c["train_macs"] / fc["train_macs"],
                        "world": "asymmetric"})
    return rec
