"""Stages of card 04, "Comparing the learning dynamics of in-context learning and fine-tuning in
language models" (OpenReview cJAtzOcAnd).

    acquire   the evaluation tasks, from the seeded generator (synthetic at every scale, as in the
              paper): pro- and anti-prior 2-D linear tasks per seed                  -> tasks.jsonl
    prepare   the pretrained models both learners start from: tiny/smoke pretrain a small Qwen2 on
              prior-carrying tasks, one for every seed when pretrain.seed is set (as the paper starts
              from one LM), else one per seed (audit finding 2), and save_pretrained each; full uses
              the hub LM (nothing to do here)
    train     one unit per (seed, k): the method (icl | sft) learns each task from its k shots and
              answers its queries; per task: accuracy, confidence, label-axis variance fraction,
              layer-wise probe R^2 (analysis.py)                                       -> units/*.json
    evaluate  one record per (seed, k): task means, pro and anti tasks apart (numpy only)

ICL has a train job too: its "learning" is the forward pass with the shots in context, and running
both learners through the same job keeps their measurements on one code path.
"""
from __future__ import annotations

from pathlib import Path

from iclr26.core.io import read_json, write_json, write_jsonl

from . import analysis, data

DATASET = "tasks"
MODEL_DIR = "model"   # prepare's save_pretrained directory (tiny, smoke)


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    rows = data.generate_tasks(spec, job.cfg["seeds"])
    write_jsonl(job.out_dir / "tasks.jsonl", rows)
    return {"tasks": len(rows), "seeds": job.cfg["seeds"], "grid": spec["grid"]}


def prepare(job) -> dict:
    import shutil

    spec = job.cfg["data"][job.dataset]
    shutil.copyfile(job.raw_dir() / "tasks.jsonl", job.out_dir / "tasks.jsonl")
    if job.cfg["model"].get("source"):   # a hub LM is the pretrained model: nothing to pretrain
        return {"model": job.cfg["model"]["source"], "revision": job.cfg["model"].get("revision")}
    from . import model as tiny

    seeds = sorted({pretrain_seed(job.cfg, int(s)) for s in job.cfg["seeds"]})
    nets, tokenizer, losses = tiny.pretrain(job.cfg["model"], job.cfg["pretrain"], job.cfg["format"],
                                            int(spec["grid"]), seeds, log=job.log)
    tiny.check_tiny_serialisation(tokenizer, job.cfg["format"], int(spec["grid"]))
    for seed, net in zip(seeds, nets):
        net.save_pretrained(job.out_dir / MODEL_DIR / f"s{seed}", safe_serialization=True)
        tokenizer.save_pretrained(job.out_dir / MODEL_DIR / f"s{seed}")
    write_json(job.out_dir / "pretrain_loss.json", dict(zip(map(str, seeds), losses)))
    tail = max(1, len(losses[0]) // 10)
    return {"params": sum(p.numel() for p in nets[0].parameters()),
            "final_loss": {str(s): sum(c[-tail:]) / tail for s, c in zip(seeds, losses)}}


def pretrain_seed(cfg: dict, seed: int) -> int:
    """The seed of the tiny pretrained model a run starts from: pretrain.seed when set (one model for
    every seed, as the paper starts from one pretrained LM; a seed then redraws the tasks, shots,
    queries and the SFT's randomness), else the run's own seed (one model per seed)."""
    shared = (cfg.get("pretrain") or {}).get("seed")
    return seed if shared is None else int(shared)


def model_source(job, seed: int) -> str:
    """The hub LM (full: one for every seed), or the seed's pretrained tiny model (pretrain_seed)."""
    return job.cfg["model"].get("source") or str(
        job.prepared_dir(DATASET) / MODEL_DIR / f"s{pretrain_seed(job.cfg, seed)}")


def units_of(cfg: dict, seeds: list[int]) -> dict[str, tuple[int, int]]:
    return {f"s{seed}_k{k}": (seed, int(k)) for seed in seeds for k in cfg["eval"]["ks"]}


def make_learners(cfg: dict, source: str, method: str, seed: int, device: str):
    """The Learners of one pretrained model (loaded from `source`), ready for `method`."""
    from . import model as lm
    from .learners import Learners, prepare_for_sft

    spec, train_cfg = cfg["model"], cfg["train"]
    dtype = "bfloat16" if train_cfg["precision"] == "bf16" else "float32"
    net, tokenizer = lm.load(source, spec.get("revision"), dtype, device, spec["attn_implementation"])
    if not spec.get("source"):   # the tiny model reads its text exactly as it was pretrained on it
        lm.check_tiny_serialisation(tokenizer, cfg["format"], int(cfg["data"][DATASET]["grid"]))
    if method == "sft":
        net = prepare_for_sft(net, train_cfg, seed)
    return Learners(net, tokenizer, cfg["format"], train_cfg, device)


def answer(learners, method: str, tasks: list[dict], k: int) -> list:
    """(probs, hidden, readout) of every task after `method` learned it from its first k shots."""
    return learners.sft_tasks(tasks, k) if method == "sft" else [learners.icl(t, k) for t in tasks]


def train(job) -> dict:
    from iclr26.core.runtime import pick_device

    device = pick_device(job.cfg.get("device"))
    alphas = [float(a) for a in job.cfg["eval"]["probe_alphas"]]
    tasks = data.load_tasks(job.prepared_dir(DATASET) / "tasks.jsonl")
    loaded: dict = {}

    def learners_of(seed: int):
        source = model_source(job, seed)
        if source not in loaded:   # full: one hub model for every seed; tiny: one model per seed
            loaded.clear()
            loaded[source] = make_learners(job.cfg, source, job.method, seed, device)
        return loaded[source]

    def unit(key: str) -> dict:
        seed, k = units[key]
        mine = [t for t in tasks if t["seed"] == seed]
        answers = answer(learners_of(seed), job.method, mine, k)
        out = [analysis.task_measures(task, probs, hidden, readout, alphas)
               for task, (probs, hidden, readout) in zip(mine, answers)]
        job.log(f"{key}: acc {sum(t['acc'] for t in out) / len(out):.3f}")
        return {"tasks": out}

    units = units_of(job.cfg, job.seeds)
    done = job.units(units, unit)
    return {"units": len(done)}


def evaluate(job) -> dict:
    records = []
    for key, (seed, k) in units_of(job.cfg, job.seeds).items():
        result = read_json(job.out_dir / "units" / f"{key}.json")["result"]
        records.append(analysis.record(seed, k, result["tasks"]))
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
