"""Full scale of card 02: GRPO of a Qwen2.5-VL model (LoRA through peft) as a zoom-and-answer agent
on VQA-RAD's real parquet, with EVR and CCA as in the tiny agent (agent.py), token by token.

Why hand-written and not TRL's GRPOTrainer: its rollouts are single-turn text completions; MedVR's
tool returns an *image* (the crop), re-encoded as a new vision turn, EVR branches a rollout from its
prefix, and CCA gives the tool-call tokens their own advantage. None of these fit the trainer's
reward-function interface, so the rollout loop and the loss are here (the model, the processor and
LoRA are transformers' and peft's).

Trajectory format (Qwen2.5-VL's chat format with Qwen's function-calling block and DeepEyes' tool,
written literally so the token ids are built piece by piece: what the policy sampled is exactly
what is scored, never re-tokenised):
    <|im_start|>system SYSTEM (# Tools ... image_zoom_in_tool ...)<|im_end|>
    <|im_start|>user <image> question<|im_end|>
    <|im_start|>assistant ... <tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [x1, y1, x2, y2]}}
    </tool_call><|im_end|>                                                         (a tool call)
    <|im_start|>user <tool_response><crop image></tool_response><|im_end|>
    <|im_start|>assistant ... <answer>a</answer><|im_end|>
The image is smart-resized once (Qwen's rule: multiples of 28 px within [min_pixels, max_pixels]) and
that copy is what the model sees and what the tool crops (as verl/DeepEyes crop the fetched, resized
image), so the box's pixel coordinates are the model's own frame. The tool clamps the box (at least
`min_crop` px a side) and returns the crop as a new image turn (the processor's min_pixels upsamples
small crops; no other resize). Rollouts of a group are generated together: one left-padded
`generate` call per turn for all trajectories still running.
Reward (every arm, DeepEyes' vl_agent reward): 0.8 acc + 0.2 format + 1.2 1[tool used and acc],
format = -1 when the <answer> tags are unbalanced or missing; acc = exact match after normalisation
(DeepEyes asks an LLM judge; none is run here). global_only has no tool, so its tool term is 0.
GRPO: group-normalised rewards, on-policy single step (ratio 1, no clipping, no KL, as DeepEyes'
recipe sets KL to 0); loss = -sum over sampled tokens of A_token * log pi(token) / sampled tokens.
EVR: a rollout whose final turn's mean token entropy exceeds tau, and that has a turn left after a
new zoom, branches from the state before that turn with a forced new tool call (its opening is
given, not sampled); the branch counts its turns from the prefix (at most `max_turns` in all); the
prefix tokens are credited once with the mean advantage of the rollouts sharing them. CCA: pseudo
box = coordinate-wise median of the correct rollouts' last boxes (at least `cca_min_correct`, mean
IoU to it >= `cca_agree`); the tool-call tokens' reward is R + lambda acc IoU(box, pseudo box)
(paid on correct answers only). grpo_step logs how often CCA's pseudo box exists (cca_fire_rate)
and how often EVR branches (evr_branch_rate).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

TOOL = {"type": "function", "function": {
    "name": "image_zoom_in_tool",
    "description": "Zoom in on a region of the image by cropping it to a bounding box.",
    "parameters": {"type": "object", "required": ["bbox_2d"], "properties": {
        "bbox_2d": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                    "description": "The region as [x1, y1, x2, y2] in pixels of the image: (x1, y1) top left, "
                                   "(x2, y2) bottom right."}}}}}
SYSTEM = ("You answer questions about a medical image. Give the final answer as <answer>...</answer>.\n\n"
          "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
          + json.dumps(TOOL) + "\n</tools>\n\nFor each function call, return a json object with function name "
          "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
          '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
TOOL_OPEN = '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": ['   # EVR's forced opening
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


# ----------------------------------------------------------------------------- text and boxes
def normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", str(text).lower()).strip()


def parse_zoom(text: str):
    """The bbox_2d of the first image_zoom_in_tool call, or None (no call, bad JSON, bad box)."""
    m = TOOL_CALL_RE.search(text)
    if not m:
        return None
    try:
        call = json.loads(m.group(1).strip())
        box = call["arguments"]["bbox_2d"]
        if call.get("name") != "image_zoom_in_tool" or len(box) != 4:
            return None
        return [float(v) for v in box]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def deepeyes_reward(texts: list, answer: str, used_tool: bool) -> tuple[float, float]:
    """DeepEyes' reward (verl recipe/deepeyes reward_function.compute_score): 0.8 acc + 0.2 format +
    1.2 1[tool used and acc]; format = -1 when the answer tags (over all turns) are unbalanced or there
    is no answer.
    Returns (reward, acc)."""
    every = "".join(texts)
    pred = answer_of_texts(texts)
    acc = correct(pred, answer)
    bad = every.count("<answer>") != every.count("</answer>") or pred is None or len(pred) >= 1000
    acc = 0.0 if pred is not None and len(pred) >= 1000 else acc
    return 0.8 * acc + 0.2 * (-1.0 if bad else 0.0) + 1.2 * float(used_tool and acc > 0.5), acc


def answer_of_texts(texts: list):
    for text in reversed(texts):
        pred = parse_answer(text)
        if pred is not None:
            return pred
    return None


def parse_answer(text: str):
    m = ANSWER_RE.search(text)
    return m.group(1).strip() if m else None


def correct(pred, answer: str) -> float:
    """Exact match after normalisation (VQA-RAD closed and open answers)."""
    return float(pred is not None and normalise(pred) == normalise(answer))


def clamp_box(box, width: int, height: int, min_crop: int) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = box
    x1, x2 = sorted((max(0.0, min(x1, width)), max(0.0, min(x2, width))))
    y1, y2 = sorted((max(0.0, min(y1, height)), max(0.0, min(y2, height))))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    w, h = max(x2 - x1, min(min_crop, width)), max(y2 - y1, min(min_crop, height))
    x1, y1 = min(max(0.0, cx - w / 2), width - w), min(max(0.0, cy - h / 2), height - h)
    return int(round(x1)), int(round(y1)), int(round(x1 + w)), int(round(y1 + h))


def model_view(image, min_pixels: int, max_pixels: int):
    """The image as the model sees it: Qwen2.5-VL's smart_resize (sides multiples of 28 within the
    pixel range), done once here so the tool crops the same frame the box was written in."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    h, w = smart_resize(image.height, image.width, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
    return image if (w, h) == image.size else image.resize((w, h), resample=3)   # bicubic, as the processor


