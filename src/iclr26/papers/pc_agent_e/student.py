"""The from-scratch student (the tiny stand-in for Qwen2.5-VL-72B, card 11 section 6): a small
conv policy over the [C, 9, 16] screenshot, conditioned (FiLM) on the hashed bag of instruction
tokens and on the kind of the previous action (the history). Heads: one softmax over the action
vocabulary (144 click cells, the other action strings) and the auxiliary thought head (the
subgoal option), trained by cross-entropy as SFT on "thought, then action" targets.
"""
from __future__ import annotations

import math
import re
import zlib

import numpy as np
import torch
from torch import nn

from . import data
from . import minidesk as md


def bag_of_words(texts, vocab: int) -> np.ndarray:
    out = np.zeros((len(texts), vocab), np.float32)
    for i, text in enumerate(texts):
        for tok in re.findall(r"[a-z]+", str(text).lower()):
            out[i, zlib.crc32(tok.encode()) % vocab] = 1.0
    return out


class Policy(nn.Module):
    def __init__(self, width: int, vocab: int):
        super().__init__()
        self.conv1 = nn.Conv2d(md.C, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.instr = nn.Linear(vocab, width)
        self.film = nn.Linear(width, 2 * width)
        self.prev = nn.Embedding(len(data.PREV_KINDS), width)
        self.cell = nn.Conv2d(width, 1, 1)
        self.mlp = nn.Sequential(nn.Linear(4 * width, 4 * width), nn.ReLU())
        self.other = nn.Linear(4 * width, md.VOCAB - md.N_CLICK)
        self.goal = nn.Linear(4 * width, md.K + 1)

    def forward(self, obs, bow, prev):
        e = torch.relu(self.instr(bow)) + self.prev(prev)
        gamma, beta = self.film(e).chunk(2, dim=1)
        h = torch.relu(self.conv1(obs))
        h = torch.relu(self.conv2(h * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]))
        cells = self.cell(h).flatten(1)
        z = self.mlp(torch.cat([h.mean((2, 3)), h.amax((2, 3)), e, torch.relu(self.instr(bow))], 1))
        return torch.cat([cells, self.other(z)], 1), self.goal(z)


def build(cfg: dict, seed: int) -> Policy:
    torch.manual_seed(seed)
    return Policy(cfg["student"]["width"], cfg["student"]["vocab"])


def sft_steps(cfg: dict, n_examples: int) -> int:
    """Optimizer steps of `student.epochs` epochs over `n_examples` (the paper's rule: every arm
    trains the same number of epochs over its own data; train/sft.yaml: 2 epochs)."""
    sc = cfg["student"]
    return max(1, math.ceil(sc["epochs"] * n_examples / sc["batch_size"]))


def train(cfg: dict, ex: dict, seed: int, steps: int | None = None) -> tuple[Policy, list[float]]:
    """SFT, Adam, minibatches drawn uniformly: `steps` optimizer steps (default: student.epochs
    epochs over this arm's examples, sft_steps). The convolutions run channels_last and Adam
    updates all parameters in one foreach call (CPU speed only: the same arithmetic up to rounding)."""
    net = build(cfg, seed).to(memory_format=torch.channels_last)
    sc = cfg["student"]
    obs = torch.from_numpy(ex["obs"]).contiguous(memory_format=torch.channels_last)
    bow = torch.from_numpy(bag_of_words(ex["instr"], sc["vocab"]))
    prev, act, goal = (torch.from_numpy(ex[k]) for k in ("prev", "action", "subgoal"))
    opt = torch.optim.Adam(net.parameters(), lr=sc["lr"], foreach=True)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(sft_steps(cfg, len(ex["action"])) if steps is None else steps):
        idx = torch.randint(len(act), (sc["batch_size"],), generator=gen)
        logits, glog = net(obs[idx], bow[idx], prev[idx])
        loss = nn.functional.cross_entropy(logits, act[idx]) + sc["thought_weight"] * nn.functional.cross_entropy(
            glog, goal[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return net, losses


@torch.no_grad()
def fit(cfg: dict, net: Policy, ex: dict) -> dict:
    """How well the trained student fits its own training examples (the fit precondition, audit
    11b H1), from its greedy action on every example:
      train_acc  the plain training action accuracy (greedy action == the example's action);
      train_fit  the share of examples whose greedy action is one the arm's data teach at that same
                 input (screen, instruction, previous action) or a correct next action there
                 (MiniDesk.correct_actions). Label noise a generalising student need not memorise (the
                 human's idle steps, the teacher's wrong steps) and the choice between equally valid
                 routes (boost and distillation data hold several actions per state) do not count
                 against it; an under-trained student's wrong guesses do."""
    net.eval()
    bow = torch.from_numpy(bag_of_words(ex["instr"], cfg["student"]["vocab"]))
    obs, prev = torch.from_numpy(ex["obs"]), torch.from_numpy(ex["prev"])
    pred = np.concatenate([net(obs[i:i + 4096], bow[i:i + 4096], prev[i:i + 4096])[0].argmax(1).numpy()
                           for i in range(0, len(obs), 4096)]) if len(obs) else np.zeros(0, np.int64)
    act = ex["action"]
    keys = [(o.tobytes(), str(s), int(p)) for o, s, p in zip(ex["obs"], ex["instr"], ex["prev"])]
    taught: dict[tuple, set] = {}
    for k, a in zip(keys, act):
        taught.setdefault(k, set()).add(int(a))
    ok = [bool(ex["correct"][i, j]) or int(j) in taught[k] for i, (j, k) in enumerate(zip(pred, keys))]
    n = max(len(act), 1)
    return {"train_acc": float((pred == act).sum() / n), "train_fit": float(np.sum(ok) / n)}


@torch.no_grad()
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
                         [data.prev_kind(prev[i]) for i in active])
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


def student_actor(cfg: dict, net: Policy):
    net.eval()

    def act(envs, obs, prev):
        bow = torch.from_numpy(bag_of_words([e.task["instruction"] for e in envs], cfg["student"]["vocab"]))
        logits, _ = net(torch.from_numpy(obs), bow, torch.tensor(prev))
        return [md.action_string(int(j)) for j in logits.argmax(1)]
    return act


def teacher_actor(teacher: data.Teacher):
    def act(envs, obs, prev):
        return [teacher.action(e) for e in envs]
    return act
