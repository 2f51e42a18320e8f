"""Full scale of card 11 (PC Agent-E): the released trajectories, LoRA SFT of Qwen2.5-VL, WAA-V2.

    acquire   (a CPU node with internet) the released trajectories `henryhe0123/PC-Agent-E` at a
              pinned dataset commit, its archives extracted; WAA-V2's task list `test_all.json`
              (sha256-pinned, GAIR-NLP/WindowsAgentArena-V2 at a pinned commit); the base model
              snapshot (core.acquire.snapshot_model, pinned commit)
    prepare   the official `postprocess/prepare.py` examples from the raw PC Tracker layout the
              dataset ships (`events*/` folders: `*task*.jsonl` one JSON object per human step with
              `action`, `screenshot`, `thought`, `boost_responses`; the sibling `.md` whose second
              line holds the task): per human step one example for the human response (thought +
              action) and, in the boost arm, one per boost response kept by the official filters
              (data.keep_boost / data.split_response: the same filters the tiny scale applies);
              every example's history holds the earlier HUMAN responses only, boost branches are
              never executed. Writes <arm>.jsonl ({"messages": [user, assistant], "images": [path]})
    train     LoRA SFT (peft) of the base model on the arm's examples: loss on the assistant response
              only, the vision tower frozen (LoRA only on the language model's projections), AdamW,
              cosine schedule with warmup (train/sft.yaml's lr schedule), `train.epochs` epochs;
              across the job's GPUs with FSDP (accelerate, through core.distributed); the adapters,
              optimiser, scheduler and step checkpointed (a retry resumes)
    evaluate  checks its inputs (the trained adapters, the WAA-V2 task list and its 141-task column
              sizes, a WAA-V2 checkout with every task JSON, the VM snapshot) and raises one line
              saying what a cluster must provide: WAA-V2 runs each task in a Windows 11 VM (Docker
              + KVM, the 32 GB snapshot per worker), which a Slurm GPU node does not give.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from iclr26.core.errors import DataError

from . import data
from .data import find_tasks, read_steps, task_description  # the one step reader of both scales

DATASET = "minidesk"
ARMS = ("human_only", "boost")
# WAA-V2's task-list domains -> the paper's columns (card 11 section 4: LibreOffice = writer + calc,
# System = file_explorer + settings, Utils = paint + clock + calculator + notepad)
COLUMNS = {"libreoffice_writer": "libreoffice", "libreoffice_calc": "libreoffice", "chrome": "chrome",
           "msedge": "edge", "file_explorer": "system", "settings": "system", "vs_code": "vs_code", "vlc": "vlc",
           "microsoft_paint": "utils", "clock": "utils", "windows_calc": "utils", "notepad": "utils"}
# Our wording of the agent's instruction (the official AGENT_PROMPT is not copied): the paper's
# unified 12-action space and its "thought, blank line, Action:" response format (card 11 section 2).
AGENT_PROMPT = (
    "You are an agent that operates a Windows computer through its screen, one action per step. "
    "The screen is 1280x720 pixels. Available actions:\n"
    "click (x, y)\nright click (x, y)\ndouble click (x, y)\ndrag from (x1, y1) to (x2, y2)\n"
    "scroll (dy)  (positive scrolls up)\npress key: k\nhotkey (k1, k2)\nhotkey (k1, k2, k3)\n"
    "type text: s\nwait\nfinish\nfail\n"
    "Answer with your thought, then a blank line, then 'Action: <one action>'.\n\n")
WAA_NEEDS = ("WAA-V2 evaluation needs a KVM-capable host with Docker (image windowsarena/winarena-v2 built "
             "from GAIR-NLP/WindowsAgentArena-V2 at the pinned commit), the 32 GB Windows 11 snapshot "
             "henryhe0123/WAA-V2-win11-snapshot (one copy per concurrent worker), the trained model served "
             "over an OpenAI-compatible endpoint and a GPT-4o key for the initial-state check; a Slurm GPU node "
             "provides none of these: run WAA-V2 on such a host and write its per-task results to "
             "{results} ({{task id: 0 or 1}}, one file per trial seed)")


def is_full(cfg: dict) -> bool:
    return cfg["data"][DATASET]["source"] == "hub"


# ----------------------------------------------------------------------------- acquire
def acquire(job) -> dict:
    from iclr26.core.acquire import download_pinned, snapshot_model

    spec, out = job.cfg["data"][DATASET], job.out_dir
    where = out / "trajectories"
    source = Path(spec["hub_id"])
    if source.is_dir():   # a local mirror of the dataset repository (tests; a copy fetched beforehand)
        shutil.copytree(source, where, dirs_exist_ok=True)
    else:
        from huggingface_hub import snapshot_download

        revision = spec.get("revision") or ""
        if len(revision) != 40:
            raise DataError(f"dataset {spec['hub_id']}: revision must be a 40-hex commit, got {revision!r}")
        try:
            snapshot_download(spec["hub_id"], repo_type="dataset", revision=revision, local_dir=str(where),
                              **({"endpoint": spec["endpoint"]} if spec.get("endpoint") else {}))
        except Exception as err:  # the hub client raises many types: one line naming the dataset
            raise DataError(f"cannot download dataset {spec['hub_id']} at {revision}: "
                            f"{str(err).strip().splitlines()[0]}") from None
    for archive in sorted(where.rglob("*.zip")):   # the trajectories ship as archives of events* folders
        target = archive.with_suffix("")
        if not target.exists():
            with zipfile.ZipFile(archive) as z:
                z.extractall(target)
    tasks = find_tasks(where)
    if not tasks:
        raise DataError(f"dataset {spec['hub_id']}: no events*/*task*.jsonl with its .md under {where}")
    waa = download_pinned(spec["waa"]["test_all"], out / "waa" / "test_all.json")
    info = {"trajectories": len(tasks), "steps": sum(len(read_steps(j)) for j, _ in tasks),
            "waa_test_all": waa, "waa_columns": waa_columns(out / "waa" / "test_all.json")}
    model = job.cfg["model"]
    if not Path(model["source"]).exists():
        info["model"] = snapshot_model(model)
    return info


def waa_columns(test_all: Path) -> dict[str, int]:
    """Task ids per paper column in WAA-V2's test_all.json (domains outside COLUMNS count as 'other')."""
    counts: dict[str, int] = {}
    for domain, ids in json.loads(Path(test_all).read_text()).items():
        col = COLUMNS.get(domain, "other")
        counts[col] = counts.get(col, 0) + len(ids)
    return counts