def zoom(image, box, min_crop: int):
    """The tool: crop the (clamped) box of the model's view; the processor sizes the crop."""
    return image.crop(clamp_box(box, image.width, image.height, min_crop))


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def consensus_box(boxes, rewards, min_correct: int, agree: float):
    """CCA's pseudo box: median of the correct rollouts' boxes, or None without enough agreement."""
    ok = [b for b, r in zip(boxes, rewards) if r > 0 and b is not None]
    if len(ok) < min_correct:
        return None
    med = list(np.median(np.asarray(ok, float), 0))
    return med if np.mean([iou(b, med) for b in ok]) >= agree else None


def group_advantage(r: np.ndarray) -> np.ndarray:
    return (r - r.mean()) / (r.std() + 1e-6)


# ----------------------------------------------------------------------------- trajectories
@dataclass
class Trajectory:
    """Token pieces of one rollout: ids, which were sampled (mask), which turn each token is in,
    the images in order, and the per-turn texts, boxes and entropies."""
    ids: list = field(default_factory=list)
    sampled: list = field(default_factory=list)
    turn: list = field(default_factory=list)
    images: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    boxes: list = field(default_factory=list)
    entropy: list = field(default_factory=list)
    parent: int | None = None
    prefix_len: int = 0
    view: object = None      # the smart-resized image the model sees (the tool crops it)
    done: bool = False

    def copy_prefix(self, n_turns: int, n_tokens: int, n_images: int) -> Trajectory:
        return Trajectory(self.ids[:n_tokens], [0] * n_tokens, self.turn[:n_tokens], self.images[:n_images],
                          self.texts[:n_turns], self.boxes[:n_turns], self.entropy[:n_turns], None, n_tokens,
                          self.view)


