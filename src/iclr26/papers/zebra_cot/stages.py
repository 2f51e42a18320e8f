"""Stages of card 19, Zebra-CoT (arXiv 2507.16746).

    acquire   tiny/smoke: the seeded Multi-Hop Objects Counting generator writes Zebra-CoT rows
              (train.parquet, test.parquet); full: the named configs of
              multimodal-reasoning-lab/Zebra-CoT at a pinned commit, streamed one parquet shard at a
              time, split into train / validation / held-out test by a hash of (config, shard, row)
              (hub.py), and the Anole-7B snapshot at its pinned commit; validation rows only feed
              the learnability gate
    prepare   the image tokenizer's codebook (k-means on training patches), every image as codes,
              every row as word lists (tokens.example), the word-level tokenizer's vocabulary (every
              split's words: a test word is never <unk>), and the two answer baselines on the test
              rows: the training majority answer and the question-only lookup (the most frequent
              training answer of the same question text, images removed; the majority if unseen)
    train     per arm and seed (one unit, arms.fit_and_eval): a decoder trained on the arm's
              sequences, then greedy decoding on the test rows with k = 0..scaffold_max gold steps
              given, and the per-step image accuracy with the gold steps fed (the learnability
              gate's part a; part b is the k = 0 accuracy against the lookup); full scale: the
              rows in the pinned Anole-7B's own tokens (its tokenizer and VQ-VAE), each arm a LoRA
              fine-tune of it with the interleaved loss over text and image tokens (anole.py),
              decoded under the image grammar (arms.ImageGrammar), and the gate's part a per token
              against copying the previous image (arms.gate_part_a; fixed before any full run)
    evaluate  one record per (seed, k) from the units' JSON results; the baselines' records
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, read_jsonl, save_arrays, write_json, write_jsonl

from . import data, tokens
from .arms import gate_margin, gate_part_a

DATASET = "counting"
BASELINES = ("majority", "lookup")


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        from . import hub

        split = hub.acquire(spec, job.out_dir, log=job.log)
        model = job.cfg["model"]
        if model.get("source") and not Path(model["source"]).exists():   # a hub id: the pinned snapshot
            from iclr26.core.acquire import snapshot_model

            split["model"] = snapshot_model(model)
        return split
    seed = int(spec["data_seed"])
    train_rows = data.generate(spec, int(spec["n_train"]), seed)
    test_rows = data.generate(spec, int(spec["n_test"]), seed + 1)
    val_rows = data.generate(spec, int(spec["n_val"]), seed + 2)
    data.write_parquet(train_rows, job.out_dir / "train.parquet")
    data.write_parquet(test_rows, job.out_dir / "test.parquet")
    data.write_parquet(val_rows, job.out_dir / "val.parquet")
    split = {"train": len(train_rows), "test": len(test_rows), "val": len(val_rows),
             "how": f"generator seeds {seed} (train), {seed + 1} (test) and {seed + 2} (validation: the "
                    "learnability gate, here and in the step-budget choice of tune.py)"}
    print(f"zebra_cot split: {split}")
    return split


def encode_rows(rows: list[dict], codebook: np.ndarray, vq: dict) -> tuple[list[dict], set]:
    """Examples (tokens.example) of rows, and the image codes they use."""
    out, used = [], set()
    for row in rows:
        codes = {c: tokens.encode_image(data.decode_image(row[c]), codebook, vq) for c in data.image_columns(row)}
        used.update(x for c in codes.values() for x in c)
        out.append(tokens.example(*data.segments(row), row["Final Answer"], codes, len(codebook)))
    return out, used


def all_words(ex: dict) -> list[str]:
    return (ex["prompt"] + [w for s in ex["steps"] for w in s["text"] + s["image"] + s["state"]]
            + ex["tail"] + ex["answer"])


def baselines(train_ex: list[dict], test_ex: list[dict]) -> dict:
    """Accuracy of the training majority answer and of the question-only lookup on test_ex."""
    answers = [" ".join(ex["answer"]) for ex in train_ex]
    majority = Counter(answers).most_common(1)[0][0]
    table: dict = {}
    for ex, a in zip(train_ex, answers):
        table.setdefault(tokens.question_key(ex), Counter())[a] += 1
    gold = [" ".join(ex["answer"]) for ex in test_ex]
    lookup = [table[k].most_common(1)[0][0] if k in table else majority for k in map(tokens.question_key, test_ex)]
    return {"majority": float(np.mean([majority == g for g in gold])),
            "lookup": float(np.mean([p == g for p, g in zip(lookup, gold)])),
            "majority_answer": majority, "n_test": len(test_ex)}


def prepare(job) -> dict:
    vq = job.cfg["image_tokenizer"]
    raw = job.raw_dir()
    rows = {part: data.read_parquet(raw / f"{part}.parquet") for part in ("train", "test", "val")}
    fit_rows = rows["train"][: int(vq["fit_rows"])]
    fit_images = [data.decode_image(r[c]) for r in fit_rows for c in data.image_columns(r)]
    codebook = tokens.fit_codebook(fit_images, vq, int(vq["seed"]))
    save_arrays(job.out_dir / "codebook.npz", codebook=codebook)
    out, used, examples = {}, set(), {}
    for part, part_rows in rows.items():
        examples[part], part_used = encode_rows(part_rows, codebook, vq)
        used |= part_used
        write_jsonl(job.out_dir / f"{part}.jsonl", examples[part])
        out[part] = len(examples[part])
    train_words = {w for ex in examples["train"] for w in all_words(ex)}
    vocab = sorted({w for part in examples.values() for ex in part for w in all_words(ex)}
                   | set(map(tokens.code_word, range(len(codebook)))) | {tokens.BOI, tokens.EOI})
    write_json(job.out_dir / "vocab.json", vocab)
    base = baselines(examples["train"], examples["test"])
    base["val_lookup"] = baselines(examples["train"], examples["val"])["lookup"]   # the gate's part b
    write_json(job.out_dir / "baselines.json", base)
    check = answer_determined(examples["train"])
    job.log(f"codebook {len(codebook)} codes ({len(used)} used); vocabulary {len(vocab)} words "
            f"({len(set(vocab) - train_words)} seen outside training rows only); the question and last "
            f"reasoning image determine the answer in {check:.3f} of training rows; test baselines: "
            f"majority {base['majority']:.3f}, question-only lookup {base['lookup']:.3f}; validation "
            f"lookup {base['val_lookup']:.3f}")
    return {**out, "codebook": len(codebook), "codes_used": len(used), "vocab": len(vocab),
            "answer_determined_by_last_image": check, **{k: base[k] for k in BASELINES}}


def answer_determined(examples: list[dict]) -> float:
    """Fraction of rows whose (question words, last reasoning image) pair always comes with the same
    answer: 1.0 means the visual chain's last image carries everything the answer needs."""
    seen: dict = {}
    keys = []
    for ex in examples:
        last = ex["steps"][-1]["image"] if ex["steps"] else []
        key = (tokens.question_key(ex), " ".join(last))
        seen.setdefault(key, set()).add(" ".join(ex["answer"]))
        keys.append(key)
    return float(np.mean([len(seen[k]) == 1 for k in keys])) if keys else float("nan")


