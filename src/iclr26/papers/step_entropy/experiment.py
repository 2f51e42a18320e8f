"""Stages of card 07, "Compressing LLM Chain-of-Thought via Step Entropy" (arXiv 2508.03346).

acquire   tiny: seeded chain-arithmetic problems with redundant steps (core.lm.traces), written as
          DeepScaleR-schema rows {problem, answer, trace}; full: the hub datasets of the config.
prepare   tiny: the tokenizer and, per seed, the reasoning model that the paper takes pretrained
          (here a Qwen2 trained from scratch on the teacher traces, 20% with random [SKIP] steps so the
          token is in distribution); full: nothing to train, model.source is loaded by later stages.
train     Stage B (section 2.3): the model writes its own traces on training problems, the correct
          ones are compressed at kappa = sft_kappa by this method's rule, and the model is fine-tuned
          on them (full_cot: on the uncompressed traces). GRPO is not run (config note).
evaluate  Stage A (Fig. 1): the model writes its own test traces greedily; each step gets its entropy
          from a teacher-forced pass; for every kappa the rule replaces floor(kappa n) steps by [SKIP],
          the compressed thinking is prefilled up to `</think> ans` and the answer decoded greedily.
          Stage B: the fine-tuned model answers from the bare prompt; accuracy, thinking tokens, skip ratio.
One job = one method x all seeds (seed_batch); the same seed gives the same model and test set to
every method, so methods are paired by seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.errors import ConfigError
from iclr26.core.io import read_jsonl

from . import method as R

MAIN = "reasoning"          # the dataset of the headline (Stage A + B); others are Stage A ablations


# ----------------------------------------------------------------------------- acquire, prepare
def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        from huggingface_hub import snapshot_download

        info = {}
        for key in ("hub_id", "eval_hub_id"):
            if spec.get(key):
                path = snapshot_download(repo_id=spec[key], repo_type="dataset", revision=spec.get("revision"),
                                         local_dir=job.out_dir / key)
                info[key] = {"id": spec[key], "path": str(path)}
        return info
    if spec["source"] != "chains":
        raise ConfigError(f"data.{job.dataset}.source must be chains or hub, got {spec['source']!r}")
    from iclr26.core.lm import traces as T

    return T.write_splits(spec, job.out_dir, {"train": spec["n_train"], "test": spec["n_test"]})


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "hub":
        return {"note": "full scale: the pretrained model.source is the reasoning model; nothing to train"}
    from iclr26.core.lm.base import train_base_models

    def examples_for(tokenizer, rows, seed):
        rng = np.random.default_rng(seed)
        return [_skip_augmented(tokenizer, row, job.cfg["base"]["skip_augment"], rng) for row in rows]

    return train_base_models(job, examples_for)


def _skip_augmented(tokenizer, row: dict, share: float, rng) -> tuple[list[int], int]:
    """The teacher trace; with probability `share`, a random kappa ~ U(0.1, 0.9) of its steps become
    [SKIP] (answer unchanged), so [SKIP] is a known token without favouring any kind of step."""
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    steps = T.split_steps(row["trace"])
    if rng.random() < share:
        masked = R.masked_steps([0.0] * len(steps), float(rng.uniform(0.1, 0.9)), "random", rng)
        steps = R.compress(steps, masked, K.SKIP)
    return T.training_example(tokenizer, row["problem"], T.join_steps(steps), row["trace_answer"])


# ----------------------------------------------------------------------------- shared by train/evaluate
def _load(job, dataset: str, seed: int, sft_dir: Path | None = None):
    from iclr26.core.lm import model as M
    from iclr26.core.lm import tokenizer as K

    M.configure_torch(job.cfg.get("threads", 1))
    if job.cfg["data"][dataset]["source"] == "hub":
        spec = job.cfg["model"]
        tokenizer = K.load_tokenizer(spec["source"], spec.get("revision"))
        model = M.build_model(spec if sft_dir is None else {**spec, "source": str(sft_dir)}, tokenizer)
        K.ensure_reasoning_tokens(tokenizer, model)
    else:
        tokenizer = K.load_tokenizer(job.prepared_dir(dataset) / "tokenizer")
        source = sft_dir or job.prepared_dir(dataset) / f"base_s{seed}"
        model = M.build_model({"source": str(source)}, tokenizer)
    return tokenizer, model.eval()


def own_traces(model, tokenizer, rows: list[dict], cfg: dict) -> list[dict]:
    """The model's own greedy traces, split into steps, each step scored by a teacher-forced pass
    (card 07 section 2.1: the entropy under the model that wrote the trace)."""
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    prompts = [T.encode(tokenizer, T.prompt_text(r["problem"])) for r in rows]
    out = G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, cfg["max_new_tokens"])
    stats = G.score(model, [p + t for p, t in zip(prompts, out.tokens)], tokenizer.pad_token_id)
    sep, end = tokenizer.convert_tokens_to_ids(K.SEP), tokenizer.convert_tokens_to_ids(K.END_THINK)
    result = []
    for row, prompt, tokens, ent, lp in zip(rows, prompts, out.tokens, stats["entropy"], stats["logprob"]):
        parsed = T.parse_completion(tokenizer, tokens)
        seq = prompt + tokens
        stop = len(prompt) + (tokens.index(end) if end in tokens else len(tokens))
        spans = G.step_spans(seq, len(prompt), stop, sep)
        steps = [tokenizer.decode(seq[lo:hi]) for lo, hi in spans]
        scores = [R.step_score(ent[lo:hi], lp[lo:hi], cfg["step_score"]) for lo, hi in spans]
        result.append({**row, "steps": steps, "scores": scores, "own_answer": parsed["answer"],
                       "correct": parsed["answer"] == row["answer"]})
    return result


def _answers_after_prefill(model, tokenizer, problems: list[str], thinkings: list[str]) -> list[str]:
    """Prefill `problem <think> thinking </think> ans` and decode the answer token greedily (section 2.2)."""
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import traces as T

    prompts = [T.encode(tokenizer, f"{T.prompt_text(p)} {t} {T.answer_text('')}") for p, t in zip(problems, thinkings)]
    out = G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, max_new_tokens=1)
    return [tokenizer.decode(t[:1]).strip() for t in out.tokens]


# ----------------------------------------------------------------------------- train (Stage B SFT)
def train(job) -> dict:
    cfg = job.cfg
    if job.method not in cfg["train"]["sft_methods"]:
        return {"note": f"{job.method}: no SFT arm (Stage A only)"}
    from iclr26.core.lm import model as M
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    rule, kappa = _sft_rule(job.method, cfg)
    metrics = {}
    for seed in job.seeds:
        tokenizer, model = _load(job, MAIN, seed)
        rows = read_jsonl(job.raw_dir(MAIN) / "train.jsonl")[: cfg["train"]["n_problems"]]
        own = own_traces(model, tokenizer, rows, cfg["method"])
        kept = [t for t in own if t["correct"]] or own  # smoke-scale models get none right
        rng = np.random.default_rng(seed)
        examples = [T.training_example(tokenizer, t["problem"], T.join_steps(
            R.compress(t["steps"], R.masked_steps(t["scores"], kappa, rule, rng), K.SKIP)), t["own_answer"])
            for t in kept]
        sft = cfg["train"]
        losses = M.train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tokenizer.pad_token_id,
                            sft["steps"], sft["batch_size"], sft["lr"], seed, warmup=sft.get("warmup", 10), log=job.log)
        model.save_pretrained(job.out_dir / f"sft_s{seed}")
        metrics[f"s{seed}"] = {"sft_examples": len(examples), "own_accuracy": float(np.mean([t["correct"] for t in own])), "final_loss": float(np.mean(losses[-10:]))}
    return metrics


def _sft_rule(method: str, cfg: dict) -> tuple[str, float]:
    # full_cot fine-tunes on uncompressed traces (kappa 0): the data-matched control
    return ("low_entropy", 0.0) if method == "full_cot" else (method, float(cfg["train"]["sft_kappa"]))


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    records = []
    for dataset in job.paper.datasets:
        if job.cfg["data"][dataset].get("skip_at_this_scale"):
            continue
        for seed in job.seeds:
            records += _stage_a(job, dataset, seed)
    if job.method in job.cfg["train"]["sft_methods"]:
        for seed in job.seeds:
            records.append(_stage_b(job, seed))
    return {"records": records}


def _stage_a(job, dataset: str, seed: int) -> list[dict]:
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    cfg = job.cfg
    tokenizer, model = _load(job, dataset, seed)
    rows = read_jsonl(job.raw_dir(dataset) / "test.jsonl")
    traces = own_traces(model, tokenizer, rows, cfg["method"])
    kappas = [0.0] if job.method == "full_cot" else cfg["method"]["kappas"]
    rule = "low_entropy" if job.method == "full_cot" else job.method  # at kappa 0 every rule is the full CoT
    records, base_acc = [], None
    for kappa in kappas:
        rng = np.random.default_rng([seed, int(round(kappa * 100))])
        compressed = [R.compress(t["steps"], R.masked_steps(t["scores"], kappa, rule, rng), K.SKIP) for t in traces]
        answers = _answers_after_prefill(model, tokenizer, [t["problem"] for t in traces],
                                         [T.join_steps(c) for c in compressed])
        acc = float(np.mean([a == t["answer"] for a, t in zip(answers, traces)]))
        base_acc = acc if kappa == 0 else base_acc
        kept_tokens = [len(T.join_steps(c).split()) for c in compressed]  # word-level: one token per word
        records.append({"seed": seed, "dataset": dataset, "stage": "prune", "kappa": float(kappa),
                        "accuracy": acc, "acc_drop": acc - base_acc if base_acc is not None else float("nan"),
                        "thinking_tokens": float(np.mean(kept_tokens)), "n": len(traces),
                        "steps_per_trace": float(np.mean([len(t["steps"]) for t in traces]))})
    return records


def _stage_b(job, seed: int) -> dict:
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm import traces as T

    tokenizer, model = _load(job, MAIN, seed, sft_dir=job.out_dir / f"sft_s{seed}")
    rows = read_jsonl(job.raw_dir(MAIN) / "test.jsonl")
    prompts = [T.encode(tokenizer, T.prompt_text(r["problem"])) for r in rows]
    out = G.generate(model, prompts, tokenizer.pad_token_id, tokenizer.eos_token_id, job.cfg["method"]["max_new_tokens"])
    parsed = [T.parse_completion(tokenizer, t) for t in out.tokens]
    ratios = [R.skip_ratio(T.split_steps(p["thinking"]), K.SKIP) for p in parsed]
    return {"seed": seed, "dataset": MAIN, "stage": "sft", "kappa": float(_sft_rule(job.method, job.cfg)[1]),
            "accuracy": float(np.mean([p["answer"] == r["answer"] for p, r in zip(parsed, rows)])),
            "thinking_tokens": float(np.mean([p["thinking_tokens"] for p in parsed])),
            "skip_ratio": float(np.mean(ratios)), "n": len(rows)}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import PAPER

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prune = records[records["stage"] == "prune"]
    datasets = [d for d in PAPER.datasets if (prune["dataset"] == d).any()]
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for method in PAPER.methods:
            rows = prune[(prune["dataset"] == dataset) & (prune["method"] == method)]
            if rows.empty:
                continue
            curve = rows.groupby("kappa")["accuracy"].agg(["mean", "std"]).reset_index()
            ax.errorbar(curve["kappa"], curve["mean"], yerr=curve["std"].fillna(0), marker="o", capsize=3,
                        label=f"{method} (n={rows['seed'].nunique()} seeds)")
        ax.set(title=f"accuracy vs mask ratio ({dataset})", xlabel="mask ratio kappa", ylabel="answer accuracy",
               ylim=(-0.02, 1.02))
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "accuracy_vs_mask_ratio.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