# ----------------------------------------------------------------------------- prepare
def normalise_action(action: str) -> str:
    """prepare.py: the recorder's 'press key k' becomes the action space's 'press key: k'."""
    return action.replace("press key", "press key:", 1) if action.startswith("press key") and not \
        action.startswith("press key:") else action


def instruction(task: str, history: list[str]) -> str:
    shown = "".join(f"\nStep {i + 1}: {h}" for i, h in enumerate(history)) or " None"
    return (AGENT_PROMPT + f"Your task is: {task}\n\nHistory of the previous actions and thoughts you have done to "
            f"reach the current screen:{shown}\n\n--------------------------------------------\n\n"
            "Given the screenshot. What's the next step that you will do to help with the task?<image>")


def sft_examples(tasks: list[tuple[Path, Path]], boost: bool, boost_count: int) -> tuple[list[dict], dict]:
    """prepare.py's examples for one arm, and counts (human steps, boost responses seen and kept)."""
    examples, n = [], {"tasks": 0, "human_steps": 0, "human_kept": 0, "boost_seen": 0, "boost_kept": 0}
    for jsonl, md in tasks:
        task = task_description(md)
        if not task:
            continue
        n["tasks"] += 1
        history = []
        for step in read_steps(jsonl):
            action = normalise_action(step["action"])
            image = str(jsonl.parent / step["screenshot"])
            prompt = instruction(task, history)
            n["human_steps"] += 1
            if boost:
                for text in (step.get("boost_responses") or [])[:boost_count]:
                    n["boost_seen"] += 1
                    if data.keep_boost(text, action):
                        thought, alt = data.split_response(text)
                        examples.append(_example(prompt, data.response(thought, alt), image))
                        n["boost_kept"] += 1
            human = data.split_response(data.response(step.get("thought") or "", action))
            if human is not None:
                text = data.response(*human)
                examples.append(_example(prompt, text, image))
                history.append(text)
                n["human_kept"] += 1
    return examples, n


def _example(prompt: str, response: str, image: str) -> dict:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
            "images": [image]}


def prepare(job) -> dict:
    cfg = job.cfg
    tasks = find_tasks(job.raw_dir(DATASET) / "trajectories")
    out = {}
    for arm in ARMS:
        examples, counts = sft_examples(tasks, arm == "boost", cfg["boost"]["count"])
        if arm == "boost" and counts["boost_seen"] == 0:
            raise DataError("the released trajectories carry no boost_responses: Trajectory Boost needs the "
                            "teacher (Claude 3.7 Sonnet, an API key) to run postprocess/boost.py first")
        with open(job.out_dir / f"{arm}.jsonl", "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        out[arm] = {"examples": len(examples), **counts}
        job.log(f"{arm}: {out[arm]}")
    return out


# ----------------------------------------------------------------------------- train
QWEN_TEMPLATE = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                 "<|vision_start|><|image_pad|><|vision_end|>{prompt}<|im_end|>\n<|im_start|>assistant\n")


