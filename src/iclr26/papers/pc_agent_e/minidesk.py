"""MiniDesk: the card's tiny desktop (card 11, section 6) behind gymnasium's `Env` interface.

A notional 1280x720 screen is a 9 x 16 grid of 80 px cells. A task asks to turn on one to three
options of an app's settings. The app window is open at the start (the task's `config` launches
it, OSWorld style). Two valid routes toggle an option:

    menu route    click the Settings button -> the menu lists the options at the task's cells ->
                  click the option's item (toggles it, closes the menu)
    search route  hotkey (ctrl, f) -> type text: <option name> -> press key: enter (toggles it)

then `finish`. The scripted human keeps to one preferred route per app (config `human.search_apps`
use the search route, the others the menu route), so both routes' screens occur in the human data.
Clicking elsewhere while the menu is open closes it; `press key: escape` closes the
menu or the search box; every other action of the 12-action space is a no-op. The status bar
(row 8) shows each option's name and state. The task's evaluator (OSWorld keys: `func`, `result`,
`expected`) checks only the final option states, as WAA-V2 does.

The observation ("screenshot") is a [C, 9, 16] float tensor: element-type channels (window,
settings button, menu item, search box, status cell, distractor button), an on-state channel and
one label channel per option name. Actions are the strings of the paper's action space
(card 11, section 2) with coordinates at cell centres in 1280x720 pixels, parsed by `parse`.
"""
from __future__ import annotations

import re
from functools import lru_cache

import gymnasium as gym
import numpy as np

H, W, CELL = 9, 16, 80
APPS = ("libreoffice", "chrome", "edge", "system", "vs_code", "vlc", "utils")   # the WAA-V2 columns
APP_WORDS = ("LibreOffice", "Chrome", "Edge", "System", "VS Code", "VLC", "Utils")
OPTIONS = ("autosave", "darkmode", "spellcheck", "sync", "autoplay", "telemetry", "wordwrap", "notifications")
K = len(OPTIONS)
T_WINDOW, T_BUTTON, T_ITEM, T_SEARCH, T_STATUS, T_DISTRACT, T_ON = range(7)
C = 7 + K
MAIN, MENU, SEARCH = 0, 1, 2

# the student's discrete action vocabulary: 144 clicks, then the other strings
OTHER = ("hotkey (ctrl, f)", "press key: enter", "press key: escape", "wait", "finish", "fail", "scroll (-1)")
N_CLICK = H * W
VOCAB = N_CLICK + len(OTHER) + K


@lru_cache(maxsize=4096)
def click(cell: int) -> str:
    r, c = divmod(int(cell), W)
    return f"click ({c * CELL + CELL // 2}, {r * CELL + CELL // 2})"


def action_string(index: int) -> str:
    if index < N_CLICK:
        return click(index)
    if index < N_CLICK + len(OTHER):
        return OTHER[index - N_CLICK]
    return f"type text: {OPTIONS[index - N_CLICK - len(OTHER)]}"


_CLICK = re.compile(r"^(click|right click|double click) \((-?\d+), ?(-?\d+)\)$")


