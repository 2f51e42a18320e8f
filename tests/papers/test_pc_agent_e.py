"""Card 11 (PC Agent-E): MiniDesk's routes and evaluator, the official boost filters, the pre-arm
mechanism checks, and the full scale offline: the raw PC Tracker layout (zipped) from a local
mirror, WAA-V2's task list sha256-pinned from a loopback server, prepare.py's examples, one LoRA SFT
step of a tiny Qwen2.5-VL built from its config (save_pretrained), and evaluate's one-line stop.
The smoke pipeline is tests/test_contract.py's."""
import numpy as np

from iclr26.papers.pc_agent_e import data
from iclr26.papers.pc_agent_e import minidesk as md

SPEC = {"n_train": 4, "n_distractors": 3, "max_targets": 3,
        "test_columns": {a: 1 for a in md.APPS}}


def _task(seed=0):
    return md.make_task(np.random.default_rng(seed), 0, "train", 0, 3, 3)


def test_both_routes_reach_the_goal_and_the_evaluator_reads_only_the_final_state():
    task = _task()
    for route in ("menu", "search"):
        env = md.MiniDesk(30)
        env.reset(options={"task": task})
        for t in task["targets"]:
            if route == "menu":
                env.step(md.click(env.layout["settings_button"]))
                env.step(md.click(env.layout["items"][t]))
            else:
                for a in ("hotkey (ctrl, f)", f"type text: {md.OPTIONS[t]}", "press key: enter"):
                    env.step(a)
        _, reward, done, _, _ = env.step("finish")
        assert done and reward == 1.0
    env = md.MiniDesk(30)
    env.reset(options={"task": task})
    assert env.step("finish")[1] == 0.0


def test_official_boost_filters():
    ok = data.response("I need to turn on sync. Next: click.", "click (40, 120)")
    assert data.keep_boost(ok, "click (40, 40)")
    assert not data.keep_boost(None, "wait")
    assert not data.keep_boost("", "wait")
    assert not data.keep_boost(data.response("t", "click (x, y)"), "wait")
    assert not data.keep_boost(ok, "finish")            # the human finished: an alternative must finish
    assert data.keep_boost(data.response("done", "finish"), "finish")
    assert not data.keep_boost("no action here", "wait")


def _boost_cfg(search_apps):
    return {"env": {"max_steps": 30}, "teacher": {"eps": 0.15, "fmt_error": 0.05},
            "human": {"idiosyncrasy": 0.1, "search_apps": search_apps}, "boost": {"count": 9}}


def test_one_route_per_app_covers_the_boost_alternatives_and_one_route_everywhere_does_not():
    from iclr26.papers.pc_agent_e.stages import mechanism
    tasks = data.make_tasks({**SPEC, "n_train": 40}, "train", 0)
    tmap = {t["id"]: t for t in tasks}
    lines = data.boosted_lines(tasks, _boost_cfg(["chrome", "system", "vlc"]), 0)
    search = {x["task_id"] for x in lines if x["action"].startswith(("hotkey", "type"))}
    assert search and all(tmap[t]["snapshot"] in ("chrome", "system", "vlc") for t in search)
    assert any(x["action"].startswith("click") for x in lines)   # the menu route in the other apps
    m = mechanism(lines, tmap)
    assert m["boost_valid_fraction"] > 0.7 and m["boost_search_route_fraction"] > 0.05
    assert m["boost_coverage"] >= 0.9
    # the first build (menu route in every app): the search-route alternatives lead nowhere the
    # human data show, so the precondition of the Boost claims fails
    menu_only = data.boosted_lines(tasks, _boost_cfg([]), 0)
    assert not any(x["action"].startswith(("hotkey", "type")) for x in menu_only)
    assert data.coverage(menu_only, tmap, 9)["boost_coverage"] < 0.9


def test_boost_layout_is_boost_py_and_the_loader_reads_prepare_py_slice():
    tasks = data.make_tasks({**SPEC, "n_train": 6}, "train", 1)
    lines = data.boosted_lines(tasks, _boost_cfg(["chrome"]), 0)
    for x in lines:
        r = x["boost_responses"]
        assert len(r) == 18 and all(v is None for v in r[1::2])   # responses.append(None) after each draw
    tmap = {t["id"]: t for t in tasks}
    human = len(data.examples(lines, tmap, True, False)["action"])
    kept = sum(data.keep_boost(t, x["action"]) for x in lines for t in x["boost_responses"][:9])
    assert len(data.examples(lines, tmap, True, True, boost_count=9)["action"]) == human + kept
    assert kept <= 5 * len(lines)