def encode(processor, example: dict):
    """input_ids, labels (-100 on the prompt: loss on the assistant response only) and the image
    inputs of one example, in Qwen2.5-VL's chat layout (LLaMA-Factory's qwen2_vl template)."""
    from PIL import Image

    image = Image.open(example["images"][0]).convert("RGB")
    prompt = QWEN_TEMPLATE.format(prompt=example["messages"][0]["content"].replace("<image>", ""))
    answer = example["messages"][1]["content"] + "<|im_end|>\n"
    enc = processor(text=[prompt], images=[image], return_tensors="pt")
    ans = processor.tokenizer(answer, add_special_tokens=False, return_tensors="pt")["input_ids"]
    import torch

    ids = torch.cat([enc["input_ids"], ans], 1)
    labels = ids.clone()
    labels[:, :enc["input_ids"].shape[1]] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}


def _fsdp_env(t: dict) -> None:
    """FSDP through accelerate's own switches (what `accelerate launch --use_fsdp` sets): shard the
    frozen 72B weights over the job's GPUs, wrap each decoder layer."""
    if t.get("sharding") == "fsdp":
        os.environ.setdefault("ACCELERATE_USE_FSDP", "true")
        os.environ.setdefault("FSDP_SHARDING_STRATEGY", "FULL_SHARD")
        os.environ.setdefault("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP")
        os.environ.setdefault("FSDP_TRANSFORMER_CLS_TO_WRAP", "Qwen2_5_VLDecoderLayer,Qwen2_5_VLVisionBlock")
        os.environ.setdefault("FSDP_USE_ORIG_PARAMS", "true")
        os.environ.setdefault("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
        # rank 0 alone reads the 72B weights into CPU memory (the others build on the meta device),
        # FSDP broadcasts them: 8 full copies would need ~1.2 TB of host memory
        os.environ.setdefault("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
        os.environ.setdefault("FSDP_SYNC_MODULE_STATES", "true")


def load_model(cfg: dict, device: str):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from iclr26.core.acquire import from_pretrained, model_path

    t = cfg["train"]
    where = model_path(cfg["model"])
    dtype = torch.bfloat16 if t.get("precision", "bf16").startswith("bf16") and device.startswith("cuda") \
        else torch.float32
    model = from_pretrained(Qwen2_5_VLForConditionalGeneration, where, dtype=dtype)
    processor = from_pretrained(AutoProcessor, where)
    lora = t["lora"]
    # LoRA on the language model only: the vision tower stays frozen (train/sft.yaml freeze_vision_tower)
    targets = r".*language_model.*\.(" + "|".join(lora["target_modules"]) + ")"
    model = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                                             target_modules=targets))
    if t.get("activation_checkpointing"):
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model, processor