@lru_cache(maxsize=65536)
def parse(action: str) -> tuple[str, object] | None:
    """(kind, argument) of an action string of the 12-action space; None if it does not parse
    (a pure function of the string, cached: the scripted agents parse the same few strings often)."""
    action = action.strip()
    if m := _CLICK.match(action):
        x, y = int(m.group(2)), int(m.group(3))
        if not (0 <= x < W * CELL and 0 <= y < H * CELL):
            return None
        return m.group(1), (y // CELL) * W + x // CELL
    for prefix, kind in (("type text: ", "type"), ("press key: ", "press"), ("hotkey (", "hotkey")):
        if action.startswith(prefix):
            rest = action[len(prefix):]
            return (kind, tuple(k.strip() for k in rest.rstrip(")").split(","))) if kind == "hotkey" else (kind, rest)
    if re.match(r"^drag from \(\d+, ?\d+\) to \(\d+, ?\d+\)$", action):
        return "drag", None
    if re.match(r"^scroll \(-?\d+\)$", action):
        return "scroll", None
    if action in ("wait", "finish", "fail"):
        return action, None
    return None


def vocab_index(action: str) -> int:
    """The student's index of an action string; -1 for a valid action outside its vocabulary."""
    p = parse(action)
    if p is None:
        raise ValueError(f"unparsable action {action!r}")
    kind, arg = p
    if kind == "click":
        return int(arg)
    if kind == "type" and arg in OPTIONS:
        return N_CLICK + len(OTHER) + OPTIONS.index(arg)
    return N_CLICK + OTHER.index(action) if action in OTHER else -1


def instruction_text(app: int, targets) -> str:
    names = [OPTIONS[t] for t in targets]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"In {APP_WORDS[app]}, turn on {joined} in the settings."


def make_task(rng: np.random.Generator, app: int, split: str, index: int, n_distractors: int,
              max_targets: int) -> dict:
    """One task in OSWorld's task-JSON layout (id, snapshot, instruction, source, config,
    related_apps, evaluator {func, result, expected}); `config` holds the app launch and the
    MiniDesk layout (the task's initial state)."""
    cells = rng.choice(np.arange(W, (H - 1) * W), size=K + n_distractors + 1, replace=False)
    n_targets = int(rng.integers(1, max_targets + 1))
    targets = sorted(rng.choice(K, size=n_targets, replace=False).tolist())
    initial = (rng.random(K) < 0.3).astype(int)
    initial[targets] = 0
    expected = initial.copy()
    expected[targets] = 1
    return {
        "id": f"minidesk-{split}-{APPS[app]}-{index:04d}",
        "snapshot": APPS[app],
        "instruction": instruction_text(app, targets),
        "source": "MiniDesk (synthetic, card 11 section 6)",
        "config": [
            {"type": "launch", "parameters": {"command": [APPS[app]]}},
            {"type": "minidesk_layout", "parameters": {
                "settings_button": int(rng.integers(0, W)),
                "items": [int(c) for c in cells[:K]],
                "distractors": [int(c) for c in cells[K:K + n_distractors]],
                "search_box": int(cells[-1]),
                "options": [int(v) for v in initial]}},
        ],
        "related_apps": [APPS[app]],
        "evaluator": {"func": "exact_match",
                      "result": {"type": "vm_option_states", "app": APPS[app]},
                      "expected": {"type": "rule", "rules": {"match": [int(v) for v in expected]}}},
        "targets": targets,
    }


def evaluate_task(task: dict, state: dict) -> float:
    """The task's evaluator on the final state only (OSWorld's func/result/expected)."""
    ev = task["evaluator"]
    if ev["func"] != "exact_match" or ev["result"]["type"] != "vm_option_states":
        raise ValueError(f"unknown evaluator {ev}")
    return float(list(map(int, state["options"])) == list(ev["expected"]["rules"]["match"]))


class MiniDesk(gym.Env):
    """One task per episode: `reset(options={"task": task_json})`; `step(action_string)`."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(0.0, 1.0, (C, H, W), np.float32)   # one per class: nothing samples them
    action_space = gym.spaces.Text(max_length=128)

    def __init__(self, max_steps: int = 30):
        self.max_steps = max_steps

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = options["task"]
        layout = next(c["parameters"] for c in self.task["config"] if c["type"] == "minidesk_layout")
        self.layout = layout
        self.state = {"panel": MAIN, "typed": None, "options": np.array(layout["options"], int)}
        self.t = 0
        return self.observe(), {}

    def observe(self) -> np.ndarray:
        obs = np.zeros((C, H, W), np.float32)
        obs[T_WINDOW, :H - 1] = 1.0
        lay, st = self.layout, self.state
        obs[T_BUTTON, 0, lay["settings_button"]] = 1.0
        for cell in lay["distractors"]:
            obs[T_DISTRACT, cell // W, cell % W] = 1.0
        for k in range(K):   # the status bar
            obs[T_STATUS, H - 1, k] = 1.0
            obs[7 + k, H - 1, k] = 1.0
            obs[T_ON, H - 1, k] = float(st["options"][k])
        if st["panel"] == MENU:
            for k, cell in enumerate(lay["items"]):
                r, c = divmod(cell, W)
                obs[T_ITEM, r, c] = 1.0
                obs[7 + k, r, c] = 1.0
                obs[T_ON, r, c] = float(st["options"][k])
        elif st["panel"] == SEARCH:
            r, c = divmod(lay["search_box"], W)
            obs[T_SEARCH, r, c] = 1.0
            if st["typed"] in OPTIONS:
                obs[7 + OPTIONS.index(st["typed"]), r, c] = 1.0
        return obs

    def transition(self, action: str) -> bool:
        """Applies one action to the state; True when the episode ends (finish or fail)."""
        p = parse(action)
        st, lay = self.state, self.layout
        if p is None:
            return False
        kind, arg = p
        if kind in ("finish", "fail"):
            return True
        if st["panel"] == MAIN:
            if kind == "click" and arg == lay["settings_button"]:
                st["panel"] = MENU
            elif kind == "hotkey" and arg == ("ctrl", "f"):
                st["panel"], st["typed"] = SEARCH, None
        elif st["panel"] == MENU:
            if kind == "click":
                if arg in lay["items"]:
                    k = lay["items"].index(arg)
                    st["options"][k] = 1 - st["options"][k]
                st["panel"] = MAIN
            elif kind == "press" and arg == "escape":
                st["panel"] = MAIN
        elif st["panel"] == SEARCH:
            if kind == "type":
                st["typed"] = arg
            elif kind == "press" and arg == "enter":
                if st["typed"] in OPTIONS:
                    k = OPTIONS.index(st["typed"])
                    st["options"][k] = 1 - st["options"][k]
                st["panel"], st["typed"] = MAIN, None
            elif kind == "press" and arg == "escape":
                st["panel"], st["typed"] = MAIN, None
        return False

    def step(self, action: str):
        self.t += 1
        done = self.transition(action)
        truncated = not done and self.t >= self.max_steps
        reward = evaluate_task(self.task, self.state) if done or truncated else 0.0
        return self.observe(), reward, done, truncated, {}

    # ------------------------------------------------------------ what the scripted agents read
    def remaining(self) -> list[int]:
        """Options whose state differs from the evaluator's expected state (targets first)."""
        want, have = self.task["evaluator"]["expected"]["rules"]["match"], self.state["options"].tolist()
        wrong = [k for k in range(K) if have[k] != want[k]]
        return sorted(wrong, key=lambda k: (k not in self.task["targets"], k))

    def correct_actions(self) -> list[str]:
        """Every next action that makes progress on some valid route (the teacher's 1 - eps set)."""
        st, lay, rem = self.state, self.layout, self.remaining()
        if st["panel"] == MAIN:
            return ["finish"] if not rem else [click(lay["settings_button"]), "hotkey (ctrl, f)"]
        if st["panel"] == MENU:
            return ["press key: escape"] if not rem else [click(lay["items"][t]) for t in rem]
        typed = st["typed"]
        if typed is None:
            return [f"type text: {OPTIONS[t]}" for t in rem] if rem else ["press key: escape"]
        if typed in OPTIONS and OPTIONS.index(typed) in rem:
            return ["press key: enter"]
        return ["press key: escape"]

    def wrong_actions(self) -> list[str]:
        """Plausible wrong next actions (the teacher's eps set, card 11 section 6: a wrong menu
        item, a wrong cell, a wrong name, finishing early)."""
        st, lay, rem = self.state, self.layout, self.remaining()
        others = [k for k in range(K) if k not in rem]
        if st["panel"] == MAIN:
            return ([click(c) for c in lay["distractors"]] + ["finish"]) if rem else [
                click(lay["settings_button"]), "hotkey (ctrl, f)"]
        if st["panel"] == MENU:
            return [click(lay["items"][k]) for k in others] + [click(c) for c in lay["distractors"]]
        if st["typed"] is None:
            return [f"type text: {OPTIONS[k]}" for k in others] or ["press key: escape"]
        return ["press key: escape"] if st["typed"] in OPTIONS and OPTIONS.index(st["typed"]) in rem else [
            "press key: enter"]

    def human_action(self, route: str = "menu") -> str:
        """The scripted human: one preferred route per app (card 11 section 6; `route` is "menu"
        or "search", set per app by the config), targets in the instruction's order."""
        st, lay, rem = self.state, self.layout, self.remaining()
        if st["panel"] == MAIN:
            if not rem:
                return "finish"
            return click(lay["settings_button"]) if route == "menu" else "hotkey (ctrl, f)"
        if st["panel"] == MENU:
            return click(lay["items"][rem[0]]) if rem else "press key: escape"
        if st["typed"] is None:
            return f"type text: {OPTIONS[rem[0]]}" if rem else "press key: escape"
        return "press key: enter" if st["typed"] in OPTIONS and OPTIONS.index(st["typed"]) in rem else (
            "press key: escape")

    def state_type(self) -> tuple[int, bool]:
        """The screen kind (panel, and whether the search box holds text), for the coverage check."""
        return int(self.state["panel"]), self.state["typed"] is not None

    def successor_type(self, action: str) -> tuple[int, bool] | None:
        """state_type() after `action`, the state left unchanged; None when the action ends the episode."""
        saved = {**self.state, "options": self.state["options"].copy()}
        done = self.transition(action)
        out = None if done else self.state_type()
        self.state = saved
        return out

    def subgoal(self) -> int:
        """The thought's subgoal token: the option being worked on (K: finishing)."""
        rem = self.remaining()
        if self.state["panel"] == SEARCH and self.state["typed"] in OPTIONS:
            k = OPTIONS.index(self.state["typed"])
            if k in rem:
                return k
        return rem[0] if rem else K
