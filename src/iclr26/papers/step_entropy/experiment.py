"""Stages of card 07, "Compressing LLM Chain-of-Thought via Step Entropy" (arXiv 2508.03346).

acquire   tiny: seeded chain-arithmetic problems with redundant steps (core.lm.traces), written as
          DeepScaleR-schema rows {problem, answer, trace}; full: the hub files of the config
          (core.lm.benchmarks), as {problem, answer} rows.
prepare   the reasoning model and its own traces, which every method shares. tiny: the tokenizer and,
          per seed, the model the paper takes pretrained (a Qwen2 trained from scratch on the teacher
          traces, 20% with random [SKIP] steps so the token is in distribution); full: model.source.
          Then, per seed, the model writes its own traces on the test problems (Stage A) and on the
          SFT problems (Stage B); each step gets its entropy from the distributions it was sampled
          from (section 2.1: the entropy under the model that wrote the trace).
train     Stage B (section 2.3): the own correct training traces are compressed at kappa = sft_kappa by
          this method's rule and the model is fine-tuned on them (full_cot: on the uncompressed
          traces). GRPO is not run (config note).
evaluate  Stage A (Fig. 1): for every kappa the rule replaces floor(kappa n) steps of each own test
          trace by [SKIP]; the compressed thinking is prefilled, closed with `</think>`, and the answer
          decoded greedily. Stage B: the fine-tuned model answers from the bare prompt; accuracy,
          thinking tokens, skip ratio.
One job = one method x all seeds (seed_batch); the same seed gives the same model and own traces to
every method, so methods are paired by seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.errors import ConfigError
from iclr26.core.io import read_jsonl, write_jsonl

from . import method as R

# Deviation, at full scale only: the official code ends a step only at a token that is exactly
# "\n\n" (calculate_average_token_entropy_per_sentence), so a step ending in a merged ".\n\n" token
# joins the next; core.lm.formats splits at every blank line in the text. [SKIP] is written as text,
# as the official code writes it.

MAIN = "reasoning"          # the dataset of the headline (Stage A + B); others are Stage A ablations


# ----------------------------------------------------------------------------- acquire, prepare
def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec.get("skip_at_this_scale"):
        return {"note": f"{job.dataset} is not run at this scale"}
    if spec["source"] == "hub":
        from iclr26.core.lm.benchmarks import fetch_splits

        return fetch_splits(spec["splits"], job.out_dir)
    if spec["source"] != "chains":
        raise ConfigError(f"data.{job.dataset}.source must be chains or hub, got {spec['source']!r}")
    from iclr26.core.lm import traces as T

    return T.write_splits(spec, job.out_dir, {"train": spec["n_train"], "test": spec["n_test"]})


def prepare(job) -> dict:
    cfg = job.cfg
    if cfg["data"][job.dataset].get("skip_at_this_scale"):
        return {"note": f"{job.dataset} is not run at this scale"}
    info = {}
    if not cfg["model"].get("source"):
        from iclr26.core.lm.base import train_base_models

        def examples_for(fmt, rows, seed):
            rng = np.random.default_rng(seed)
            return [_skip_augmented(fmt, row, cfg["base"]["skip_augment"], rng) for row in rows]

        info = train_base_models(job, examples_for)
    splits = {"test": None}
    if job.dataset == MAIN:
        splits["train"] = cfg["train"]["n_problems"]
    for seed in cfg["seeds"]:
        model, fmt = _load(job, seed, prepared=job.out_dir)
        for split, n in splits.items():
            rows = read_jsonl(job.raw_dir() / f"{split}.jsonl")[:n]
            own = own_traces(model, fmt, rows, cfg["method"], seed)
            write_jsonl(job.out_dir / f"own_{split}_s{seed}.jsonl", own)
            info[f"s{seed}_own_{split}_accuracy"] = float(np.mean([t["correct"] for t in own]))
    return info


def _skip_augmented(fmt, row: dict, share: float, rng) -> tuple[list[int], int]:
    """The teacher trace; with probability `share`, a random kappa ~ U(0.1, 0.9) of its steps become
    [SKIP] (answer unchanged), so [SKIP] is a known token without favouring any kind of step."""
    from iclr26.core.lm import tokenizer as K

    steps = fmt.split_steps(row["trace"])
    if rng.random() < share:
        masked = R.masked_steps([0.0] * len(steps), float(rng.uniform(0.1, 0.9)), "random", rng)
        steps = R.compress(steps, masked, K.SKIP)
    return fmt.training_example(row["problem"], fmt.join_steps(steps), row["trace_answer"])


# ----------------------------------------------------------------------------- shared by the stages
def _load(job, seed: int, prepared: Path | None = None, sft_dir: Path | None = None):
    """(model, format): the fine-tuned model in sft_dir, else the seed's base model (tiny) or the
    pretrained model.source (full; [SKIP] is text there, as the official code writes it)."""
    from iclr26.core.lm import model as M
    from iclr26.core.lm import tokenizer as K
    from iclr26.core.lm.formats import make_format

    cfg = job.cfg
    M.configure_torch(cfg.get("threads", 1))
    device = M.pick_device(cfg.get("device"))
    spec = cfg["model"]
    prepared = prepared or job.prepared_dir(MAIN)
    if sft_dir is not None:
        tokenizer = K.load_tokenizer(sft_dir / "tokenizer")
        model = M.build_model({**spec, "source": str(sft_dir)}, tokenizer, device=device)
    elif spec.get("source"):
        tokenizer = K.load_tokenizer(spec["source"], spec.get("revision"))
        model = M.build_model(spec, tokenizer, device=device)
    else:
        tokenizer = K.load_tokenizer(prepared / "tokenizer")
        model = M.build_model({"source": str(prepared / f"base_s{seed}")}, tokenizer, device=device)
    return model.eval(), make_format(cfg.get("format"), tokenizer)


def own_traces(model, fmt, rows: list[dict], cfg: dict, seed: int) -> list[dict]:
    """The model's own traces, split into steps, each step scored from the per-token entropies of
    the distributions the tokens were drawn from (card 07 section 2.1)."""
    from iclr26.core.lm import generate as G

    tok = fmt.tokenizer
    out = G.generate(model, [fmt.prompt_ids(r["problem"]) for r in rows], tok.pad_token_id, tok.eos_token_id,
                     cfg["max_new_tokens"], seed=seed, **_sampling(cfg))
    result = []
    for row, tokens, ent, lp in zip(rows, out.tokens, out.entropy, out.logprob):
        parsed = fmt.parse(tokens)
        spans = fmt.step_spans(tokens, 0, fmt.thinking_end(tokens))
        result.append({"problem": row["problem"], "answer": row["answer"], "steps": fmt.step_texts(tokens, spans),
                       "scores": [R.step_score(ent[lo:hi], lp[lo:hi], cfg["step_score"]) for lo, hi in spans],
                       "own_answer": parsed["answer"], "correct": fmt.is_correct(parsed["answer"], row["answer"])})
    return result


def _sampling(cfg: dict) -> dict:
    """Temperature, top-p and generation batch size of a `method` block (greedy when temperature is 0)."""
    return {"temperature": cfg.get("temperature", 0.0), "top_p": cfg.get("top_p", 1.0),
            "batch_size": cfg.get("batch_size", 512)}


def _compress(trace: dict, kappa: float, rule: str, rng) -> tuple[list[str], set[int]]:
    from iclr26.core.lm import tokenizer as K

    masked = R.masked_steps(trace["scores"], kappa, rule, rng)
    return R.compress(trace["steps"], masked, K.SKIP), masked


def _necessary_kept(traces: list[dict], masks: list[set[int]]) -> float:
    """Tiny task only: the share of computation (and reflection) steps that survive the masking;
    these are the steps the answer needs. nan when the traces have none (full scale)."""
    from iclr26.core.lm import traces as T

    shares = []
    for trace, masked in zip(traces, masks):
        needed = [i for i, step in enumerate(trace["steps"]) if T.step_kind(step) in ("comp", "reflect")]
        if needed:
            shares.append(np.mean([i not in masked for i in needed]))
    return float(np.mean(shares)) if shares else float("nan")


def _score_by_kind(traces: list[dict]) -> dict:
    """Tiny task only: mean step score of computation steps and of redundant steps (nan if none)."""
    from iclr26.core.lm import traces as T

    group = {"comp": "comp", "reflect": "comp", "redundant": "redundant"}
    by_kind = {"comp": [], "redundant": []}
    for trace in traces:
        for step, score in zip(trace["steps"], trace["scores"]):
            if T.step_kind(step) in group:
                by_kind[group[T.step_kind(step)]].append(score)
    return {f"score_{k}": float(np.mean(v)) if v else float("nan") for k, v in by_kind.items()}


# ----------------------------------------------------------------------------- train (Stage B SFT)
def train(job) -> dict:
    cfg = job.cfg
    if job.method not in cfg["train"]["sft_methods"]:
        return {"note": f"{job.method}: no SFT arm (Stage A only)"}
    from iclr26.core.lm import model as M

    rule, kappa = _sft_rule(job.method, cfg)
    metrics = {}
    for seed in job.seeds:
        model, fmt = _load(job, seed)
        own = read_jsonl(job.prepared_dir(MAIN) / f"own_train_s{seed}.jsonl")
        kept = [t for t in own if t["correct"]] or own  # smoke-scale models get none right
        rng = np.random.default_rng(seed)
        compressed = [_compress(t, kappa, rule, rng) for t in kept]
        examples = [fmt.training_example(t["problem"], fmt.join_steps(steps), t["own_answer"])
                    for t, (steps, _) in zip(kept, compressed)]
        sft = cfg["train"]
        losses = M.train_lm(model, [e[0] for e in examples], [e[1] for e in examples], fmt.tokenizer.pad_token_id,
                            sft["steps"], sft["batch_size"], sft["lr"], seed, warmup=sft.get("warmup", 10), log=job.log)
        model.save_pretrained(job.out_dir / f"sft_s{seed}")
        # its own folder: beside a model's config.json, AutoTokenizer would rebuild it as that model's class
        fmt.tokenizer.save_pretrained(job.out_dir / f"sft_s{seed}" / "tokenizer")
        metrics[f"s{seed}"] = {"sft_examples": len(examples), "own_accuracy": float(np.mean([t["correct"] for t in own])),
                               "necessary_kept": _necessary_kept(kept, [m for _, m in compressed]),
                               "final_loss": float(np.mean(losses[-10:]))}
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
    from iclr26.core.lm import generate as G

    cfg = job.cfg
    model, fmt = _load(job, seed, prepared=job.prepared_dir(dataset))
    tok = fmt.tokenizer
    traces = read_jsonl(job.prepared_dir(dataset) / f"own_test_s{seed}.jsonl")
    kappas = [0.0] if job.method == "full_cot" else cfg["method"]["kappas"]
    rule = "low_entropy" if job.method == "full_cot" else job.method  # at kappa 0 every rule is the full CoT
    by_kind = _score_by_kind(traces)
    records, base_acc = [], None
    for kappa in kappas:
        rng = np.random.default_rng([seed, int(round(kappa * 100))])
        compressed = [_compress(t, kappa, rule, rng) for t in traces]
        thinking = [fmt.join_steps(steps) for steps, _ in compressed]
        out = G.generate(model, [fmt.prefill_ids(t["problem"], th) for t, th in zip(traces, thinking)],
                         tok.pad_token_id, tok.eos_token_id, max_new_tokens=fmt.answer_tokens,
                         seed=seed, **_sampling(cfg["method"]))   # the code samples the answer as it sampled the trace
        answers = [fmt.answer_after_prefill(g) for g in out.tokens]
        acc = float(np.mean([fmt.is_correct(a, t["answer"]) for a, t in zip(answers, traces)]))
        base_acc = acc if kappa == 0 else base_acc
        records.append({"seed": seed, "dataset": dataset, "stage": "prune", "kappa": float(kappa),
                        "accuracy": acc, "acc_drop": acc - base_acc if base_acc is not None else float("nan"),
                        "thinking_tokens": float(np.mean([len(fmt.encode(th)) for th in thinking])),
                        "necessary_kept": _necessary_kept(traces, [m for _, m in compressed]),
                        **by_kind, "n": len(traces),
                        "steps_per_trace": float(np.mean([len(t["steps"]) for t in traces]))})
    return records


def _stage_b(job, seed: int) -> dict:
    from iclr26.core.lm import generate as G
    from iclr26.core.lm import tokenizer as K

    cfg = job.cfg
    model, fmt = _load(job, seed, sft_dir=job.out_dir / f"sft_s{seed}")
    tok = fmt.tokenizer
    rows = read_jsonl(job.raw_dir(MAIN) / "test.jsonl")
    out = G.generate(model, [fmt.prompt_ids(r["problem"]) for r in rows], tok.pad_token_id, tok.eos_token_id,
                     cfg["method"]["max_new_tokens"], seed=seed, **_sampling(cfg["method"]))
    parsed = [fmt.parse(t) for t in out.tokens]
    ratios = [R.skip_ratio(fmt.split_steps(p["thinking"]), K.SKIP) for p in parsed]
    diagnosis = {}
    if cfg["data"][MAIN]["source"] == "chains":  # how many computation steps the model still writes
        from iclr26.core.lm import traces as T

        diagnosis["comp_steps"] = float(np.mean([sum(T.step_kind(s) in ("comp", "reflect") for s in
                                                     fmt.split_steps(p["thinking"])) for p in parsed]))
    return {**diagnosis, "seed": seed, "dataset": MAIN, "stage": "sft", "kappa": float(_sft_rule(job.method, cfg)[1]),
            "accuracy": float(np.mean([fmt.is_correct(p["answer"], r["answer"]) for p, r in zip(parsed, rows)])),
            "thinking_tokens": float(np.mean([p["thinking_tokens"] for p in parsed])),
            "skip_ratio": float(np.mean(ratios)), "n": len(rows)}


# ----------------------------------------------------------------------------- figures
def figures(cfg: dict, records, out_dir) -> list[Path]:
    from iclr26.core.figures import pyplot, save

    from . import PAPER

    plt = pyplot()
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
    return [save(fig, Path(out_dir) / "accuracy_vs_mask_ratio.png")]