class Agent:
    """The policy: a Qwen2.5-VL model (with LoRA adapters when training) and its processor."""

    def __init__(self, model, processor, spec: dict, device: str):
        self.model, self.processor, self.spec, self.device = model, processor, spec, device
        self.tok = processor.tokenizer
        self.training = False   # load_agent sets it when the model has trainable adapters
        self.im_end = self.tok.convert_tokens_to_ids("<|im_end|>")
        # vision placeholders are never sampled (a sampled <|image_pad|> would have no image features)
        self.no_vision = [self.tok.convert_tokens_to_ids(t) for t in
                          ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")]

    def encode(self, text: str, image=None):
        """Token ids of a text piece (its <|image_pad|> expanded for the image) and the image's inputs."""
        if image is None:
            return self.tok(text, add_special_tokens=False)["input_ids"], None
        out = self.processor(text=[text], images=[image], return_tensors="pt")
        return out["input_ids"][0].tolist(), (out["pixel_values"], out["image_grid_thw"])

    def extend(self, traj: Trajectory, text: str, image=None) -> None:
        ids, vis = self.encode(text, image)
        traj.ids += ids
        traj.sampled += [0] * len(ids)
        traj.turn += [-1] * len(ids)
        if vis is not None:
            traj.images.append(vis)

    def start(self, image, question: str) -> Trajectory:
        traj = Trajectory()
        traj.view = model_view(image, self.spec["min_pixels"], self.spec["max_pixels"])
        self.extend(traj, f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
                          f"<|vision_start|><|image_pad|><|vision_end|>{question}<|im_end|>\n"
                          f"<|im_start|>assistant\n", traj.view)
        return traj

    def vision(self, trajs: list):
        import torch

        images = [v for tr in trajs for v in tr.images]
        if not images:
            return {}
        return {"pixel_values": torch.cat([v[0] for v in images]).to(self.device),
                "image_grid_thw": torch.cat([v[1] for v in images]).to(self.device)}

    def generate_turns(self, trajs: list, greedy: bool, forced: str = "") -> list[str]:
        """Sample one assistant turn for each trajectory in one left-padded `generate` call (after
        `forced` text, which is given, not sampled); record its tokens, the mean token entropy of the
        sampled part, and its text."""
        import torch

        if forced:
            for tr in trajs:
                self.extend(tr, forced)
        L = max(len(tr.ids) for tr in trajs)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.im_end
        ids = torch.tensor([[pad] * (L - len(tr.ids)) + tr.ids for tr in trajs], device=self.device)
        mask = torch.tensor([[0] * (L - len(tr.ids)) + [1] * len(tr.ids) for tr in trajs], device=self.device)
        s = self.spec
        # plain sampling at the given temperature: the hub's generation_config (Qwen2.5-VL: top_k 1,
        # top_p 0.001) would make every rollout of a group the same, and GRPO's advantages zero
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": s["temperature"],
                                                        "top_p": 1.0, "top_k": 0}
        self.model.eval()   # the KV cache on (gradient checkpointing turns it off in train mode)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **self.vision(trajs),
                                      **sampling, repetition_penalty=1.0, max_new_tokens=s["max_new_tokens"],
                                      eos_token_id=self.im_end, pad_token_id=pad, suppress_tokens=self.no_vision,
                                      output_logits=True, return_dict_in_generate=True)
        logits_all = torch.stack(out.logits, 1).float() if out.logits else None   # [B, T, V]
        texts = []
        for b, tr in enumerate(trajs):
            new = out.sequences[b, L:].tolist()
            if self.im_end not in new:
                new.append(self.im_end)
            new = new[:new.index(self.im_end) + 1]
            logits = logits_all[b, :len(new)] if logits_all is not None else None
            if logits is not None and len(logits):
                p = torch.log_softmax(logits, -1)
                ent = float(-(p.exp() * p).sum(-1).mean())
            else:
                ent = 0.0
            k = len(tr.texts)
            tr.ids += new
            tr.sampled += [1] * len(new)
            tr.turn += [k] * len(new)
            text = forced + self.tok.decode(new, skip_special_tokens=True)
            tr.texts.append(text)
            tr.entropy.append(ent)
            tr.boxes.append(None)
            texts.append(text)
        return texts

    def generate_turn(self, traj: Trajectory, greedy: bool, forced: str = "") -> str:
        return self.generate_turns([traj], greedy, forced)[0]

    def rollouts(self, trajs: list, greedy: bool, use_tool: bool, forced: str = "") -> list:
        """Continue trajectories to an answer together: at most `max_turns` assistant turns in all
        (a branch counts its prefix's turns); each tool call is answered with the zoomed crop of the
        model's view as a new image turn; a trajectory stops before it would pass `max_length` tokens."""
        s = self.spec
        limit = s.get("max_length")
        live = [tr for tr in trajs if len(tr.texts) < s["max_turns"]]
        first = True
        while live:
            if limit:
                for tr in live:
                    tr.done = len(tr.ids) + s["max_new_tokens"] > limit
                live = [tr for tr in live if not tr.done]
                if not live:
                    break
            texts = self.generate_turns(live, greedy, forced if first else "")
            first = False
            nxt = []
            for tr, text in zip(live, texts):
                box = parse_zoom(text) if use_tool else None
                if box is None or parse_answer(text) is not None or len(tr.texts) >= s["max_turns"]:
                    continue
                tr.boxes[-1] = list(clamp_box(box, tr.view.width, tr.view.height, s["min_crop"]))
                self.extend(tr, "\n<|im_start|>user\n<tool_response><|vision_start|><|image_pad|><|vision_end|>"
                                "</tool_response><|im_end|>\n<|im_start|>assistant\n",
                            zoom(tr.view, box, s["min_crop"]))
                nxt.append(tr)
            live = nxt
        return trajs

    def rollout(self, traj: Trajectory, image, greedy: bool, use_tool: bool, forced: str = "") -> Trajectory:
        """One trajectory (the batched `rollouts` with a batch of one); `image` is kept for the
        callers' signature: the tool crops the trajectory's own view."""
        return self.rollouts([traj], greedy, use_tool, forced)[0]

    # ------------------------------------------------------------------------- scoring
    def token_logps(self, traj: Trajectory):
        """log pi of every token given its prefix (one forward pass with all the trajectory's images)."""
        import torch

        ids = torch.tensor([traj.ids], device=self.device)
        self.model.train(self.training)   # train mode: gradient checkpointing on (no dropout in Qwen2.5-VL)
        logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), **self.vision([traj])).logits
        logp = torch.log_softmax(logits[0, :-1].float(), -1)
        return logp.gather(1, ids[0, 1:, None])[:, 0]   # [T-1]: token t+1 given 0..t


