"""Stages of card 19, Zebra-CoT (arXiv 2507.16746).

    acquire   tiny/smoke: the seeded Multi-Hop Objects Counting generator writes Zebra-CoT rows
              (train.parquet, test.parquet); full: the named configs of
              multimodal-reasoning-lab/Zebra-CoT at a pinned commit, streamed one parquet shard at a
              time, split into train / held-out test by a hash of (config, row) (hub.py)
    prepare   the image tokenizer's codebook (k-means on training patches), every image as codes,
              every row as word lists (tokens.example), the shared word-level tokenizer
    train     per arm and seed (one unit): a decoder from config trained on the arm's sequences
              (core.lm.model.train_lm), then greedy decoding on the test rows with k gold
              multimodal steps given (k = 0 for every arm; k = 1..scaffold_max for interleaved)
    evaluate  one record per (seed, k) from the units' JSON results
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, read_jsonl, save_arrays, write_json, write_jsonl

from . import data, tokens

DATASET = "counting"


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        from . import hub

        return hub.acquire(spec, job.out_dir, log=job.log)
    train_rows = data.generate(spec, int(spec["n_train"]), int(spec["data_seed"]))
    test_rows = data.generate(spec, int(spec["n_test"]), int(spec["data_seed"]) + 1)
    data.write_parquet(train_rows, job.out_dir / "train.parquet")
    data.write_parquet(test_rows, job.out_dir / "test.parquet")
    split = {"train": len(train_rows), "test": len(test_rows), "how": f"generator seeds {spec['data_seed']} (train) "
             f"and {int(spec['data_seed']) + 1} (test)"}
    print(f"zebra_cot split: {split}")
    return split


def prepare(job) -> dict:
    vq = job.cfg["image_tokenizer"]
    raw = job.raw_dir()
    rows = {part: data.read_parquet(raw / f"{part}.parquet") for part in ("train", "test")}
    fit_rows = rows["train"][: int(vq["fit_rows"])]
    fit_images = [data.decode_image(r[c]) for r in fit_rows for c in data.image_columns(r)]
    codebook = tokens.fit_codebook(fit_images, vq, int(vq["seed"]))
    save_arrays(job.out_dir / "codebook.npz", codebook=codebook)
    out, used = {}, set()
    for part, part_rows in rows.items():
        examples = []
        for row in part_rows:
            codes = {c: tokens.encode_image(data.decode_image(row[c]), codebook, vq) for c in data.image_columns(row)}
            used.update(x for c in codes.values() for x in c)
            prompt, chain = data.segments(row)
            examples.append(tokens.example(prompt, chain, row["Final Answer"], codes))
        write_jsonl(job.out_dir / f"{part}.jsonl", examples)
        out[part] = len(examples)
    vocab = sorted({w for ex in read_jsonl(job.out_dir / "train.jsonl") for w in _all_words(ex)}
                   | set(map(tokens.code_word, range(len(codebook)))) | {tokens.BOI, tokens.EOI})
    write_json(job.out_dir / "vocab.json", vocab)
    check = answer_determined(read_jsonl(job.out_dir / "train.jsonl"))
    job.log(f"codebook {len(codebook)} codes ({len(used)} used); the question and last reasoning image "
            f"determine the answer in {check:.3f} of training rows")
    return {**out, "codebook": len(codebook), "codes_used": len(used), "vocab": len(vocab),
            "answer_determined_by_last_image": check}


def _all_words(ex: dict) -> list[str]:
    return ex["prompt"] + [w for s in ex["steps"] for w in s["text"] + s["image"]] + ex["tail"] + ex["answer"]


def answer_determined(examples: list[dict]) -> float:
    """Fraction of rows whose (question words, last reasoning image) pair always comes with the same
    answer: 1.0 means the visual chain's last image carries everything the answer needs."""
    seen: dict = {}
    keys = []
    for ex in examples:
        last = ex["steps"][-1]["image"] if ex["steps"] else []
        key = (" ".join(w for w in ex["prompt"] if not w.startswith("<img_")), " ".join(last))
        seen.setdefault(key, set()).add(" ".join(ex["answer"]))
        keys.append(key)
    return float(np.mean([len(seen[k]) == 1 for k in keys])) if keys else float("nan")


def _tokenizer(job):
    from iclr26.core.lm.tokenizer import build_tokenizer

    return build_tokenizer(read_json(job.prepared_dir(DATASET) / "vocab.json"))


def ks_of(cfg: dict, method: str) -> list[int]:
    return list(range(int(cfg["eval"]["scaffold_max"]) + 1)) if method == "interleaved" else [0]