def train(job) -> dict:
    """One unit per seed block: the arm's LoRA SFT (the trial seeds of the block share it)."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    from iclr26.core.checkpoint import rng_state, set_rng_state
    from iclr26.core.distributed import DataParallel
    from iclr26.core.runtime import pick_device

    cfg, t = job.cfg, job.cfg["train"]
    seed = int(job.seeds[0])
    rows = [json.loads(x) for x in (job.prepared_dir(DATASET) / f"{job.method}.jsonl").read_text().splitlines()]
    if t.get("max_examples"):
        rows = rows[: t["max_examples"]]

    def work(key):
        _fsdp_env(t)
        dp = DataParallel(pick_device(cfg.get("device")))
        torch.manual_seed(seed)
        model, processor = load_model(cfg, str(dp.device))
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=t["lr"], weight_decay=0.0)
        per_step = t["batch_size"]                       # examples per optimizer step (all processes)
        steps = math.ceil(t["epochs"] * len(rows) / per_step)
        sched = get_cosine_schedule_with_warmup(opt, int(t["warmup_ratio"] * steps), steps)
        model, opt = dp.prepare(model, opt)
        rng = np.random.default_rng([seed, 7])
        order = np.concatenate([rng.permutation(len(rows)) for _ in range(math.ceil(t["epochs"]))])
        processor.image_processor.size = {"shortest_edge": t["min_pixels"], "longest_edge": t["max_pixels"]}
        ckpt = job.checkpointer()
        state, start, curve = ckpt.load(), 0, []
        if state is not None:
            unexpected = dp.unwrap(model).load_state_dict(state["adapter"], strict=False).unexpected_keys
            if unexpected:   # a checkpoint whose adapter keys do not match the model: never resume silently
                raise DataError(f"checkpoint adapter keys do not match the model (e.g. {unexpected[0]})")
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
            set_rng_state(state["rng"])
            start, curve = state["step"], list(state["curve"])
            job.log(f"resumed at step {start}")
        for step in range(start, steps):
            mine = order[step * per_step:(step + 1) * per_step][dp.rank::dp.world]
            total, skipped = 0.0, 0
            for i in mine:
                batch = {k: v.to(dp.device) for k, v in encode(processor, rows[int(i)]).items()}
                if batch["input_ids"].shape[1] > t["max_length"]:   # over sft.yaml's cutoff_len: left out
                    skipped += 1
                    continue
                loss = model(**batch).loss / len(mine)
                dp.backward(loss)
                total += float(loss.detach())
            if skipped:
                job.log(f"step {step + 1}: {skipped} example(s) over {t['max_length']} tokens left out")
            dp.accelerator.clip_grad_norm_(model.parameters(), t["grad_clip"])
            opt.step()
            sched.step()
            opt.zero_grad()
            curve.append(dp.mean(total))
            job.log(f"{job.method} step {step + 1}/{steps} loss {curve[-1]:.4f}", every_s=60)
            stop = dp.stop_agreed(ckpt.stop_requested)   # every process stops at the same step
            if ckpt.maybe_save(step + 1, lambda done=step + 1: {
                    "step": done, "opt": opt.state_dict(), "sched": sched.state_dict(), "rng": rng_state(),
                    "curve": curve,
                    "adapter": {k: v for k, v in dp.unwrap(model).state_dict().items() if "lora_" in k}},
                    stop=stop):
                raise SystemExit("stopped on request after a checkpoint")
        dp.wait()
        state_dict = dp.accelerator.get_state_dict(model)   # gathered from the FSDP shards
        if dp.is_main:
            dp.unwrap(model).save_pretrained(job.out_dir / f"adapter_{seed}", state_dict=state_dict)
        ckpt.clear()
        tail = max(1, len(curve) // 10)
        return {"steps": steps, "examples": len(rows), "first_loss": float(np.mean(curve[:tail])),
                "last_loss": float(np.mean(curve[-tail:]))}

    return {"units": job.units([f"{job.method}_{seed}"], work)}


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    """Checks every input WAA-V2 needs, then reads the per-task results a WAA-V2 host wrote, or
    raises one line saying what the cluster must provide."""
    cfg, spec = job.cfg, job.cfg["data"][DATASET]
    test_all = job.raw_dir(DATASET) / "waa" / "test_all.json"
    if not test_all.is_file():
        raise DataError(f"WAA-V2 task list missing: {test_all} (run acquire)")
    cols = waa_columns(test_all)
    want = dict(spec["test_columns"])
    if job.method not in ("base", "teacher"):
        adapter = job.out_dir / f"adapter_{int(job.seeds[0])}"
        if not (adapter / "adapter_config.json").is_file():
            raise DataError(f"no trained adapters at {adapter} (run train)")
    ev = cfg["eval"]
    results = Path(ev["results_dir"]) / job.method
    files = [results / f"trial_{s}.json" for s in job.seeds]
    if not all(f.is_file() for f in files):
        problems = []
        if cols != want:
            problems.append(f"the pinned test_all.json lists {cols}, the paper's columns are {want}")
        examples = Path(ev["waa_dir"]) / "src/win-arena-container/client/evaluation_examples_windows/examples"
        if not examples.is_dir():
            problems.append(f"no WAA-V2 checkout at {ev['waa_dir']}")
        else:
            missing = [f"{d}/{i}" for d, lst in json.loads(test_all.read_text()).items() for i in lst
                       if not (examples / d / f"{i}.json").is_file()]
            if missing:
                problems.append(f"{len(missing)} task files missing in the WAA-V2 checkout (e.g. {missing[0]})")
        note = f" (also: {'; '.join(problems)})" if problems else ""
        raise DataError(WAA_NEEDS.format(results=results) + note)
    ids = {i: COLUMNS.get(d, "other") for d, lst in json.loads(test_all.read_text()).items() for i in lst}
    examples = job.prepared_dir(DATASET) / f"{job.method}.jsonl"
    n_train = float(sum(1 for _ in open(examples))) if job.method in ARMS else 0.0
    records = []
    for seed, f in zip(job.seeds, files):
        outcome = json.loads(f.read_text())
        for col in ("total", *want):
            pick = [v for i, v in outcome.items() if col == "total" or ids.get(i) == col]
            records.append({"seed": int(seed), "app": col, "n_tasks": len(pick),
                            "success": float(100 * np.mean(pick)) if pick else float("nan"), "n_train": n_train})
    return {"records": records}
