"""The two learning algorithms of card 04, run on the same k labelled examples of a task.

- ICL: the k examples are in the prompt, then the query; no weight changes.
- SFT: the pretrained weights are fine-tuned on the same k examples, each in the zero-shot format
  (query text -> label token, cross-entropy over the vocabulary on the label token), then every
  query is asked zero-shot. Every task starts again from the pretrained weights (full
  fine-tuning, or a fresh LoRA adapter when train.lora is set).

Both return, for every query of the task, the probabilities of the two label tokens (renormalised
over them), the hidden states of every layer at the last prompt token, where the label is read,
and the learner's own label readout direction (unit E_A - E_B of its output embeddings).
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from . import data
from .model import encode, label_token_ids

PRECISIONS = ("fp32", "bf16", "bf16-mixed")


class Learners:
    def __init__(self, model, tokenizer, fmt: dict, train: dict, device: str):
        self.model, self.tokenizer, self.fmt, self.train, self.device = model, tokenizer, fmt, train, device
        self.label_ids = torch.tensor(label_token_ids(tokenizer, fmt), device=device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        precision = train["precision"]
        if precision not in PRECISIONS:
            raise ValueError(f"train.precision must be one of {PRECISIONS}, got {precision!r}")
        if train.get("sharding", "none") != "none":
            raise ValueError("train.sharding: a per-task fine-tune runs on one GPU here (none)")
        self._autocast = precision == "bf16-mixed" and device.startswith("cuda")
        self._initial = None

    def _amp(self):
        return torch.autocast("cuda", dtype=torch.bfloat16) if self._autocast else contextlib.nullcontext()

    def _batch(self, rows: list[list[int]]):
        width = max(len(r) for r in rows)
        if width > int(self.train["max_length"]):
            raise ValueError(f"a prompt has {width} tokens > train.max_length {self.train['max_length']}")
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):  # right padding: the real tokens' states ignore the pads
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        last = torch.tensor([len(r) - 1 for r in rows])
        return ids.to(self.device), mask.to(self.device), last.to(self.device)

    @torch.no_grad()
    def readout(self) -> np.ndarray:
        """The unit direction E_A - E_B of the label tokens' output embeddings (current weights)."""
        rows = self.model.get_output_embeddings().weight[self.label_ids].float()
        u = (rows[0] - rows[1]).cpu().numpy()
        return u / np.linalg.norm(u)

    @torch.no_grad()
    def ask(self, prompts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(label probabilities (n, 2), hidden states (layers + 1, n, d)) at each prompt's last token,
        and the readout direction (d,)."""
        self.model.eval()
        rows = encode(self.tokenizer, prompts)
        probs, hidden = [], []
        step = int(self.train["micro_batch_size"])
        for start in range(0, len(rows), step):
            ids, mask, last = self._batch(rows[start: start + step])
            with self._amp():
                out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            at = torch.arange(len(last), device=self.device)
            logits = out.logits[at, last][:, self.label_ids].float()
            probs.append(torch.softmax(logits, dim=-1).cpu().numpy())
            hidden.append(torch.stack([h[at, last].float() for h in out.hidden_states]).cpu().numpy())
        return np.concatenate(probs), np.concatenate(hidden, axis=1), self.readout()

    def queries(self, task: dict, shots: list) -> list[str]:
        return [data.prompt_text(self.fmt, shots, q) for q in task["queries"]]

    # ------------------------------------------------------------------ the two learners
    def icl(self, task: dict, k: int):
        return self.ask(self.queries(task, task["shots"][:k]))

    def sft(self, task: dict, k: int):
        self.reset()
        shots = task["shots"][:k]
        if shots:
            self.fine_tune(shots)
        answers = self.ask(self.queries(task, []))
        self.reset()   # the model outside sft() is always the pretrained one
        return answers

    def sft_tasks(self, tasks: list[dict], k: int) -> list:
        """sft() of every task; train.sft_parallel_tasks > 1 fine-tunes that many tasks at once
        (fine_tune_stacked: the same Adam, vectorised), the tiny scale's way through 16 tasks x 40
        steps on a CPU. Each task still starts from the pretrained weights."""
        group = int(self.train.get("sft_parallel_tasks", 1))
        if group <= 1 or k == 0 or self.train.get("lora"):
            return [self.sft(task, k) for task in tasks]
        self.reset()
        out = []
        for start in range(0, len(tasks), group):
            chunk = tasks[start: start + group]
            tuned = self.fine_tune_stacked([t["shots"][:k] for t in chunk])
            for i, task in enumerate(chunk):
                with torch.no_grad():
                    for name, p in self.model.named_parameters():
                        p.copy_(tuned[name][i])
                out.append(self.ask(self.queries(task, [])))
            self.reset()
        return out

    def fine_tune_stacked(self, shot_sets: list[list], snapshots: tuple[int, ...] = ()) -> dict:
        """fine_tune() of T tasks at once: every weight stacked T times, the T tasks' losses summed
        (each slice gets its own task's gradient) and one Adam over the stacked weights (Adam is
        elementwise, so each slice follows its own task's Adam exactly). The forward pass is the
        model's own, vmapped over the tasks with torch.func. Needs prompts of one length (no pads).
        snapshots: also return the weights after these step counts ({step: weights}, for tuning)."""
        from torch.func import functional_call, vmap

        rows = [encode(self.tokenizer, [data.prompt_text(self.fmt, [], s) for s in shots]) for shots in shot_sets]
        if len({len(r) for task in rows for r in task}) != 1 or len({len(task) for task in rows}) != 1:
            raise ValueError("train.sft_parallel_tasks > 1 needs prompts of one length and k per task; use 1")
        ids = torch.tensor(rows, device=self.device)                       # (T, k, L)
        target = self.label_ids[torch.tensor([[s[2] for s in shots] for shots in shot_sets], device=self.device)]
        stacked = {n: p.detach().unsqueeze(0).repeat(len(rows), *[1] * p.dim()).requires_grad_()
                   for n, p in self.model.named_parameters()}
        opt = torch.optim.AdamW(list(stacked.values()), lr=float(self.train["sft_lr"]), weight_decay=0.0)

        def task_loss(params, ids, target):
            logits = functional_call(self.model, params, (ids,), {"use_cache": False}).logits[:, -1]
            return torch.nn.functional.cross_entropy(logits.float(), target)

        self.model.train()
        kept = {}
        for step in range(1, int(self.train["sft_steps"]) + 1):
            vmap(task_loss)(stacked, ids, target).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if step in snapshots:
                kept[step] = {n: p.detach().clone() for n, p in stacked.items()}
        self.model.eval()
        final = {n: p.detach() for n, p in stacked.items()}
        return {**kept, "final": final} if snapshots else final

    def fine_tune(self, shots: list) -> list[float]:
        """train.sft_steps full-batch steps of Adam (AdamW without decay) on the k shots in the
        zero-shot format."""
        ids, mask, last = self._batch(encode(self.tokenizer, [data.prompt_text(self.fmt, [], s) for s in shots]))
        target = self.label_ids[torch.tensor([s[2] for s in shots], device=self.device)]
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=float(self.train["sft_lr"]), weight_decay=0.0)   # = Adam (card)
        self.model.train()
        at = torch.arange(len(shots), device=self.device)
        losses = []
        for _ in range(int(self.train["sft_steps"])):
            with self._amp():
                logits = self.model(input_ids=ids, attention_mask=mask).logits[at, last]
            loss = torch.nn.functional.cross_entropy(logits.float(), target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        self.model.eval()
        return losses

    def reset(self) -> None:
        """Back to the pretrained weights (or a fresh adapter): what every task's fine-tune starts from."""
        trainable = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        if self._initial is None:
            self._initial = {n: p.detach().clone() for n, p in trainable.items()}
            return
        with torch.no_grad():
            for n, p in trainable.items():
                p.copy_(self._initial[n])


def prepare_for_sft(model, train: dict, seed: int):
    """LoRA adapters (peft) when train.lora is set, else every weight trains; activation checkpointing."""
    if train.get("activation_checkpointing"):
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    lora = train.get("lora")
    if not lora:
        return model
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    return get_peft_model(model, LoraConfig(r=int(lora["r"]), lora_alpha=float(lora["alpha"]), lora_dropout=0.0,
                                            target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM"))