def train(job) -> dict:
    import torch

    from iclr26.core.lm.generate import generate
    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.runtime import pick_device

    device = pick_device(job.cfg.get("device"))
    tok = _tokenizer(job)
    prepared = job.prepared_dir(DATASET)
    train_ex = read_jsonl(prepared / "train.jsonl")
    tcfg, ecfg = job.cfg["train"], job.cfg["eval"]
    limit = int(tcfg["max_length"])   # rows whose interleaved sequence is longer are dropped from every arm

    def fits(ex: dict) -> bool:
        return sum(map(len, tokens.target(ex, "interleaved"))) < limit

    train_ex = [ex for ex in train_ex if fits(ex)]
    test_ex = [ex for ex in read_jsonl(prepared / "test.jsonl") if fits(ex)][: int(ecfg["n_test"])]

    def ids(ws: list[str]) -> list[int]:
        return tok.convert_tokens_to_ids(ws)

    def unit(key: str) -> dict:
        seed = int(key[1:])
        seqs, starts = [], []
        for ex in train_ex:
            prompt, tgt = tokens.target(ex, job.method)
            seqs.append(ids(prompt + tgt) + [tok.eos_token_id])
            starts.append(len(prompt))
        model = build_model(job.cfg["model"], tok, seed=seed, device=device).to(device)
        losses = train_lm(model, seqs, starts, tok.pad_token_id, int(tcfg["steps"]), int(tcfg["batch_size"]),
                          float(tcfg["lr"]), seed, weight_decay=float(tcfg["weight_decay"]),
                          warmup=int(tcfg["warmup"]), log=job.log)
        result = {"final_loss": float(np.mean(losses[-max(1, len(losses) // 10):])), "n_train": len(train_ex),
                  "tokens_per_example": float(np.mean([len(s) for s in seqs])), "k": {}}
        for k in ks_of(job.cfg, job.method):
            k_eff = min(k, min(len(ex["steps"]) for ex in test_ex)) if job.method != "answer_only" else 0
            prompts = [ids(tokens.target(ex, job.method, k_eff)[0]) for ex in test_ex]
            with torch.no_grad():
                gen = generate(model, prompts, tok.pad_token_id, tok.eos_token_id, int(ecfg["max_new_tokens"]),
                               batch_size=int(ecfg["batch_size"]))
            correct, steps_ok = [], []
            for ex, out in zip(test_ex, gen.tokens):
                words = [w for w in tok.convert_ids_to_tokens(out) if w != tok.eos_token]
                parsed = tokens.parse(words)
                correct.append(parsed["answer"] == " ".join(ex["answer"][2:]))
                gold = [s["image"][1:-1] for s in ex["steps"][k_eff:]]
                if job.method == "interleaved" and gold:
                    steps_ok.append(np.mean([i < len(parsed["images"]) and parsed["images"][i] == g
                                             for i, g in enumerate(gold)]))
            result["k"][str(k)] = {"accuracy": float(np.mean(correct)),
                                   "image_step_acc": float(np.mean(steps_ok)) if steps_ok else None,
                                   "n_test": len(test_ex)}
        job.log(f"{job.method} {key}: loss {result['final_loss']:.3f} "
                + " ".join(f"k{k} acc {v['accuracy']:.3f}" for k, v in result["k"].items()))
        return result

    done = job.units([f"s{s}" for s in job.seeds], unit)
    return {"units": len(done)}


def evaluate(job) -> dict:
    records = []
    for seed in job.seeds:
        result = read_json(job.out_dir / "units" / f"s{seed}.json")["result"]
        base = result["k"]["0"]["accuracy"]
        for k, r in result["k"].items():
            records.append({"seed": int(seed), "k": int(k), "accuracy": r["accuracy"],
                            "image_step_acc": r["image_step_acc"], "gain_over_k0": r["accuracy"] - base,
                            "tokens_per_example": result["tokens_per_example"], "final_loss": result["final_loss"],
                            "n_test": r["n_test"]})
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from iclr26.core.figures import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    inter = records[records["method"] == "interleaved"]
    means = inter.groupby("k")["accuracy"].agg(["mean", "std"])
    ax.errorbar(means.index, means["mean"], yerr=means["std"].fillna(0), marker="o", label="interleaved (scaffolded)")
    for method, style in (("text_trace", "--"), ("answer_only", ":")):
        rows = records[(records["method"] == method) & (records["k"] == 0)]
        if len(rows):
            ax.axhline(rows["accuracy"].mean(), ls=style, color="grey", label=method)
    ax.set_xlabel("gold multimodal steps given (k)")
    ax.set_ylabel("answer accuracy")
    ax.legend(fontsize=7)
    return [save(fig, Path(out_dir) / "scaffolding.png")]