def train(job) -> dict:
    from iclr26.core.lm.tokenizer import build_tokenizer
    from iclr26.core.runtime import pick_device

    from .arms import fit_and_eval

    device = pick_device(job.cfg.get("device"))
    prepared = job.prepared_dir(DATASET)
    if job.cfg["model"].get("kind") == "anole":   # full: the raw rows in Anole's own tokens (anole.py)
        train_ex, test_ex, val_ex, tok = anole_examples(job, device)
    else:
        tok = build_tokenizer(read_json(prepared / "vocab.json"))
        train_ex, test_ex = read_jsonl(prepared / "train.jsonl"), read_jsonl(prepared / "test.jsonl")
        val_ex = read_jsonl(prepared / "val.jsonl")
    test_ex = test_ex[: int(job.cfg["eval"]["n_test"])]

    def unit(key: str) -> dict:
        return fit_and_eval(job.cfg, job.method, int(key[1:]), train_ex, test_ex, tok, device, job.log, val_ex=val_ex)

    done = job.units([f"s{s}" for s in job.seeds], unit)
    return {"units": len(done)}


def anole_examples(job, device) -> tuple[list, list, list, object]:
    """Train, test and validation rows tokenized by the pinned Anole model (text by its tokenizer,
    images by its VQ-VAE on `device`), once per job, and the id tokenizer of arms.py."""
    import torch

    from . import anole

    spec = job.cfg["model"]
    processor = anole.processor_of(spec)
    lm = anole.load(spec, 0, device)
    raw = job.raw_dir(DATASET)
    parts = [anole.encode_rows(data.read_parquet(raw / f"{part}.parquet"), lm, processor, log=job.log)
             for part in ("train", "test", "val")]
    del lm
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return (*parts, anole.tokenizer_of(spec, processor))


