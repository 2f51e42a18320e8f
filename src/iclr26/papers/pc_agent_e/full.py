"""Full scale of card 11 (PC Agent-E): the released trajectories, LoRA SFT of Qwen2.5-VL, WAA-V2.

    acquire   (a CPU node with internet) the released trajectories `henryhe0123/PC-Agent-E` at a
              pinned dataset commit, its archives extracted, checked to hold the release's 312
              trajectories / 4,503 steps; WAA-V2's task list `test_all.json` (sha256-pinned,
              GAIR-NLP/WindowsAgentArena-V2 at a pinned commit) and its task JSONs from that commit
              (their sha256 recorded); the base model snapshot (core.acquire.snapshot_model)
    prepare   the official `postprocess/prepare.py` examples (GAIR-NLP/PC-Agent-E at 9b1b00b: its
              prompt text AGENT_PROMPT + get_instruction + utils.get_history_str, its filters
              check_boost_response + utils.refine_thought / refine_response) from the raw PC Tracker
              layout the dataset ships (`events*/` folders: `*task*.jsonl` one JSON object per human
              step with `action`, `screenshot`, `thought`, `boost_responses`; the sibling `.md` whose
              second line holds the task): per human step one example per kept boost response (boost
              arm), then one for the human response (thought + action); every example's history holds
              the earlier HUMAN responses only (the last 10), boost branches are never executed.
              Every prompt's one <image> marker and every screenshot are checked before training.
              Writes <arm>.jsonl ({"messages": [user, assistant], "images": [path]})
    train     LoRA SFT (peft) of the base model on the arm's examples in LLaMA-Factory's qwen2_vl layout
              (the screenshot's tokens in place of the prompt's <image>, closing the user turn, as the
              official deploy/utils.py sends text then image): loss on the assistant response
              only, the vision tower frozen (LoRA only on the language model's projections), AdamW,
              cosine schedule with warmup (train/sft.yaml's lr schedule), `train.epochs` epochs;
              across the job's GPUs with FSDP (accelerate, through core.distributed). Every rank
              runs the same passes at every step (step_plan drops the uneven tail on all ranks,
              encode fits an over-length example instead of skipping it), or FSDP's collectives hang.
              The adapters and AdamW state are checkpointed as full tensors through
              torch.distributed.checkpoint's state_dict API (FSDP-safe), with scheduler, step and
              RNG (a retry resumes)
    evaluate  checks its inputs (the trained adapters, the WAA-V2 task list and its 141-task column
              sizes, and at every call, results present or not, a WAA-V2 checkout with every task JSON
              at the sha256 acquire recorded), requires a result for every one of the 141 task ids in
              every trial, and without the results raises one line saying what a cluster must provide:
              WAA-V2 runs each task in a Windows 11 VM (Docker + KVM, the 32 GB snapshot per worker),
              which a Slurm GPU node lacks.
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
# The official training prompt, verbatim: GAIR-NLP/PC-Agent-E at 9b1b00b907b99a4a8dbfc9c01ea49010878dfbd6,
# postprocess/prompt.py AGENT_PROMPT (MIT licence; prepare.py imports it). sha256 of the text:
AGENT_PROMPT_SHA256 = "b8088215d387b841b35fee8b962281c83bc1726a0fceb6c5f0625847fbfe5d55"
AGENT_PROMPT = "\n".join((
    'You are a helpful assistant who can help users complete computer tasks, with **full permission** '
    "to make any operations on the user's computer. The operating system is windows. ",
    'Based on the provided current state, you need to suggest the next action to complete the task. Do '
    'not try to complete the entire task in one step. Break it down into smaller steps, and at each '
    'step you will get a new state to interact with.',
    '',
    'IMPORTANT: You must strictly adhere to the following rules:',
    '1. Choose ONLY ONE action from the list below for each response, DO NOT perform more than one action per step.',
    '2. Follow the exact syntax format for the selected action, DO NOT create or use any actions other '
    'than those listed.',
    '3. Once the task is completed, output action finish.',
    '',
    'Valid actions:',
    '',
    '1. click (x, y)',
    'click the element at the position (x, y) on the screen',
    '',
    '2. right click (x, y)',
    'right click the element at the position (x, y) on the screen',
    '',
    '3. double click (x, y)',
    'double click the element at the position (x, y) on the screen',
    '',
    '4. drag from (x1, y1) to (x2, y2)',
    'drag the element from position (x1, y1) to (x2, y2).',
    '',
    '5. scroll (x)',
    'scroll the screen vertically with pixel offset x. Positive values of x: scroll up, negative values '
    'of x: scroll down.',
    '',
    '6. press key: key_content',
    'press the key key_content on the keyboard.',
    '',
    '7. hotkey (key1, key2)',
    'press the hotkey composed of key1 and key2.',
    '',
    '8. hotkey (key1, key2, key3)',
    'press the hotkey composed of key1, key2, and key3.',
    '',
    '9. type text: text_content',
    'type content text_content on the keyboard.',
    '',
    '10. wait',
    'wait for some time, usually for the system to respond, screen to refresh, advertisement to finish.',
    '',
    '11. finish',
    'indicating that the task has been completed.',
    '',
    '12. fail',
    'indicating that the task has failed, of this task is infeasible because not enough information is provided.',
    '',
    'Response Format: {Your thought process}',
    '',
    'Action: {The specific action you choose to take}',
    '',
    '--------------------------------------------',
    '',
    '',
))
HISTORY_CUT_OFF = 10   # postprocess/utils.py get_history_str: the last 10 responses, numbered from [1]
HISTORY_HEAD = "History of the previous actions and thoughts you have done to reach the current screen: "
HISTORY_TAIL = ("\n\n--------------------------------------------\n\n"
                "Given the screenshot. What's the next step that you will do to help with the task?<image>")
# pyautogui.KEYBOARD_KEYS as postprocess/utils.py lists them (refine_action: a press key outside them is dropped)
KEYBOARD_KEYS = frozenset(list("\t\n\r !\"#$%&'()*+,-./0123456789:;<=>?@[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") + (
    "accept add alt altleft altright apps backspace browserback browserfavorites browserforward browserhome "
    "browserrefresh browsersearch browserstop capslock clear convert ctrl ctrlleft ctrlright decimal del delete "
    "divide down end enter esc escape execute f1 f10 f11 f12 f13 f14 f15 f16 f17 f18 f19 f2 f20 f21 f22 f23 "
    "f24 f3 f4 f5 f6 f7 f8 f9 final fn hanguel hangul hanja help home insert junja kana kanji launchapp1 "
    "launchapp2 launchmail launchmediaselect left modechange multiply nexttrack nonconvert num0 num1 num2 num3 "
    "num4 num5 num6 num7 num8 num9 numlock pagedown pageup pause pgdn pgup playpause prevtrack print "
    "printscreen prntscrn prtsc prtscr return right scrolllock select separator shift shiftleft shiftright "
    "sleep space stop subtract tab up volumedown volumemute volumeup win winleft winright yen command option "
    "optionleft optionright").split())
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
    counts = {"trajectories": len(tasks), "steps": sum(len(read_steps(j)) for j, _ in tasks)}
    expect = dict(spec["expect"])
    if counts != expect:   # the released data: 312 human trajectories, 4,503 steps (card 11 section 1)
        raise DataError(f"dataset {spec['hub_id']}: {counts['trajectories']} trajectories / {counts['steps']} steps "
                        f"under {where}, the release has {expect['trajectories']} / {expect['steps']}")
    waa = download_pinned(spec["waa"]["test_all"], out / "waa" / "test_all.json")
    info = {**counts, "waa_test_all": waa, "waa_columns": waa_columns(out / "waa" / "test_all.json"),
            "waa_tasks": waa_task_files(spec["waa"], out / "waa")}
    model = job.cfg["model"]
    if not Path(model["source"]).exists():
        info["model"] = snapshot_model(model)
    return info


def waa_task_files(waa: dict, out: Path) -> int:
    """Every task JSON of the pinned test_all.json, downloaded from the same pinned commit, each
    checked against its sha256 in the config (waa.tasks, {"domain/id": sha256}); the digests are
    written to waa/tasks.json, against which evaluate checks the WAA-V2 host's checkout. An empty
    waa.tasks (tests) records the digests of what the commit-pinned URLs served."""
    from iclr26.core.acquire import download, download_pinned
    from iclr26.core.io import sha256_file

    pinned, digests = dict(waa.get("tasks") or {}), {}
    keys = [f"{d}/{i}" for d, ids in json.loads((out / "test_all.json").read_text()).items() for i in ids]
    unpinned = [k for k in keys if not pinned.get(k)]
    if pinned and unpinned:
        raise DataError(f"no sha256 pin in data.minidesk.waa.tasks for {len(unpinned)} WAA-V2 task files: "
                        f"{', '.join(unpinned)}")
    base = waa["test_all"]["url"].rsplit("/", 1)[0] + "/examples"
    for key in keys:
        dest = out / "examples" / f"{key}.json"
        if pinned:
            digests[key] = download_pinned({"url": f"{base}/{key}.json", "sha256": pinned[key]}, dest)["sha256"]
        else:
            digests[key] = sha256_file(download(f"{base}/{key}.json", dest, None))
    (out / "tasks.json").write_text(json.dumps(digests, indent=1, sort_keys=True))
    return len(digests)


def task_file_problems(examples: Path, listed: dict, pins: Path) -> list[str]:
    """The WAA-V2 checkout's task JSONs against the sha256 digests acquire recorded."""
    from iclr26.core.io import sha256_file

    digests = json.loads(pins.read_text()) if pins.is_file() else {}
    missing, unpinned, changed = [], [], []
    for d, lst in listed.items():
        for i in lst:
            f = examples / d / f"{i}.json"
            if not f.is_file():
                missing.append(f"{d}/{i}")
            elif not digests.get(f"{d}/{i}"):
                unpinned.append(f"{d}/{i}")
            elif sha256_file(f) != digests[f"{d}/{i}"]:
                changed.append(f"{d}/{i}")
    out = [f"{len(missing)} task files missing in the WAA-V2 checkout: {', '.join(missing)}"] if missing else []
    if unpinned:
        out.append(f"{len(unpinned)} task files have no digest in {pins}: {', '.join(unpinned)}")
    if changed:
        out.append(f"{len(changed)} task files differ from the pinned sha256: {', '.join(changed)}")
    return out