def answer_of(traj: Trajectory):
    return answer_of_texts(traj.texts)


def last_box(traj: Trajectory):
    boxes = [b for b in traj.boxes if b is not None]
    return boxes[-1] if boxes else None


def group_rollouts(agent: Agent, image, question: str, answer: str, arm: str, t: dict) -> list[Trajectory]:
    """G rollouts of one question, generated together; EVR adds the branches of the uncertain ones
    (also generated together). Each trajectory gets DeepEyes' reward and its accuracy."""
    use_tool = arm != "global_only"
    G = t["group_matched"] if arm == "outcome_grpo_matched" else t["group"]
    start = agent.start(image, question)
    trajs = agent.rollouts([start] + [start.copy_prefix(0, len(start.ids), 1) for _ in range(G - 1)], False,
                           use_tool)
    for tr in trajs:
        tr.prefix_len = 0
    if arm in ("evr", "medvr"):
        branches = []
        for i in range(G):
            tr = trajs[i]
            # the uncertain final turn is replaced by a new zoom and an answer: two turns must remain
            if tr.entropy[-1] <= t["evr_tau"] or len(tr.texts) + 1 > agent.spec["max_turns"]:
                continue
            # the state before the uncertain final turn: the prefix shared with the branch
            cut = tr.turn.index(len(tr.texts) - 1)
            n_images = 1 + sum(b is not None for b in tr.boxes[:-1])
            branch = tr.copy_prefix(len(tr.texts) - 1, cut, n_images)
            branch.parent = i
            branches.append(branch)
        if branches:
            trajs += agent.rollouts(branches, False, use_tool, forced=TOOL_OPEN)
    for tr in trajs:
        tr.reward, tr.acc = deepeyes_reward(tr.texts, answer, len(tr.images) > 1)
    return trajs