def evaluate(job) -> dict:
    base = read_json(job.prepared_dir(DATASET) / "baselines.json")
    if job.method in BASELINES:   # training-free: the same answers for every seed
        return {"records": [{"seed": int(seed), "k": 0, "accuracy": base[job.method], "n_test": base["n_test"]}
                            for seed in job.seeds]}
    gate = job.cfg["gate"]
    need_k0 = base["val_lookup"] + float(gate["k0_over_lookup"])
    results = {seed: read_json(job.out_dir / "units" / f"s{seed}.json")["result"] for seed in job.seeds}
    records = []
    for seed, result in results.items():
        k0 = result["k"]["0"]["accuracy"]
        fed = result["fed_image_acc"]
        part_a, need_a = gate_part_a(gate, result)
        # this seed's gate margin (the precondition tests it with every_seed: every seed above 0)
        margin = (None if part_a is None or need_a is None
                  else gate_margin(part_a, result["gate_k0_acc"], need_a, need_k0))
        for k, r in result["k"].items():
            records.append({"seed": int(seed), "k": int(k), "accuracy": r["accuracy"],
                            "image_step_acc": r["image_step_acc"], "gain_over_k0": r["accuracy"] - k0,
                            "fed_image_acc": fed, "fed_token_acc": result.get("fed_token_acc"),
                            "copy_token_acc": result.get("copy_token_acc"), "malformed": r.get("malformed"),
                            "gate_margin": margin, "gate_k0_acc": result["gate_k0_acc"],
                            "tokens_per_example": result["tokens_per_example"],
                            "supervised_tokens": result["supervised_tokens"], "final_loss": result["final_loss"],
                            "n_test": r["n_test"], "n_dropped": result["n_dropped"]})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from iclr26.core.figures import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 3.3))
    for method, marker in (("interleaved", "o"), ("text_cot", "s"), ("text_trace", "^")):
        rows = records[records["method"] == method]
        if len(rows):
            means = rows.groupby("k")["accuracy"].agg(["mean", "std"])
            ax.errorbar(means.index, means["mean"], yerr=means["std"].fillna(0), marker=marker, label=method)
    for method, style in (("answer_only", ":"), ("lookup", "--"), ("majority", "-.")):
        rows = records[(records["method"] == method) & (records["k"] == 0)]
        if len(rows):
            ax.axhline(rows["accuracy"].mean(), ls=style, color="grey", label=method)
    ax.set_xlabel("gold chain steps given (k)")
    ax.set_ylabel("answer accuracy")
    ax.legend(fontsize=7)
    return [save(fig, Path(out_dir) / "scaffolding.png")]