def waa_columns(test_all: Path) -> dict[str, int]:
    """Task ids per paper column in WAA-V2's test_all.json (domains outside COLUMNS count as 'other')."""
    counts: dict[str, int] = {}
    for domain, ids in json.loads(Path(test_all).read_text()).items():
        col = COLUMNS.get(domain, "other")
        counts[col] = counts.get(col, 0) + len(ids)
    return counts


# ----------------------------------------------------------------------------- prepare
def normalise_action(action: str) -> str:
    """prepare.py, verbatim: `if action.startswith("press key"): action = action.replace("press key",
    "press key:")` (the recorder's 'press key k' becomes the action space's 'press key: k'; an action
    already in the colon form would become 'press key:: k' there too: sft_examples counts those)."""
    return action.replace("press key", "press key:") if action.startswith("press key") else action


def history_str(history: list[str]) -> str:
    """postprocess/utils.py get_history_str: the last HISTORY_CUT_OFF responses as '[i] response'
    (numbered from 1 within the window), separated by blank lines; 'None' when there are none."""
    shown = "\n\n".join(f"[{i + 1}] {item}" for i, item in enumerate(history[-HISTORY_CUT_OFF:]))
    return shown or "None"


def instruction(task: str, history: list[str]) -> str:
    """postprocess/prepare.py get_instruction, the same text character for character."""
    return AGENT_PROMPT + f"Your task is: {task}\n\n" + HISTORY_HEAD + history_str(history) + HISTORY_TAIL


