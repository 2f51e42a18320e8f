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


def _instr_bow(instr, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(bag-of-words rows of the distinct instructions, each example's row index): bag_of_words of
    every example without hashing the same instruction once per example."""
    names, inverse = np.unique(np.asarray(instr, dtype=str), return_inverse=True)
    return torch.from_numpy(bag_of_words(names, vocab)), torch.from_numpy(inverse.astype(np.int64).reshape(-1))


class Stacked(nn.Module):
    """S independent Policies (one per seed) computed side by side: the convolutions grouped by seed,
    the linear layers batched matrix products over the seed axis. Seed s's outputs are those of its
    own Policy on its own batch; nothing mixes across seeds (Adam is elementwise), so training the
    stack equals training each Policy alone, up to floating-point rounding."""

    def __init__(self, nets: list[Policy]):
        super().__init__()
        self.S, self.w = len(nets), nets[0].conv1.out_channels
        sd = [n.state_dict() for n in nets]

        def cat(k):
            return nn.Parameter(torch.cat([d[k] for d in sd]).clone())

        def stack(k):
            return nn.Parameter(torch.stack([d[k] for d in sd]).clone())

        self.conv1_w, self.conv1_b = cat("conv1.weight"), cat("conv1.bias")
        self.conv2_w, self.conv2_b = cat("conv2.weight"), cat("conv2.bias")
        self.cell_w, self.cell_b = cat("cell.weight"), cat("cell.bias")
        self.prev = stack("prev.weight")
        self.lin = nn.ParameterDict()
        for name in ("instr", "film", "mlp.0", "other", "goal"):
            self.lin[name.replace(".", "_") + "_w"] = stack(f"{name}.weight")
            self.lin[name.replace(".", "_") + "_b"] = stack(f"{name}.bias")

    def _linear(self, name: str, x):   # x: [S, B, in] -> [S, B, out]
        return torch.baddbmm(self.lin[name + "_b"].unsqueeze(1), x, self.lin[name + "_w"].transpose(1, 2))

    def forward(self, obs, bow, prev):
        """obs [B, S*C, H, W] (seed-major channels), bow [S, B, vocab], prev [S, B]."""
        S, w = self.S, self.w
        B = obs.shape[0]
        ib = torch.relu(self._linear("instr", bow))
        e = ib + self.prev[torch.arange(S)[:, None], prev]
        gamma, beta = self._linear("film", e).chunk(2, dim=2)                      # [S, B, w]
        gamma = gamma.transpose(0, 1).reshape(B, S * w, 1, 1)
        beta = beta.transpose(0, 1).reshape(B, S * w, 1, 1)
        h = torch.relu(nn.functional.conv2d(obs, self.conv1_w, self.conv1_b, padding=1, groups=S))
        h = torch.relu(nn.functional.conv2d(h * (1 + gamma) + beta, self.conv2_w, self.conv2_b, padding=1, groups=S))
        cells = nn.functional.conv2d(h, self.cell_w, self.cell_b, groups=S).flatten(2).transpose(0, 1)   # [S, B, HW]
        pooled = torch.cat([h.mean((2, 3)).view(B, S, w), h.amax((2, 3)).view(B, S, w)], 2).transpose(0, 1)   # S, B, 2w
        z = torch.relu(self._linear("mlp_0", torch.cat([pooled, e, ib], 2)))
        return torch.cat([cells, self._linear("other", z)], 2), self._linear("goal", z)

    @torch.no_grad()
    def policy_state(self, s: int) -> dict:
        """Seed s's Policy state dict."""
        w = self.w
        out = {"conv1.weight": self.conv1_w[s * w:(s + 1) * w], "conv1.bias": self.conv1_b[s * w:(s + 1) * w],
               "conv2.weight": self.conv2_w[s * w:(s + 1) * w], "conv2.bias": self.conv2_b[s * w:(s + 1) * w],
               "cell.weight": self.cell_w[s:s + 1], "cell.bias": self.cell_b[s:s + 1],
               "prev.weight": self.prev[s]}
        for name in ("instr", "film", "mlp.0", "other", "goal"):
            out[f"{name}.weight"] = self.lin[name.replace(".", "_") + "_w"][s]
            out[f"{name}.bias"] = self.lin[name.replace(".", "_") + "_b"][s]
        return {k: v.detach().clone().contiguous() for k, v in out.items()}


def train_seeds(cfg: dict, exs: list[dict], seeds: list[int], steps: list[int | None] | None = None
                ) -> list[tuple[Policy, list[float]]]:
    """SFT of one student per seed (seed s: its examples exs[s], init build(cfg, seed), its own
    minibatch generator), Adam, minibatches drawn uniformly: steps[s] optimizer steps (None: student.epochs
    epochs over its examples, sft_steps). All seeds train side by side in one Stacked module (one
    optimizer step updates every seed; a seed's weights are taken after its own last step); the
    convolutions run channels_last and Adam is the fused kernel: CPU speed only, the same
    arithmetic as training each student alone up to rounding."""
    sc = cfg["student"]
    S, B = len(seeds), sc["batch_size"]
    n = [len(ex["action"]) for ex in exs]
    steps = [sft_steps(cfg, k) if t is None else t for k, t in zip(n, steps or [None] * S)]
    stack = Stacked([build(cfg, seed) for seed in seeds])
    # every seed's examples in one tensor (seed s's rows start at offset[s]); screens channels-last
    obs = torch.from_numpy(np.concatenate([ex["obs"] for ex in exs]).transpose(0, 2, 3, 1).copy())  # [N, H, W, C]
    bows, rows = [], []
    for ex in exs:
        table, inv = _instr_bow(ex["instr"], sc["vocab"])
        rows.append(inv + sum(len(b) for b in bows))
        bows.append(table)
    bow, bow_row = torch.cat(bows), torch.cat(rows)
    prev, act, goal = (torch.from_numpy(np.concatenate([ex[k] for ex in exs])) for k in ("prev", "action", "subgoal"))
    offset = torch.tensor(np.concatenate([[0], np.cumsum(n)[:-1]]), dtype=torch.int64)[:, None]
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    opt = torch.optim.Adam(stack.parameters(), lr=sc["lr"], fused=True)
    losses, final = [[] for _ in seeds], [stack.policy_state(s) if steps[s] == 0 else None for s in range(S)]
    C, H, W = md.C, md.H, md.W
    for t in range(1, max(steps) + 1):
        idx = torch.stack([torch.randint(k, (B,), generator=g) for k, g in zip(n, gens)]) + offset   # [S, B]
        x = obs[idx].permute(1, 2, 3, 0, 4).reshape(B, H, W, S * C).permute(0, 3, 1, 2)   # channels_last view
        logits, glog = stack(x, bow[bow_row[idx]], prev[idx])
        per = (nn.functional.cross_entropy(logits.reshape(S * B, -1), act[idx].reshape(-1), reduction="none")
               .view(S, B).mean(1) + sc["thought_weight"] * nn.functional.cross_entropy(
                   glog.reshape(S * B, -1), goal[idx].reshape(-1), reduction="none").view(S, B).mean(1))
        opt.zero_grad()
        per.sum().backward()
        opt.step()
        for s, v in enumerate(per.detach().tolist()):
            if t <= steps[s]:
                losses[s].append(v)
            if t == steps[s]:
                final[s] = stack.policy_state(s)
    out = []
    for s, seed in enumerate(seeds):
        net = build(cfg, seed)
        net.load_state_dict(final[s])
        out.append((net, losses[s]))
    return out


def train(cfg: dict, ex: dict, seed: int, steps: int | None = None) -> tuple[Policy, list[float]]:
    """One student (train_seeds for a single seed)."""
    return train_seeds(cfg, [ex], [seed], [steps])[0]


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
    n = len(ex["action"])
    if not n:
        return {"train_acc": 0.0, "train_fit": 0.0}
    # the input key (screen, instruction, previous action) of every example, as integer ids
    flat = np.ascontiguousarray(ex["obs"]).reshape(n, -1)
    obs_id = np.unique(flat.view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel(), return_inverse=True)[1]
    instr_id = np.unique(np.asarray(ex["instr"], dtype=str), return_inverse=True)[1]
    keys = np.stack([obs_id.reshape(-1), instr_id.reshape(-1), np.asarray(ex["prev"], np.int64)], 1)
    _, first, key = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    key = key.reshape(-1)
    # the greedy action once per distinct input (examples at the same input share it)
    bow = torch.from_numpy(bag_of_words(ex["instr"][first], cfg["student"]["vocab"]))
    obs, prev = torch.from_numpy(ex["obs"][first]), torch.from_numpy(ex["prev"][first])
    pred = np.concatenate([net(obs[i:i + 1024], bow[i:i + 1024], prev[i:i + 1024])[0].argmax(1).numpy()
                           for i in range(0, len(first), 1024)])[key]
    act = ex["action"]
    code = md.VOCAB + 1   # actions -1 (outside the vocabulary) .. VOCAB - 1
    taught = np.unique(key * code + act + 1)   # (input key, action) pairs the arm's data teach
    ok = ex["correct"][np.arange(n), pred] | np.isin(key * code + pred + 1, taught)
    return {"train_acc": float((pred == act).sum() / n), "train_fit": float(np.sum(ok) / n)}


rollout = data.rollout   # the evaluation loop (no torch: the teacher row runs without it)


def student_actor(cfg: dict, net: Policy):
    net.eval()
    rows: dict[str, np.ndarray] = {}   # an instruction's bag of words, hashed once

    def act(envs, obs, prev):
        for e in envs:
            if e.task["instruction"] not in rows:
                rows[e.task["instruction"]] = bag_of_words([e.task["instruction"]], cfg["student"]["vocab"])[0]
        bow = torch.from_numpy(np.stack([rows[e.task["instruction"]] for e in envs]))
        with torch.no_grad():
            logits, _ = net(torch.from_numpy(obs), bow, torch.tensor(prev))
        return [md.action_string(int(j)) for j in logits.argmax(1)]
    return act


teacher_actor = data.teacher_actor