def cca_pseudo(trajs: list[Trajectory], t: dict):
    """CCA's pseudo box for a group (None when the correct rollouts are too few or disagree)."""
    return consensus_box([last_box(tr) for tr in trajs], [tr.acc for tr in trajs], t["cca_min_correct"],
                         t["cca_agree"])


def token_advantages(trajs: list[Trajectory], arm: str, t: dict) -> list[np.ndarray]:
    """Per-token advantages (0 on tokens not sampled in that trajectory)."""
    r = np.array([tr.reward for tr in trajs])
    acc = np.array([getattr(tr, "acc", tr.reward) for tr in trajs])
    adv = group_advantage(r)
    adv_tool = adv
    if arm in ("cca", "medvr"):
        boxes = [last_box(tr) for tr in trajs]
        pseudo = consensus_box(boxes, acc, t["cca_min_correct"], t["cca_agree"])
        bonus = np.array([a * iou(b, pseudo) if pseudo is not None and b is not None else 0.0
                          for b, a in zip(boxes, acc)])
        adv_tool = group_advantage(r + t["cca_lambda"] * bonus)
    out = []
    for i, tr in enumerate(trajs):
        tool_turn = np.array([k >= 0 and tr.boxes[k] is not None for k in tr.turn])
        a = np.where(tool_turn, adv_tool[i], adv[i]) * np.asarray(tr.sampled, float)
        out.append(a)
    for j, tr in enumerate(trajs):   # EVR: the shared prefix once, with the mean advantage
        if tr.parent is None:
            continue
        kids = [k for k, other in enumerate(trajs) if other.parent == tr.parent]
        if j != kids[0]:
            continue
        p = trajs[tr.parent]
        L = tr.prefix_len
        tool = np.array([k >= 0 and p.boxes[k] is not None for k in p.turn[:L]])
        mean_plain = np.mean([adv[tr.parent]] + [adv[k] for k in kids])
        mean_tool = np.mean([adv_tool[tr.parent]] + [adv_tool[k] for k in kids])
        out[tr.parent][:L] = np.where(tool, mean_tool, mean_plain) * np.asarray(p.sampled[:L], float)
    return out


def grpo_step(agent: Agent, opt, groups: list[list[Trajectory]], arm: str, t: dict) -> dict:
    """One on-policy GRPO update over a batch of groups (token-mean loss)."""
    import torch

    opt.zero_grad()
    n_tok = sum(int(np.sum(tr.sampled)) for g in groups for tr in g) or 1
    total = 0.0
    for trajs in groups:
        for tr, a in zip(trajs, token_advantages(trajs, arm, t)):
            if not np.any(a):
                continue
            logp = agent.token_logps(tr)
            adv = torch.tensor(a[1:], dtype=logp.dtype, device=logp.device)
            loss = -(adv * logp).sum() / n_tok
            loss.backward()
            total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_([p for p in agent.model.parameters() if p.requires_grad], t["grad_clip"])
    opt.step()
    rewards = [tr.reward for g in groups for tr in g]
    firsts = [tr for g in groups for tr in g if tr.parent is None]
    return {"loss": total, "reward": float(np.mean(rewards)),
            "accuracy": float(np.mean([getattr(tr, "acc", tr.reward) for g in groups for tr in g])),
            "rollouts_per_question": len(rewards) / len(groups),
            "tool_rate": float(np.mean([last_box(tr) is not None for g in groups for tr in g])),
            # how often the mechanisms act (audit 02b N3): EVR's branches per first rollout, CCA's pseudo box
            "evr_branch_rate": (len(rewards) - len(firsts)) / max(1, len(firsts)),
            "cca_fire_rate": float(np.mean([cca_pseudo(g, t) is not None for g in groups]))
            if arm in ("cca", "medvr") else 0.0}