def split_history(prompt: str) -> tuple[str, list[str]]:
    """(the prompt up to the history, the history's responses) of an instruction() text."""
    i = prompt.index(HISTORY_HEAD) + len(HISTORY_HEAD)
    j = prompt.rindex(HISTORY_TAIL)
    text, entries, k = prompt[i:j], [], 2
    if text == "None":
        return prompt[:i], []
    text = text[len("[1] "):]
    while (cut := text.find(f"\n\n[{k}] ")) != -1:
        entries.append(text[:cut])
        text, k = text[cut + len(f"\n\n[{k}] "):], k + 1
    return prompt[:i], entries + [text]


# postprocess/utils.py refine_thought / refine_action / refine_response, the filters prepare.py applies
# to the human thoughts and to the boost responses (the tiny scale's data.keep_boost is their MiniDesk form)
UNWANTED = ("{Your thought process}", "Your thought process", "## Thought Process", "# Thought process",
            "#*# Thought Process", "Thought process:", "Thought process", "My thought process:", "My thought process",
            "#\n", "#:\n", ":\n")


def refine_thought(thought: str | None) -> str | None:
    if thought is None or "sorry, I can\'t assist" in thought:
        return None
    thought = thought.replace("**Thought Process:**", "").strip()
    for mark in ("Action:", "*Action*:", "**Action:**"):
        if mark in thought:
            thought = thought.split(mark)[0].strip()
    if thought.startswith("# Thought Process") or thought.startswith("# My Thought Process"):
        if "\n" not in thought:
            return None
        thought = thought[thought.find("\n") + 1:].strip()
    if thought.startswith("{") and thought.endswith("}"):
        thought = thought[1:-1].strip()
    for unwanted in UNWANTED:
        if unwanted in thought:
            thought = thought.replace(unwanted, "").strip()
    return thought if len(thought) >= 15 else None