def test_equal_epochs_rule():
    from iclr26.papers.pc_agent_e import student
    cfg = {"student": {"epochs": 4, "batch_size": 64}}
    assert student.sft_steps(cfg, 1600) == 100 and student.sft_steps(cfg, 16000) == 1000


def test_one_rollout_distillation_keeps_every_successful_step():
    tasks = data.make_tasks({**SPEC, "n_train": 8}, "train", 0)
    cfg = {**_boost_cfg([]), "distill": {"rollouts": 8}}
    lines, info = data.distill_lines(tasks, cfg, 0, None, rollouts=1, stream=1)
    assert info["rollouts"] == 8 and info["steps_kept"] == info["steps_available"] == len(lines)
    assert all(x.get("keep") for x in lines)


def test_tiny_trajectories_are_written_in_the_raw_layout_and_read_by_the_full_scale_reader(tmp_path):
    from iclr26.papers.pc_agent_e import full
    tasks = data.make_tasks({**SPEC, "n_train": 6}, "train", 2)
    tmap = {t["id"]: t for t in tasks}
    lines = data.boosted_lines(tasks, _boost_cfg(["chrome", "vlc"]), 0)
    assert data.write_events(tmp_path / "human" / "events_0", lines, tmap) == 6
    pairs = data.find_tasks(tmp_path / "human")
    assert len(pairs) == 6 and data.task_description(pairs[0][1]) == tasks[0]["instruction"]
    back = data.read_events(tmp_path / "human")
    tiny = data.examples(back, tmap, True, True, boost_count=9)
    assert len(tiny["action"]) == len(data.examples(lines, tmap, True, True, boost_count=9)["action"])
    examples, n = full.sft_examples(pairs, True, 9)   # the full scale's prepare.py path on the same files
    assert len(examples) == len(tiny["action"]) and n["human_steps"] == len(lines)


# ----------------------------------------------------------------------------- full scale, offline
def test_full_scale_prompt_is_prepare_py_text():
    """postprocess/prepare.py get_instruction with utils.get_history_str (GAIR-NLP/PC-Agent-E @ 9b1b00b):
    the official AGENT_PROMPT by digest, the history's last 10 responses as [i] blocks, 'None' first."""
    import hashlib

    from iclr26.papers.pc_agent_e import full

    assert hashlib.sha256(full.AGENT_PROMPT.encode()).hexdigest() == full.AGENT_PROMPT_SHA256
    assert full.AGENT_PROMPT.startswith("You are a helpful assistant who can help users complete computer tasks")
    assert full.AGENT_PROMPT.endswith("Action: {The specific action you choose to take}\n\n"
                                      "--------------------------------------------\n\n")
    tail = ("\n\n--------------------------------------------\n\nGiven the screenshot. What's the next step "
            "that you will do to help with the task?<image>")
    head = (full.AGENT_PROMPT + "Your task is: Open VLC\n\nHistory of the previous actions and thoughts you have "
            "done to reach the current screen: ")
    assert full.instruction("Open VLC", []) == head + "None" + tail
    steps = [data.response(f"thought number {k}", "wait") for k in range(12)]
    two = full.instruction("Open VLC", steps[:2])
    assert two == head + f"[1] {steps[0]}\n\n[2] {steps[1]}" + tail
    twelve = full.instruction("Open VLC", steps)      # cut off at 10, numbered from [1] again
    assert f"[1] {steps[2]}\n\n" in twelve and f"[10] {steps[11]}" + tail in twelve and steps[1] not in twelve
    assert full.split_history(twelve) == (head, steps[2:]) and full.split_history(two)[1] == steps[:2]
    assert full.split_history(full.instruction("Open VLC", []))[1] == []