def load_agent(model_dir: str, spec: dict, train: dict | None, device: str, adapter_dir=None) -> Agent:
    """The base model (bf16 on CUDA, fp32 on CPU) and processor; LoRA adapters (peft) when training,
    or the trained adapters from adapter_dir."""
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from iclr26.core.acquire import from_pretrained

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = from_pretrained(Qwen2_5_VLForConditionalGeneration, model_dir, dtype=dtype).to(device)
    processor = from_pretrained(AutoProcessor, model_dir)
    processor.image_processor.size = {"shortest_edge": spec["min_pixels"], "longest_edge": spec["max_pixels"]}
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    elif train is not None:
        from peft import LoraConfig, get_peft_model

        lora = train["lora"]
        model = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                                                 target_modules=list(lora["target_modules"])))
        if train.get("activation_checkpointing"):
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
    model.eval()
    agent = Agent(model, processor, spec, device)
    agent.training = train is not None and adapter_dir is None
    return agent


def train_arm(agent: Agent, rows: dict, arm: str, t: dict, seed: int, log=None, on_step=None, start: int = 0,
              opt=None, curve=None) -> list[dict]:
    """GRPO steps `start`..`t.steps` for one arm and seed; returns the new steps' statistics (appended
    to `curve` as they come, so `on_step(step, opt)` can checkpoint it)."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 2])
    order = [rng.integers(len(rows["answers"]), size=t["batch"]) for _ in range(t["steps"])]
    opt = opt or torch.optim.AdamW([p for p in agent.model.parameters() if p.requires_grad], lr=t["lr"],
                                   weight_decay=0.0)
    curve = [] if curve is None else curve
    new = []
    for step in range(start, t["steps"]):
        torch.manual_seed(seed * 100003 + step)
        groups = [group_rollouts(agent, rows["images"][i], rows["questions"][i], rows["answers"][i], arm, t)
                  for i in order[step]]
        new.append(grpo_step(agent, opt, groups, arm, t))
        curve.append(new[-1])
        if log:
            log(f"{arm} seed {seed} step {step + 1}/{t['steps']} reward {new[-1]['reward']:.3f}", every_s=60)
        if on_step:
            on_step(step, opt)
    return new


def evaluate(agent: Agent, rows: dict, use_tool: bool) -> dict:
    """Greedy rollouts on the test rows: accuracy (all, closed yes/no, open), tool-call rate, and the
    sd of the final turn's mean token entropy."""
    hits, closed, ents, tools = [], [], [], []
    for image, q, a in zip(rows["images"], rows["questions"], rows["answers"]):
        tr = agent.rollout(agent.start(image, q), image, True, use_tool)
        hits.append(correct(answer_of(tr), a))   # accuracy: exact match (the reward's acc term)
        closed.append(normalise(a) in ("yes", "no"))
        ents.append(tr.entropy[-1])
        tools.append(last_box(tr) is not None)
    hits, closed = np.array(hits), np.array(closed)

    def mean(x):
        return float(x.mean()) if len(x) else math.nan
    return {"accuracy": mean(hits), "accuracy_closed": mean(hits[closed]), "accuracy_open": mean(hits[~closed]),
            "entropy_sd": float(np.std(ents)), "tool_rate": float(np.mean(tools))}