def valid_action(action: str) -> bool:
    """utils.get_action_code is not None: the 12 actions' syntax, points on the 1280x720 screen."""
    import re

    inside = lambda *v: all(0 <= int(x) < w for x, w in zip(v, (1280, 720, 1280, 720)))  # noqa: E731
    for pattern in (r"click \((-?\d+), (-?\d+)\)", r"right click \((-?\d+), (-?\d+)\)",
                    r"double click \((-?\d+), (-?\d+)\)",
                    r"drag from \((-?\d+), (-?\d+)\) to \((-?\d+), (-?\d+)\)"):
        if m := re.match(pattern, action):
            return inside(*m.groups())
    if re.match(r"scroll \((-?\d+)\)", action):
        return True
    if m := re.match(r"press key: (.+)", action):
        key = m.group(1).lower()
        return "key" not in key and key in KEYBOARD_KEYS
    if m := (re.match(r"hotkey \((.+), (.+), (.+)\)", action) or re.match(r"hotkey \((.+), (.+)\)", action)):
        return not any("key" in k.strip("'").lower() for k in m.groups())
    if m := re.match(r"type text: (.+)", action):
        return "text_content" not in m.group(1).strip("'").strip('"')
    return action in ("wait", "finish", "fail")


def refine_response(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.replace("**Action:**", "Action:").strip().replace("### Action:\nAction:", "Action:").strip()
    at = text.rfind("Action:")
    if at == -1:
        return None
    thought = refine_thought(text[:at].strip())
    action = text[at + len("Action:"):].strip()
    for comment in ("#", "//"):
        action = action.split(comment)[0] if comment in action else action
    action = action.strip()
    if thought is None or not valid_action(action):
        return None
    return data.response(thought, action)


def check_boost_response(text: str | None, action: str) -> bool:
    """prepare.py check_boost_response (REMOVE_NO_FISISH on)."""
    if text is None or (action == "finish" and "finish" not in text):
        return False
    return not any(p in text for p in data.PLACEHOLDER)


def sft_examples(tasks: list[tuple[Path, Path]], boost: bool, boost_count: int) -> tuple[list[dict], dict]:
    """prepare.py process_task_jsonl_file for one arm, and counts (human steps, boost responses seen
    and kept): the boost examples of a step come before its human example, as prepare.py appends them."""
    examples, n = [], {"tasks": 0, "human_steps": 0, "human_kept": 0, "boost_seen": 0, "boost_kept": 0,
                       "press_key_colon": 0}
    for jsonl, md in tasks:
        task = task_description(md)
        if not task:
            continue
        n["tasks"] += 1
        history = []
        for step in read_steps(jsonl):
            n["press_key_colon"] += step["action"].startswith("press key:")   # 'press key:: k' after prepare.py
            action = normalise_action(step["action"])
            image = str(jsonl.parent / step["screenshot"])
            prompt = instruction(task, history)
            n["human_steps"] += 1
            if boost:
                for text in (step.get("boost_responses") or [])[:boost_count]:
                    n["boost_seen"] += 1
                    cleaned = refine_response(text) if check_boost_response(text, action) else None
                    if cleaned is not None:
                        examples.append(_example(prompt, cleaned, image))
                        n["boost_kept"] += 1
            thought = refine_thought(step.get("thought"))
            if thought is not None:
                text = data.response(thought, action)
                examples.append(_example(prompt, text, image))
                history.append(text)
                n["human_kept"] += 1
    return examples, n


def check_examples(examples: list[dict]) -> None:
    """Before training (audit 11c L7): every example's prompt holds one <image> marker (LLaMA-Factory's
    plugin raises otherwise) and every screenshot opens as an image; a bad one stops prepare with one
    line, not one rank in the middle of an FSDP step (the other ranks would wait in a collective)."""
    from PIL import Image

    marks = [i for i, ex in enumerate(examples) if ex["messages"][0]["content"].count(IMAGE_MARK) != 1]
    if marks:
        raise DataError(f"{len(marks)} examples' prompts do not hold exactly one {IMAGE_MARK} marker "
                        f"(the first: example {marks[0]})")
    bad = []
    for path in sorted({ex["images"][0] for ex in examples}):
        try:
            with Image.open(path) as im:
                im.verify()
        except Exception as err:  # PIL raises many types for a missing, truncated or foreign file
            bad.append(f"{path} ({type(err).__name__})")
    if bad:
        raise DataError(f"{len(bad)} screenshots do not open: {', '.join(bad[:5])}")


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
        check_examples(examples)
        with open(job.out_dir / f"{arm}.jsonl", "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        out[arm] = {"examples": len(examples), **counts}
        job.log(f"{arm}: {out[arm]}")
    return out


# ----------------------------------------------------------------------------- train
# LLaMA-Factory's qwen2_vl template (its default system prompt) and its Qwen2VLPlugin: the user message's
# <image> marker is replaced IN PLACE by the vision block (the processor expands <|image_pad|> to the
# image's tokens). get_instruction ends with "...help with the task?<image>", so the screenshot's tokens
# close the user turn, as at inference (deploy/utils.py get_mllm_messages sends the text, then the image)
IMAGE_MARK = "<image>"
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
QWEN_HEADER = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
QWEN_TEMPLATE = QWEN_HEADER + "{prompt}<|im_end|>\n<|im_start|>assistant\n"
IMAGE_TOKEN_PIXELS = 28 * 28   # Qwen2.5-VL: 14 x 14 patches merged 2 x 2 into one token


def user_content(prompt: str) -> str:
    """The user message as LLaMA-Factory's mm plugin builds it: the one <image> marker replaced in place
    (the plugin raises when the markers and the example's images differ in number)."""
    if prompt.count(IMAGE_MARK) != 1:
        raise DataError(f"an example's prompt holds {prompt.count(IMAGE_MARK)} {IMAGE_MARK} markers for its one "
                        f"screenshot: {prompt[:80]!r}...")
    return prompt.replace(IMAGE_MARK, VISION, 1)


def _encode(processor, prompt: str, answer: str, image):
    import torch

    enc = processor(text=[QWEN_TEMPLATE.format(prompt=user_content(prompt))], images=[image], return_tensors="pt")
    ans = processor.tokenizer(answer + "<|im_end|>\n", add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids = torch.cat([enc["input_ids"], ans], 1)
    labels = ids.clone()
    labels[:, :enc["input_ids"].shape[1]] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]}


def encode(processor, example: dict, max_length: int | None = None) -> tuple[dict, dict]:
    """input_ids, labels (-100 on the prompt: loss on the assistant response only) and the image
    inputs of one example, in LLaMA-Factory's qwen2_vl layout (the screenshot's tokens in place of the
    prompt's <image> marker, at the end of the user turn), and how it was fitted to max_length.
    An example over max_length is never skipped (a rank that skips one would run fewer forward passes
    than the others): its oldest history responses are dropped, one at a time, until it fits; if it is
    still too long, TEXT is cut, never the image tokens (Qwen2.5-VL needs every one of them to match the
    image features): the response's tail when the prompt fits (the loss on the kept response tokens, as
    LLaMA-Factory truncates a response), else the prompt text before the screenshot (the chat header
    kept) with one response token and loss weight 0 (it still runs forward and backward). A screenshot
    whose tokens and the chat template alone exceed max_length raises DataError (train checks the bound
    from train.max_pixels before the first step). Deterministic: every rank fits an example the same way."""
    import torch
    from PIL import Image

    image = Image.open(example["images"][0]).convert("RGB")
    prompt, answer = example["messages"][0]["content"], example["messages"][1]["content"]
    batch = _encode(processor, prompt, answer, image)
    fit = {"dropped": 0, "cut": False, "weight": 1.0}
    if not max_length or batch["input_ids"].shape[1] <= max_length:
        return batch, fit
    head, history = split_history(prompt)
    for drop in range(1, len(history) + 1):
        batch = _encode(processor, head + history_str(history[drop:]) + HISTORY_TAIL, answer, image)
        fit["dropped"] = drop
        if batch["input_ids"].shape[1] <= max_length:
            return batch, fit
    fit["cut"] = True
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    n_prompt = int((labels == -100).sum())
    if n_prompt < max_length:   # the prompt fits with at least one response token: cut the response's tail
        for key in ("input_ids", "attention_mask", "labels"):
            batch[key] = batch[key][:, :max_length]
        return batch, fit
    tok = processor.tokenizer
    start = int((ids == tok.convert_tokens_to_ids("<|vision_start|>")).nonzero()[0, 0])
    header = len(tok(QWEN_HEADER, add_special_tokens=False)["input_ids"])
    keep = max_length - 1 - (n_prompt - start)   # text tokens before the screenshot that fit
    if keep < header:
        raise DataError(f"{example['images'][0]}: its {n_prompt - start} image and closing template tokens and "
                        f"the {header}-token chat header exceed train.max_length {max_length} (lower "
                        f"train.max_pixels)")
    ids = torch.cat([ids[:keep], ids[start:n_prompt + 1]])[None]
    labels = torch.full_like(ids, -100)
    labels[:, -1] = ids[:, -1]   # one response token: a zero-weight pass (no NaN loss)
    batch.update(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    fit["weight"] = 0.0
    return batch, fit


def image_fits(t: dict) -> None:
    """Before any step: the largest screenshot train.max_pixels allows (its tokens and vision marks) fits in
    train.max_length, so encode never meets a screenshot it cannot fit (an error on one rank mid-run would
    leave the other ranks waiting in a collective)."""
    tokens = int(t["max_pixels"]) // IMAGE_TOKEN_PIXELS + 2
    if tokens >= int(t["max_length"]):
        raise DataError(f"a screenshot of train.max_pixels {t['max_pixels']} takes up to {tokens} tokens, not "
                        f"under train.max_length {t['max_length']}")


def step_plan(n_rows: int, epochs: float, per_step: int, world: int, seed: int) -> np.ndarray:
    """[steps, per_step] example indices: `epochs` passes over the rows in seeded orders, cut into
    optimizer steps of `per_step` examples. The uneven tail (fewer than per_step examples) is dropped
    on every rank, and per_step must split evenly over the ranks: each rank takes rows
    plan[step, rank::world], the same number on every rank at every step (FSDP's collectives need
    every rank to run the same forward and backward passes, or the job hangs)."""
    if per_step % world:
        raise DataError(f"train.batch_size {per_step} does not split over {world} processes")
    steps = int(epochs * n_rows) // per_step
    if steps < 1:
        raise DataError(f"{n_rows} examples x {epochs} epochs make no full step of {per_step}")
    rng = np.random.default_rng([seed, 7])
    order = np.concatenate([rng.permutation(n_rows) for _ in range(math.ceil(epochs))])
    return order[: steps * per_step].reshape(steps, per_step)


def _state_options(load: bool = False, offload: bool = False):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # full (unsharded) tensors of the trainable parameters only: the LoRA adapters and their AdamW
    # state, gathered from the FSDP shards (the frozen 72B weights are never gathered). cpu_offload
    # (rank 0 gathers into host memory) only for GPU parameters: FSDP on CPU (gloo) segfaults with it
    if load:
        return StateDictOptions(full_state_dict=True, ignore_frozen_params=True, strict=False)
    return StateDictOptions(full_state_dict=True, cpu_offload=offload, ignore_frozen_params=True)


def trainable_state(model, opt) -> tuple[dict, dict]:
    """(adapter, optimizer) state as full tensors keyed by parameter name, on every process a
    collective (torch.distributed.checkpoint's state_dict API works for FSDP, DDP and plain modules:
    opt.state_dict() of an FSDP job would hold only this rank's shard, keyed by index)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    offload = next(model.parameters()).device.type == "cuda"
    adapter, optim = get_state_dict(model, getattr(opt, "optimizer", opt), options=_state_options(offload=offload))
    return {k: v for k, v in adapter.items() if "lora_" in k}, optim


def load_trainable_state(model, opt, adapter: dict, optim: dict) -> None:
    """Every process loads the same full state; FSDP re-shards it."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    missing = set_state_dict(model, getattr(opt, "optimizer", opt), model_state_dict=adapter, optim_state_dict=optim,
                             options=_state_options(load=True))
    if missing.unexpected_keys:   # a checkpoint whose adapter keys do not match the model: never resume silently
        raise DataError(f"checkpoint adapter keys do not match the model (e.g. {missing.unexpected_keys[0]})")


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
    image_fits(t)
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
        plan = step_plan(len(rows), t["epochs"], per_step, dp.world, seed)
        steps = len(plan)
        sched = get_cosine_schedule_with_warmup(opt, int(t["warmup_ratio"] * steps), steps)
        model, opt = dp.prepare(model, opt)
        processor.image_processor.size = {"shortest_edge": t["min_pixels"], "longest_edge": t["max_pixels"]}
        ckpt = job.checkpointer()
        state, start, curve = ckpt.load(), 0, []
        fitted = {"history_dropped": 0, "cut": 0}
        if state is not None:   # every process reads the same file (rank 0 wrote the full tensors)
            load_trainable_state(model, opt, state["adapter"], state["opt"])
            sched.load_state_dict(state["sched"])
            set_rng_state(state["rng"])
            start, curve, fitted = state["step"], list(state["curve"]), dict(state["fitted"])
            job.log(f"resumed at step {start}")
        for step in range(start, steps):
            mine = plan[step, dp.rank::dp.world]          # per_step / world rows on every rank
            total, dropped, cut = 0.0, 0, 0
            for i in mine:
                batch, fit = encode(processor, rows[int(i)], t["max_length"])
                dropped, cut = dropped + (fit["dropped"] > 0), cut + fit["cut"]
                batch = {k: v.to(dp.device) for k, v in batch.items()}
                loss = model(**batch).loss * fit["weight"] / len(mine)
                dp.backward(loss)
                total += float(loss.detach())
            dp.accelerator.clip_grad_norm_(model.parameters(), t["grad_clip"])
            opt.step()
            sched.step()
            opt.zero_grad()
            curve.append(dp.mean(total))
            # counts over all ranks (the same on every rank, so a checkpoint from rank 0 holds them all)
            fitted["history_dropped"] += round(dp.mean(dropped) * dp.world)
            fitted["cut"] += round(dp.mean(cut) * dp.world)
            job.log(f"{job.method} step {step + 1}/{steps} loss {curve[-1]:.4f}", every_s=60)
            stop = dp.stop_agreed(ckpt.stop_requested)   # every process stops at the same step

            def snapshot(done=step + 1):   # a collective: every process calls it at the same step
                adapter, optim = trainable_state(model, opt)
                return {"step": done, "opt": optim, "sched": sched.state_dict(), "rng": rng_state(),
                        "curve": curve, "fitted": fitted, "adapter": adapter}

            if ckpt.maybe_save(step + 1, snapshot, stop=stop):
                raise SystemExit("stopped on request after a checkpoint")
        dp.wait()
        adapter, _ = trainable_state(model, opt)   # gathered from the FSDP shards
        if dp.is_main:
            dp.unwrap(model).save_pretrained(job.out_dir / f"adapter_{seed}", state_dict=adapter)
        ckpt.clear()
        tail = max(1, len(curve) // 10)
        return {"steps": steps, "examples": len(rows), "examples_used": steps * per_step,
                "first_loss": float(np.mean(curve[:tail])), "last_loss": float(np.mean(curve[-tail:])), **fitted}

    return {"units": job.units([f"{job.method}_{seed}"], work)}


# ----------------------------------------------------------------------------- evaluate
def evaluate(job) -> dict:
    """Checks every input WAA-V2 needs, then reads the per-task results a WAA-V2 host wrote, or
    raises one line saying what the cluster must provide. Every trial must hold a result for every
    task id of the pinned test_all.json (the paper's 141): a partial run is never averaged."""
    cfg, spec = job.cfg, job.cfg["data"][DATASET]
    test_all = job.raw_dir(DATASET) / "waa" / "test_all.json"
    if not test_all.is_file():
        raise DataError(f"WAA-V2 task list missing: {test_all} (run acquire)")
    cols = waa_columns(test_all)
    want = dict(spec["test_columns"])
    listed = json.loads(test_all.read_text())
    ids = {i: COLUMNS.get(d, "other") for d, lst in listed.items() for i in lst}
    if cols != want or len(ids) != sum(want.values()):
        raise DataError(f"the pinned test_all.json lists {len(ids)} task ids in columns {cols}; the paper's "
                        f"WAA-V2 has {sum(want.values())} in {want}")
    if job.method not in ("base", "teacher"):
        adapter = job.out_dir / f"adapter_{int(job.seeds[0])}"
        if not (adapter / "adapter_config.json").is_file():
            raise DataError(f"no trained adapters at {adapter} (run train)")
    ev = cfg["eval"]
    results = Path(ev["results_dir"]) / job.method
    files = [results / f"trial_{s}.json" for s in job.seeds]
    # the scored results are tied to the pinned task files (audit 11c L6): the WAA-V2 checkout the host
    # ran must hold every listed task JSON at the sha256 acquire recorded, checked at every evaluate
    problems = []
    examples = Path(ev["waa_dir"]) / "src/win-arena-container/client/evaluation_examples_windows/examples"
    pins = job.raw_dir(DATASET) / "waa" / "tasks.json"
    if not pins.is_file():
        problems.append(f"no task-file digests at {pins} (run acquire)")
    elif not examples.is_dir():
        problems.append(f"no WAA-V2 checkout at {ev['waa_dir']}")
    else:
        problems += task_file_problems(examples, listed, pins)
    if not all(f.is_file() for f in files):
        note = f" (also: {'; '.join(problems)})" if problems else ""
        raise DataError(WAA_NEEDS.format(results=results) + note)
    if problems:
        raise DataError(f"the WAA-V2 results under {results} are not scored: the checkout at {ev['waa_dir']} "
                        f"does not match the pinned task files: {'; '.join(problems)}")
    examples = job.prepared_dir(DATASET) / f"{job.method}.jsonl"
    n_train = float(sum(1 for _ in open(examples))) if job.method in ARMS else 0.0
    records = []
    for seed, f in zip(job.seeds, files):
        outcome = json.loads(f.read_text())
        missing = sorted(set(ids) - set(outcome))
        if missing:
            raise DataError(f"{f}: no result for {len(missing)} of the {len(ids)} WAA-V2 task ids: "
                            f"{', '.join(missing)}")
        outcome = {i: outcome[i] for i in ids}   # ids outside the pinned list are not counted
        for col in ("total", *want):
            pick = [v for i, v in outcome.items() if col == "total" or ids[i] == col]
            records.append({"seed": int(seed), "app": col, "n_tasks": len(pick),
                            "success": float(100 * np.mean(pick)) if pick else float("nan"), "n_train": n_train})
    return {"records": records}