def test_full_scale_refine_filters_are_utils_py():
    from iclr26.papers.pc_agent_e import full

    assert full.refine_thought("too short") is None and full.refine_thought(None) is None
    assert full.refine_thought("**Thought Process:** I open the menu first. Action: click") == \
        "I open the menu first."
    assert full.refine_response("I will open the file menu now.\n\n**Action:** click (10, 700) # the menu") == \
        data.response("I will open the file menu now.", "click (10, 700)")
    assert full.refine_response(data.response("I will click outside the screen.", "click (10, 720)")) is None
    assert full.refine_response(data.response("I will press a made-up key now.", "press key: nokey")) is None
    assert full.refine_response(data.response("I will press the enter key now.", "press key: Enter")) is not None
    assert full.refine_response("I will just think about it for a while.") is None
    assert not full.check_boost_response(data.response("I should click the button.", "click (x,y)"), "wait")
    assert not full.check_boost_response(data.response("I should click the button.", "wait"), "finish")


def test_every_rank_takes_the_same_number_of_steps():
    """FSDP: every rank runs the same forward/backward passes at every step, or the collectives hang;
    the uneven tail is dropped on all ranks, never on one."""
    import pytest

    from iclr26.core.errors import DataError
    from iclr26.papers.pc_agent_e import full

    for n, epochs in ((37, 2), (64, 1), (101, 2), (4503, 2)):
        for world in (1, 2, 4, 8):
            plan = full.step_plan(n, epochs, 32, world, seed=3)
            assert plan.shape == (epochs * n // 32, 32)
            per_rank = {r: [len(plan[s, r::world]) for s in range(len(plan))] for r in range(world)}
            assert len({tuple(v) for v in per_rank.values()}) == 1 and set(per_rank[0]) == {32 // world}
            assert np.bincount(plan.ravel(), minlength=n).max() <= epochs   # each row at most once an epoch
            assert (full.step_plan(n, epochs, 32, world, seed=3) == plan).all()   # the same plan on every rank
    with pytest.raises(DataError, match="does not split over 3 processes"):
        full.step_plan(64, 1, 32, 3, seed=0)
    with pytest.raises(DataError, match="no full step"):
        full.step_plan(10, 1, 32, 1, seed=0)


def test_resume_restores_the_adapter_and_the_optimizer_exactly(tmp_path):
    """Checkpoint through torch.distributed.checkpoint's state_dict API (the FSDP-safe path): a run
    stopped after step 1 and resumed from the saved file gives the same weights after step 2."""
    import torch
    from peft import LoraConfig, get_peft_model

    from iclr26.papers.pc_agent_e import full

    def fresh():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
        model = get_peft_model(net, LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2"]))
        return model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)

    x = torch.randn(2, 8, 6)

    def step(model, opt, k):
        model(x[k]).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()

    model, opt = fresh()
    step(model, opt, 0)
    adapter, optim = full.trainable_state(model, opt)
    assert adapter and all("lora_" in k for k in adapter)
    torch.save({"adapter": adapter, "opt": optim}, tmp_path / "c.pt")
    step(model, opt, 1)
    resumed, ropt = fresh()
    saved = torch.load(tmp_path / "c.pt", weights_only=True)
    full.load_trainable_state(resumed, ropt, saved["adapter"], saved["opt"])
    step(resumed, ropt, 1)
    a, b = full.trainable_state(model, opt)[0], full.trainable_state(resumed, ropt)[0]
    assert all(torch.equal(a[k], b[k]) for k in a)


def _trajectories(root):
    """Two tasks in the raw PC Tracker layout the released dataset ships (events*/ *task*.jsonl with
    action, screenshot, thought, boost_responses; the .md whose second line is the task), zipped."""
    import json
    import zipfile

    from PIL import Image

    src = root / "src" / "events_0"
    src.mkdir(parents=True)
    ok = "I should open the settings menu to find the option."
    for k in range(2):
        steps = [{"action": "click (40, 40)", "screenshot": f"shot_{k}_0.png", "thought": ok,
                  "boost_responses": [data.response(ok, "click (40, 40)"), data.response(ok, "click (x, y)"), None,
                                      data.response(ok, "hotkey (ctrl, f)")]},
                 {"action": "press key enter", "screenshot": f"shot_{k}_1.png", "thought": ok,
                  "boost_responses": [data.response(ok, "press key: enter")]},
                 {"action": "finish", "screenshot": f"shot_{k}_2.png", "thought": "The option is on, the task is done.",
                  "boost_responses": [data.response(ok, "click (40, 40)"),
                                      data.response("All done now, finish.", "finish")]}]
        (src / f"task_{k}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
        (src / f"task_{k}.md").write_text(f"# Task {k}\n**Description:** Turn on dark mode {k}\n")
        for s in steps:
            Image.fromarray((np.random.default_rng(k).random((56, 84, 3)) * 255).astype(np.uint8)).save(
                src / s["screenshot"])
    mirror = root / "mirror"
    mirror.mkdir()
    with zipfile.ZipFile(mirror / "data.zip", "w") as z:
        for p in sorted(src.rglob("*")):
            z.write(p, p.relative_to(root / "src"))
    return mirror


def test_full_scale_pipeline_offline(workdir, static_server):
    """The full scale's stages through the core's runner: the trajectories from a local mirror
    (zipped raw layout), WAA-V2's task list sha256-pinned from a loopback server, prepare.py's
    examples with the official filters, one LoRA SFT step of a tiny Qwen2.5-VL (vision frozen),
    evaluate stopping with one line until the WAA-V2 host's results exist, then reading them."""
    import hashlib
    import json
    import shutil

    import pytest

    from iclr26.core.errors import DataError
    from iclr26.core.io import read_json
    from iclr26.core.job import run_stage

    folder, base = static_server
    columns = {"libreoffice_writer": ["w1"], "libreoffice_calc": ["c1"], "chrome": ["g1"], "msedge": ["e1"],
               "settings": ["s1"], "vs_code": ["v1"], "vlc": ["l1"], "notepad": ["n1"]}
    (folder / "test_all.json").write_text(json.dumps(columns))
    sha = hashlib.sha256((folder / "test_all.json").read_bytes()).hexdigest()
    mirror = _trajectories(workdir / "raw_src")
    from conftest import tiny_qwen25_vl

    model = tiny_qwen25_vl(workdir / "qwen", "Action: click (40, 40) press key: enter finish the task settings",
                           max_positions=8192)
    for d, lst in columns.items():   # the task JSONs at the pinned commit, beside test_all.json
        (folder / "examples" / d).mkdir(parents=True, exist_ok=True)
        for i in lst:
            (folder / "examples" / d / f"{i}.json").write_text(json.dumps({"id": i, "snapshot": d}))
    sizes = "{libreoffice:2,chrome:1,edge:1,system:1,vs_code:1,vlc:1,utils:1}"
    overrides = ["data.minidesk.expect.trajectories=2", "data.minidesk.expect.steps=6", "~data.minidesk.waa.tasks",
                 f"data.minidesk.test_columns={sizes}", f"data.minidesk.hub_id={mirror}",
                 f"data.minidesk.waa.test_all.url={base}/test_all.json",
                 f"data.minidesk.waa.test_all.sha256={sha}", f"model.source={model}", "device=cpu",
                 "train.sharding=none", "train.epochs=1", "train.batch_size=2", "train.max_examples=2",
                 "train.lora.r=2", "train.activation_checkpointing=false", f"train.min_pixels={28 * 28}",
                 f"train.max_pixels={56 * 56 * 2}", "launch.mixed_precision=no",
                 f"eval.results_dir={workdir / 'waa'}", f"eval.waa_dir={workdir / 'waa_checkout'}"]
    with pytest.raises(DataError, match="2 trajectories / 6 steps .* the release has 312 / 4503"):
        run_stage("acquire", "pc_agent_e", "full", overrides[2:], dataset="minidesk")   # the release's counts
    info = read_json(run_stage("acquire", "pc_agent_e", "full", overrides, dataset="minidesk"))["info"]
    assert info["trajectories"] == 2 and info["steps"] == 6 and info["waa_columns"]["libreoffice"] == 2
    assert info["waa_tasks"] == 8
    from iclr26.papers.pc_agent_e import full
    with pytest.raises(DataError, match="no sha256 pin in data.minidesk.waa.tasks for 7 WAA-V2 task files"):
        full.waa_task_files({"test_all": {"url": f"{base}/test_all.json"}, "tasks": {"chrome/g1": "0" * 64}},
                            workdir / "data/full/pc_agent_e/raw/minidesk/waa")
    (workdir / "pins").mkdir()
    shutil.copy(folder / "test_all.json", workdir / "pins" / "test_all.json")
    with pytest.raises(DataError, match="sha256 mismatch"):   # a pinned task file whose bytes differ
        full.waa_task_files({"test_all": {"url": f"{base}/test_all.json"},
                             "tasks": {f"{d}/{i}": "0" * 64 for d, lst in columns.items() for i in lst}},
                            workdir / "pins")
    prep = read_json(run_stage("prepare", "pc_agent_e", "full", overrides, dataset="minidesk"))["info"]
    # per task: 3 human steps; boost keeps 2 of 4 (placeholder, None dropped), 1 of 1, 1 of 2 (the
    # human finished: an alternative that does not finish is dropped)
    assert prep["human_only"]["examples"] == 6 and prep["boost"]["examples"] == 6 + 2 * 4
    rows = [json.loads(x) for x in (workdir / "data/full/pc_agent_e/prepared/minidesk/boost.jsonl")
            .read_text().splitlines()]
    assert rows[0]["messages"][1]["content"].endswith("Action: click (40, 40)")
    assert "press key: enter" in rows[-1]["messages"][0]["content"]   # history: the human's normalised step
    from transformers import AutoProcessor
    processor = AutoProcessor.from_pretrained(model)
    processor.image_processor.size = {"shortest_edge": 28 * 28, "longest_edge": 56 * 56 * 2}
    last = rows[-1]   # the finish step: two human responses in its history
    whole, fit = full.encode(processor, last)
    n = whole["input_ids"].shape[1]
    clipped, fit = full.encode(processor, last, n - 1)   # one token too long: the oldest response goes
    assert fit == {"dropped": 1, "cut": False, "weight": 1.0} and clipped["input_ids"].shape[1] < n
    with pytest.raises(DataError, match="exceed train.max_length 20"):   # the image never cut (audit 11c L7)
        full.encode(processor, last, 20)
    job = {"method": "boost", "seed_block": "s0-2"}
    units = read_json(run_stage("train", "pc_agent_e", "full", overrides, **job))["units"]
    assert units["boost_0"]["steps"] == 1 and units["boost_0"]["examples"] == 2 and units["boost_0"]["first_loss"] > 0
    u = units["boost_0"]
    assert u["examples_used"] == 2 and u["history_dropped"] == u["cut"] == 0
    adapter = workdir / "runs/full/pc_agent_e/boost/s0-2/adapter_0"
    assert (adapter / "adapter_config.json").is_file()
    assert "visual" not in json.dumps(json.loads((adapter / "adapter_config.json").read_text())["target_modules"])
    from safetensors.torch import load_file
    saved = load_file(adapter / "adapter_model.safetensors")   # the gathered adapters, not empty shards
    assert saved and all("lora_" in k and v.numel() > 0 for k, v in saved.items())
    with pytest.raises(DataError, match="KVM-capable host with Docker"):
        run_stage("evaluate", "pc_agent_e", "full", overrides, **job)
    (workdir / "waa_checkout/src/win-arena-container/client/evaluation_examples_windows").mkdir(parents=True)
    shutil.copytree(folder / "examples", workdir / "waa_checkout/src/win-arena-container/client/"
                    "evaluation_examples_windows/examples")
    (workdir / "waa_checkout/src/win-arena-container/client/evaluation_examples_windows/examples/vlc/l1.json"
     ).write_text("{}")
    with pytest.raises(DataError, match="1 task files differ from the pinned sha256: vlc/l1"):
        run_stage("evaluate", "pc_agent_e", "full", overrides, **job)
    (workdir / "waa/boost").mkdir(parents=True)
    for s in range(3):
        (workdir / f"waa/boost/trial_{s}.json").write_text(json.dumps({"w1": 1, "c1": s % 2, "g1": 0, "n1": 1}))
    # results present, but the checkout's task file differs from the pin: never scored (audit 11c L6)
    with pytest.raises(DataError, match="not scored: .*1 task files differ from the pinned sha256: vlc/l1"):
        run_stage("evaluate", "pc_agent_e", "full", overrides, **job)
    shutil.copy(folder / "examples/vlc/l1.json", workdir / "waa_checkout/src/win-arena-container/client/"
                "evaluation_examples_windows/examples/vlc/l1.json")
    with pytest.raises(DataError, match="no result for 4 of the 8 WAA-V2 task ids: e1, l1, s1, v1"):
        run_stage("evaluate", "pc_agent_e", "full", overrides, **job)
    for s in range(3):
        (workdir / f"waa/boost/trial_{s}.json").write_text(json.dumps(
            {"w1": 1, "c1": s % 2, "g1": 0, "n1": 1, "e1": 0, "l1": 0, "s1": 0, "v1": 0, "zz": 1}))
    records = read_json(run_stage("evaluate", "pc_agent_e", "full", overrides, **job))["records"]
    total = [r for r in records if r["app"] == "total"]
    assert [r["success"] for r in total] == [25.0, 37.5, 25.0]   # "zz" is not a listed task: not counted
    pins = workdir / "data/full/pc_agent_e/raw/minidesk/waa/tasks.json"
    digests = json.loads(pins.read_text())
    pins.write_text(json.dumps({k: v for k, v in digests.items() if k != "chrome/g1"}))
    with pytest.raises(DataError, match="not scored: .*1 task files have no digest .*chrome/g1"):
        run_stage("evaluate", "pc_agent_e", "full", overrides, **job)
    pins.write_text(json.dumps(digests))
    assert next(r for r in records if r["app"] == "libreoffice" and r["seed"] == 1)["success"] == 100.0
    # evaluate under the paper's 141 task ids, on data acquired for this 8-task release: refused before the
    # task-count check inside evaluate can run, because the data were made under another config
    with pytest.raises(DataError, match=r"made under another config \(config key 'data.minidesk'"):
        run_stage("evaluate", "pc_agent_e", "full", [o for o in overrides if "test_columns" not in o], **job)


def test_student_fit_counts_taught_or_correct_actions_at_the_same_input():
    """student.fit on a hand-built example set (audit 11c L4): train_acc is the greedy action's match
    with the example's own action; train_fit also counts an action the arm's data teach at the SAME
    (screen, instruction, previous action) key, or a correct one there. Policies are table lookups."""
    import torch

    from iclr26.papers.pc_agent_e import student

    cfg = {"student": {"vocab": 512}}
    screen_a, screen_b = np.zeros((md.C, 9, 16), np.float32), np.zeros((md.C, 9, 16), np.float32)
    screen_a[0, 0, 0], screen_b[0, 1, 1] = 1.0, 1.0
    #         screen    instruction       prev  action  correct actions
    rows = [(screen_a, "open the menu", 0, 1, {1}),
            (screen_a, "open the menu", 0, 2, {1}),        # the teacher's wrong action, taught at the same key
            (screen_b, "open the menu", 0, 3, {3, 4}),     # two correct actions, one taught
            (screen_a, "close the window", 0, 5, {5}),     # the same screen, another instruction
            (screen_a, "open the menu", 1, 6, {6})]        # the same screen and instruction, another prev
    correct = np.zeros((len(rows), md.VOCAB), bool)
    for i, r in enumerate(rows):
        correct[i, sorted(r[4])] = True
    ex = {"obs": np.stack([r[0] for r in rows]), "instr": np.array([r[1] for r in rows]),
          "prev": np.array([r[2] for r in rows], np.int64), "action": np.array([r[3] for r in rows], np.int64),
          "correct": correct}
    bow = student.bag_of_words(ex["instr"], 512)
    assert not np.array_equal(bow[0], bow[3])   # the two instructions hash apart

    class Lookup(torch.nn.Module):
        """Greedy action = table[(screen, instruction, prev)] (row ids name the keys)."""
        def __init__(self, by_row):
            super().__init__()
            self.table = {(ex["obs"][i].tobytes(), bow[i].tobytes(), int(ex["prev"][i])): a for i, a in by_row.items()}

        def forward(self, obs, b, prev):
            out = torch.zeros(len(obs), md.VOCAB)
            for k in range(len(obs)):
                out[k, self.table[(obs[k].numpy().tobytes(), b[k].numpy().tobytes(), int(prev[k]))]] = 1.0
            return out, torch.zeros(len(obs), md.K + 1)

    def fit(by_row):
        got = student.fit(cfg, Lookup(by_row), ex)
        return round(got["train_fit"], 6), round(got["train_acc"], 6)

    # taught-but-wrong (2) counts at its key; the untaught correct 4 counts; own labels at rows 3, 4
    assert fit({0: 2, 2: 4, 3: 5, 4: 6}) == (1.0, 0.6)
    # actions taught or correct at ANOTHER key do not count: only row 2 (its own label 3) fits
    assert fit({0: 5, 2: 3, 3: 1, 4: 1}) == (0.2, 0.2)
    # a constant untaught wrong action fits nothing
    assert fit({0: 7, 2: 7, 3: 7, 4: 7}) == (0.0, 0.0)
    # a memoriser (the first taught action at each key) fits everything; its accuracy misses row 1's label
    assert fit({0: 1, 2: 3, 3: 5, 4: 6}) == (1.0, 0.8)


def _screenshot_example(tmp_path, history):
    from PIL import Image

    from iclr26.papers.pc_agent_e import full

    shot = tmp_path / "shot.png"
    Image.fromarray((np.random.default_rng(0).random((56, 84, 3)) * 255).astype(np.uint8)).save(shot)
    prompt = full.instruction("Turn on dark mode", history)
    answer = data.response("The option is on, the task is done.", "finish")
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
            "images": [str(shot)]}


def test_full_scale_screenshot_closes_the_user_turn_and_a_cut_never_splits_it(tmp_path):
    """Audit 11c M1: LLaMA-Factory's qwen2_vl plugin replaces the official prompt's trailing <image> in
    place, so the screenshot's tokens come right before the user turn's <|im_end|> (deploy/utils.py also
    sends text, then image). L7: an over-length example is cut in its text, never in the image tokens,
    and the tiny Qwen2.5-VL runs forward on every cut form."""
    import pytest
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from conftest import tiny_qwen25_vl
    from iclr26.core.errors import DataError
    from iclr26.papers.pc_agent_e import full

    where = tiny_qwen25_vl(tmp_path / "qwen", "Action: click (40, 40) press key: enter finish the task settings",
                           max_positions=8192)
    processor = AutoProcessor.from_pretrained(where)
    processor.image_processor.size = {"shortest_edge": 28 * 28, "longest_edge": 56 * 56 * 2}
    tok = processor.tokenizer
    pad, start, stop, end, turn = (tok.convert_tokens_to_ids(t) for t in (
        "<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>", "<|im_start|>"))
    history = [data.response(f"I open the menu number {k} first.", "click (40, 40)") for k in range(3)]
    ex = _screenshot_example(tmp_path, history)

    def layout(batch):
        """(the user turn's text before the image, the prompt's tokens): the image block must close it."""
        ids = batch["input_ids"][0].tolist()
        n_img = int(batch["image_grid_thw"].prod()) // 4            # 2 x 2 patches merged per token
        first = ids.index(pad)
        assert ids.count(pad) == n_img and ids[first:first + n_img] == [pad] * n_img
        assert ids[first - 1] == start and ids[first + n_img] == stop
        user = ids.index(turn, 1)                                   # the user turn (after the system turn)
        assert end not in ids[user:first]                           # no turn end before the image
        n_prompt = int((batch["labels"][0] == -100).sum())
        assert ids[first + n_img + 1] == end                        # the image, then the user turn's end
        assert tok.decode(ids[first + n_img + 1:n_prompt]) == "<|im_end|>\n<|im_start|>assistant\n"
        return tok.decode(ids[user:first - 1]), n_prompt

    whole, fit = full.encode(processor, ex)
    text, n_prompt = layout(whole)
    assert fit == {"dropped": 0, "cut": False, "weight": 1.0}
    assert text.startswith("<|im_start|>user\nYou are a helpful assistant who can help users complete")
    assert text.endswith("What's the next step that you will do to help with the task?")
    assert "<image>" not in tok.decode(whole["input_ids"][0])

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(where).eval()

    def loss(batch):
        with torch.no_grad():
            return float(model(**batch).loss)

    bare, _ = full.encode(processor, _screenshot_example(tmp_path, []))
    p0 = int((bare["labels"][0] == -100).sum())                     # the prompt without history
    # the prompt fits once the history is gone: the response's tail is cut, its 2 kept tokens trained
    tail, fit = full.encode(processor, ex, p0 + 2)
    assert fit == {"dropped": 3, "cut": True, "weight": 1.0} and tail["input_ids"].shape[1] == p0 + 2
    assert layout(tail)[1] == p0 and (tail["labels"] != -100).sum() == 2 and np.isfinite(loss(tail))
    # the prompt alone is too long: its text before the image is cut, one response token, weight 0
    short, fit = full.encode(processor, ex, p0 - 15)
    assert fit == {"dropped": 3, "cut": True, "weight": 0.0} and short["input_ids"].shape[1] == p0 - 15
    text, _ = layout(short)
    assert text.startswith("<|im_start|>user\nYou are a helpful") and not text.endswith("the task?")
    assert (short["labels"] != -100).sum() == 1 and np.isfinite(loss(short))
    assert torch.equal(short["pixel_values"], whole["pixel_values"])
    with pytest.raises(DataError, match="exceed train.max_length 30"):   # the image and template alone
        full.encode(processor, ex, 30)
    full.image_fits({"max_pixels": 1_000_000, "max_length": 8192})      # sft.yaml: 1,275 image tokens at most
    with pytest.raises(DataError, match="takes up to 1277 tokens"):
        full.image_fits({"max_pixels": 1_000_000, "max_length": 1024})


def test_full_scale_prepare_keeps_the_press_key_rewrite_verbatim_and_checks_screenshots(tmp_path):
    """prepare.py rewrites every action starting with 'press key' (audit 11c L5); a prompt without its one
    <image> marker or a screenshot that does not open stops prepare (L7), not a rank mid-step."""
    import pytest

    from iclr26.core.errors import DataError
    from iclr26.papers.pc_agent_e import full

    assert full.normalise_action("press key enter") == "press key: enter"
    assert full.normalise_action("press key: enter") == "press key:: enter"     # as official prepare.py
    assert full.normalise_action("hotkey (ctrl, c)") == "hotkey (ctrl, c)"
    ex = _screenshot_example(tmp_path, [])
    full.check_examples([ex])
    two = {**ex, "messages": [{"role": "user", "content": ex["messages"][0]["content"] + "<image>"},
                              ex["messages"][1]]}
    with pytest.raises(DataError, match="1 examples' prompts do not hold exactly one <image>"):
        full.check_examples([ex, two])
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="1 screenshots do not open: .*broken.png"):
        full.check_examples([ex, {**ex, "images": [str(tmp_path / "broken.png")]}])


def test_seeds_trained_side_by_side_equal_each_seed_trained_alone():
    """student.train_seeds (the seeds of an arm in one Stacked module) against the plain loop over one
    Policy per seed: the same init, minibatches and step count per seed, so the same weights up to rounding;
    a seed with fewer steps keeps its weights at its own last step."""
    import torch

    from iclr26.papers.pc_agent_e import student

    cfg = {"student": {"width": 8, "vocab": 64, "lr": 1e-2, "batch_size": 8, "epochs": 1, "thought_weight": 0.5}}
    rng = np.random.default_rng(0)

    def ex(n):
        return {"obs": (rng.random((n, md.C, md.H, md.W)) < 0.1).astype(np.float32),
                "instr": np.array([f"turn on option {i % 3}" for i in range(n)]),
                "prev": rng.integers(0, len(data.PREV_KINDS), n), "action": rng.integers(0, md.VOCAB, n),
                "subgoal": rng.integers(0, md.K + 1, n)}

    exs, seeds, steps = [ex(40), ex(30)], [3, 5], [4, 2]
    got = student.train_seeds(cfg, exs, seeds, steps)
    for e, seed, k, (net, losses) in zip(exs, seeds, steps, got):
        ref = student.build(cfg, seed)
        opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(seed)
        obs, bow = torch.from_numpy(e["obs"]), torch.from_numpy(student.bag_of_words(e["instr"], 64))
        prev, act, goal = (torch.from_numpy(e[x]) for x in ("prev", "action", "subgoal"))
        want = []
        for _ in range(k):
            idx = torch.randint(len(act), (8,), generator=gen)
            logits, glog = ref(obs[idx], bow[idx], prev[idx])
            loss = torch.nn.functional.cross_entropy(logits, act[idx]) + 0.5 * torch.nn.functional.cross_entropy(
                glog, goal[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            want.append(float(loss.detach()))
        assert len(losses) == k and np.allclose(losses, want, atol=1e-5)
        for name, value in ref.state_dict().items():
            assert torch.allclose(net.state_dict()[name], value, atol=1e-5), name
