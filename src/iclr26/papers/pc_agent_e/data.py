"""Tasks, human demos, the noisy teacher, Trajectory Boost, direct distillation, and the loader.

Trajectory lines follow the released per-step schema (card 11, section 2): `action`, `screenshot`,
`thought`, `boost_responses` (teacher responses "thought\\n\\nAction: action", or null), plus
`task_id`, `traj` and `step`. `boost_responses` has the official boost.py layout: each of the
`boost.count` draws (a malformed reply retried up to 5 times) is followed by a `None`
(`responses.append(None)` sits outside boost.py's retry loop), and the loader reads the first
`boost.count` entries as prepare.py does (`[:BOOST_CNT]`): ceil(count / 2) responses per step.
Both scales store trajectories in PC Tracker's raw layout (events*/ task_*.jsonl + .md) and read
them with the same step reader (find_tasks, read_steps, task_description); only the tensoriser
differs. At tiny scale `screenshot` is "replay:<task id>:<step>": the loader re-renders it by replaying
the trajectory's actions in MiniDesk (no image files).

Boost filters are the official `postprocess/prepare.py` ones (`check_boost_response` and
`refine_response`): drop a missing or empty response; when the human action is `finish`, drop a
response without `finish`; drop a response containing the placeholder "(x, y)"; drop a response
whose thought or action does not parse.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import minidesk as md

PLACEHOLDER = ("(x, y)", "(x,y)")


# ----------------------------------------------------------------------------- tasks
def make_tasks(spec: dict, split: str, seed: int) -> list[dict]:
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    if split == "train":
        apps = rng.integers(0, len(md.APPS), size=spec["n_train"])
    else:
        apps = np.repeat(np.arange(len(md.APPS)), [spec["test_columns"][a] for a in md.APPS])
    return [md.make_task(rng, int(a), split, i, spec["n_distractors"], spec["max_targets"]) for i, a in enumerate(apps)]


def write_tasks(out: Path, spec: dict, seed: int) -> dict:
    counts = {}
    for split in ("train", "test"):
        tasks = make_tasks(spec, split, seed)
        (out / split).mkdir(parents=True, exist_ok=True)
        for task in tasks:
            (out / split / f"{task['id']}.json").write_text(json.dumps(task))
        counts[split] = len(tasks)
    return counts


def read_tasks(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


# ----------------------------------------------------------------------------- responses
def response(thought: str, action: str) -> str:
    return f"{thought}\n\nAction: {action}"


def thought_for(env: md.MiniDesk, action: str) -> str:
    """Hindsight thought completion (the tiny stand-in for the teacher's thought): the subgoal the
    action serves and the action's intent."""
    goal = subgoal_of(env, action)
    return "All requested options are on; the task is done." if goal == md.K else (
        f"I need to turn on {md.OPTIONS[goal]}. Next: {action.split(' (')[0]}.")


def subgoal_of(env: md.MiniDesk, action: str) -> int:
    p = md.parse(action)
    if p and p[0] == "click" and env.state["panel"] == md.MENU and p[1] in env.layout["items"]:
        return env.layout["items"].index(p[1])
    if p and p[0] == "type" and p[1] in md.OPTIONS:
        return md.OPTIONS.index(p[1])
    return env.subgoal()


@lru_cache(maxsize=65536)
def split_response(text: str | None) -> tuple[str, str] | None:
    """(thought, action) of a response (the official refine_response), None if malformed."""
    if not text or "\n\nAction: " not in text:
        return None
    thought, action = text.rsplit("\n\nAction: ", 1)
    thought, action = thought.strip(), action.strip()
    if not thought or md.parse(action) is None:
        return None
    return thought, action


def keep_boost(text: str | None, human_action: str) -> bool:
    """The official filters (prepare.py check_boost_response, then refine_response)."""
    if text is None:
        return False
    if human_action == "finish" and "finish" not in text:
        return False
    if any(p in text for p in PLACEHOLDER):
        return False
    return split_response(text) is not None


def thought_subgoal(thought: str) -> int:
    for k, name in enumerate(md.OPTIONS):
        if f"turn on {name}." in thought:
            return k
    return md.K


# ----------------------------------------------------------------------------- agents
class Teacher:
    """The scripted stand-in for Claude 3.7 Sonnet: with probability 1 - eps a uniform pick among
    the correct next actions on any valid route; with probability eps a uniform pick among the
    plausible wrong ones (MiniDesk.wrong_actions: wrong item, wrong cell, wrong name, early finish); with
    probability fmt_error a malformed response (empty, or the "(x, y)" placeholder)."""

    def __init__(self, eps: float, fmt_error: float, rng: np.random.Generator):
        self.eps, self.fmt_error, self.rng = eps, fmt_error, rng

    def action(self, env: md.MiniDesk) -> str:
        correct = env.correct_actions()
        if self.rng.random() < self.eps:
            wrong = env.wrong_actions()
            return wrong[int(self.rng.integers(len(wrong)))]
        return correct[int(self.rng.integers(len(correct)))]

    def respond(self, env: md.MiniDesk) -> str:
        if self.rng.random() < self.fmt_error:
            return "" if self.rng.random() < 0.5 else response("I will click the button.", "click (x, y)")
        action = self.action(env)
        return response(thought_for(env, action), action)


def human_route(cfg: dict, task: dict) -> str:
    """The app's preferred human route (card 11 section 6: one route per app)."""
    return "search" if task["snapshot"] in cfg["human"]["search_apps"] else "menu"


def human_demo(env: md.MiniDesk, task: dict, rng, idiosyncrasy: float, max_steps: int,
               route: str = "menu") -> list[str]:
    """The scripted human: the app's preferred route (`route`); before a step, with probability `idiosyncrasy`, a
    harmless `wait` or `scroll (-1)`. Returns the actions (all demos succeed)."""
    env.reset(options={"task": task})
    actions = []
    while len(actions) < max_steps:
        if rng.random() < idiosyncrasy:
            actions.append("wait" if rng.random() < 0.5 else "scroll (-1)")
            continue
        a = env.human_action(route)
        actions.append(a)
        if env.transition(a):
            break
    assert md.evaluate_task(task, env.state) == 1.0, "a human demo failed"
    return actions


def boosted_lines(tasks: list[dict], cfg: dict, seed: int) -> list[dict]:
    """Human trajectories with thoughts and, at every human step, `boost.count` teacher draws from
    that step's state in boost.py's layout (each followed by None; never executed: only the human
    action moves the env)."""
    rng = np.random.default_rng([seed, 10])
    teacher = Teacher(cfg["teacher"]["eps"], cfg["teacher"]["fmt_error"], np.random.default_rng([seed, 11]))
    env, lines = md.MiniDesk(cfg["env"]["max_steps"]), []
    for n, task in enumerate(tasks):
        actions = human_demo(env, task, rng, cfg["human"]["idiosyncrasy"], cfg["env"]["max_steps"],
                             human_route(cfg, task))
        env.reset(options={"task": task})
        for step, a in enumerate(actions):
            boost = []
            for _ in range(cfg["boost"]["count"]):
                for _try in range(5):   # boost.py: try_time = 5, refine_response None -> retry
                    text = teacher.respond(env)
                    if split_response(text) is not None:
                        boost.append(text)
                        break
                boost.append(None)
            lines.append({"task_id": task["id"], "traj": n, "step": step, "action": a,
                          "screenshot": f"replay:{task['id']}:{step}", "thought": thought_for(env, a),
                          "boost_responses": boost})
            env.transition(a)
    return lines


def distill_lines(tasks: list[dict], cfg: dict, seed: int, budget: int | None,
                  rollouts: int | None = None, stream: int = 0) -> tuple[list[dict], dict]:
    """Direct distillation: the teacher rolled out in MiniDesk on the training tasks (`rollouts`
    per task, default distill.rollouts; at most env.max_steps steps), the steps of successful
    trajectories kept, then single steps drawn uniformly without replacement from them (not whole
    trajectories) up to `budget` examples (None: all of them are kept)."""
    rollouts = cfg["distill"]["rollouts"] if rollouts is None else rollouts
    rng = np.random.default_rng([seed, 20 + 100 * stream])
    teacher = Teacher(cfg["teacher"]["eps"], 0.0, np.random.default_rng([seed, 21 + 100 * stream]))
    env, kept, tried, ok = md.MiniDesk(cfg["env"]["max_steps"]), [], 0, 0
    for n, task in enumerate(tasks):
        for r in range(rollouts):
            env.reset(options={"task": task})
            steps, done = [], False
            while not done and len(steps) < cfg["env"]["max_steps"]:
                a = teacher.action(env)
                steps.append({"task_id": task["id"], "traj": n * 1000 + r, "step": len(steps), "action": a,
                              "screenshot": f"replay:{task['id']}:{len(steps)}", "thought": thought_for(env, a),
                              "boost_responses": None})
                done = env.transition(a)
            tried += 1
            if md.evaluate_task(task, env.state) == 1.0:
                ok += 1
                kept.extend(steps)
    size = len(kept) if budget is None else min(budget, len(kept))
    pick = np.sort(rng.choice(len(kept), size=size, replace=False))
    for i in pick:
        kept[i]["keep"] = True
    info = {"rollouts": tried, "teacher_train_success": ok / max(tried, 1), "steps_available": len(kept),
            "steps_kept": int(len(pick))}
    return kept, info


def write_lines(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def read_lines(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(x) for x in f]


# ----------------------------------------------------------------------------- the raw layout, both scales
# PC Tracker's layout as the official postprocess/*.py walk it: events*/ folders of *task*.jsonl
# (one JSON object per step) with a sibling .md whose second line is "**Description:** <task>".
# Tiny writes its trajectories in it; tiny and full read them with the same three functions.
def find_tasks(root: Path) -> list[tuple[Path, Path]]:
    """(task jsonl, its .md) pairs under every events* folder, as prepare.py walks data/."""
    pairs = []
    for folder in sorted(p for p in Path(root).rglob("events*") if p.is_dir()):
        for jsonl in sorted(folder.glob("*task*.jsonl")):
            md_file = jsonl.with_suffix(".md")
            if md_file.is_file():
                pairs.append((jsonl, md_file))
    return pairs


def read_steps(path: Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]


def task_description(md_file: Path) -> str | None:
    lines = Path(md_file).read_text(encoding="utf-8").splitlines()
    return lines[1].replace("**Description:** ", "").strip() if len(lines) > 1 else None


def write_events(folder: Path, lines: list[dict], tasks: dict[str, dict]) -> int:
    """Writes trajectory lines in the raw layout: one task_<traj>.jsonl + .md per trajectory."""
    folder.mkdir(parents=True, exist_ok=True)
    by: dict[int, list[dict]] = {}
    for line in lines:
        by.setdefault(line["traj"], []).append(line)
    for traj, steps in by.items():
        task = tasks[steps[0]["task_id"]]
        (folder / f"task_{traj:07d}.md").write_text(f"# {task['id']}\n**Description:** {task['instruction']}\n")
        write_lines(folder / f"task_{traj:07d}.jsonl", sorted(steps, key=lambda x: x["step"]))
    return len(by)


def read_events(root: Path) -> list[dict]:
    """Trajectory lines of every task under `root` (find_tasks, read_steps); a step whose task
    description disagrees with its task's instruction is an error at the tensoriser."""
    lines = []
    for jsonl, md_file in find_tasks(root):
        description = task_description(md_file)
        lines.extend({**step, "description": description} for step in read_steps(jsonl))
    return lines


# ----------------------------------------------------------------------------- the loader
def examples(lines: list[dict], tasks: dict[str, dict], use_human: bool, use_boost: bool,
             only_kept: bool = False, boost_count: int = 9) -> dict[str, np.ndarray]:
    """Training examples (as prepare.py builds them): one per human step, plus one per kept boost
    response at that step, all sharing the step's screenshot and instruction; for distillation
    lines, one per kept teacher step. A step's boost responses are read as prepare.py reads them,
    `boost_responses[:boost_count]` (BOOST_CNT). Screenshots are re-rendered by replaying the trajectory.
    `correct` marks, per example, the correct next actions at its state (MiniDesk.correct_actions),
    for the fit measure (student.fit)."""
    env = md.MiniDesk(10 ** 6)
    obs, instr, prev, act, goal, correct = [], [], [], [], [], []
    by_traj: dict[int, list[dict]] = {}
    for line in lines:
        by_traj.setdefault(line["traj"], []).append(line)
    for traj in by_traj.values():
        traj.sort(key=lambda x: x["step"])
        task = tasks[traj[0]["task_id"]]
        if traj[0].get("description", task["instruction"]) != task["instruction"]:
            raise ValueError(f"trajectory of {task['id']}: its .md describes another task")
        env.reset(options={"task": task})
        last = "none"
        for line in traj:
            o = env.observe()
            ok = np.zeros(md.VOCAB, bool)
            ok[[i for i in map(md.vocab_index, env.correct_actions()) if i >= 0]] = True
            targets = []
            if use_human and (not only_kept or line.get("keep")):
                targets.append((line["action"], line["thought"]))
            if use_boost:
                for text in (line.get("boost_responses") or [])[:boost_count]:
                    if keep_boost(text, line["action"]):
                        thought, a = split_response(text)
                        targets.append((a, thought))
            for a, thought in targets:
                obs.append(o)
                instr.append(task["instruction"])
                prev.append(prev_kind(last))
                act.append(md.vocab_index(a))
                goal.append(thought_subgoal(thought))
                correct.append(ok)
            env.transition(line["action"])
            last = line["action"]
    return {"obs": np.asarray(obs, np.float32).reshape(-1, md.C, md.H, md.W), "instr": np.asarray(instr),
            "prev": np.asarray(prev, np.int64), "action": np.asarray(act, np.int64),
            "subgoal": np.asarray(goal, np.int64), "correct": np.asarray(correct, bool).reshape(-1, md.VOCAB)}


PREV_KINDS = ("none", "click", "hotkey", "type", "press", "wait", "scroll", "other")


@lru_cache(maxsize=4096)
def prev_kind(action: str) -> int:
    if action == "none":
        return 0
    p = md.parse(action)
    kind = p[0] if p else "other"
    return PREV_KINDS.index(kind) if kind in PREV_KINDS else len(PREV_KINDS) - 1


def coverage(lines: list[dict], tasks: dict[str, dict], boost_count: int) -> dict:
    """The pre-registered precondition of the Boost claims (audit 11, B1): the share of kept boost
    actions whose successor state type (screen kind, previous action's kind) occurs in the human
    data (any app). A kept action that ends the episode (finish, fail) counts as covered. Below
    0.9 a kept alternative leads the student into screens no example shows, and the Boost claims
    are untestable here."""
    env = md.MiniDesk(10 ** 6)
    by: dict[int, list[dict]] = {}
    for line in lines:
        by.setdefault(line["traj"], []).append(line)
    human, succ = set(), []
    for traj in by.values():
        env.reset(options={"task": tasks[traj[0]["task_id"]]})
        last = "none"
        for line in sorted(traj, key=lambda x: x["step"]):
            human.add((*env.state_type(), prev_kind(last)))
            for text in (line.get("boost_responses") or [])[:boost_count]:
                if keep_boost(text, line["action"]):
                    a = split_response(text)[1]
                    nxt = env.successor_type(a)
                    succ.append(None if nxt is None else (*nxt, prev_kind(a)))
            env.transition(line["action"])
            last = line["action"]
    covered = sum(s is None or s in human for s in succ)
    return {"boost_coverage": covered / max(len(succ), 1), "boost_kept": len(succ),
            "human_state_types": len(human)}


# ----------------------------------------------------------------------------- evaluation
def rollout(cfg: dict, tasks: list[dict], act_fn) -> np.ndarray:
    """Runs every task to `finish`/`fail` or env.max_steps; success = the evaluator on the final
    state. act_fn(envs, obs batch, prev kinds) -> action strings (one batched call per step)."""
    envs = [md.MiniDesk(cfg["env"]["max_steps"]) for _ in tasks]
    obs = [e.reset(options={"task": t})[0] for e, t in zip(envs, tasks)]
    prev = ["none"] * len(tasks)
    success = np.zeros(len(tasks))
    active = list(range(len(tasks)))
    while active:
        actions = act_fn([envs[i] for i in active], np.stack([obs[i] for i in active]),
                         [prev_kind(prev[i]) for i in active])
        still = []
        for i, a in zip(active, actions):
            obs[i], r, done, trunc, _ = envs[i].step(a)
            prev[i] = a
            if done or trunc:
                success[i] = r
            else:
                still.append(i)
        active = still
    return success


def teacher_actor(teacher: Teacher):
    def act(envs, obs, prev):
        return [teacher.action(e) for e in envs]
    return act
