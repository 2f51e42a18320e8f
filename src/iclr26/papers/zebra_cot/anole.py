"""Full scale with the paper's model: Anole-7B fine-tuned on Zebra-CoT rows (card 19, section 2.3).

Anole (GAIR/Anole-7b-v0.1) is Chameleon-7B with image generation unlocked; its transformers
conversion (`leloy/Anole-7b-v0.1-hf`, pinned by commit in paper_scale/zebra_cot/full.yaml) loads with
ChameleonForConditionalGeneration and ChameleonProcessor. Early fusion: an image is the VQ-VAE's
codes mapped to BPE ids (ChameleonModel.get_image_tokens: 1,024 per 512-px image) between the
processor's image-start and image-end tokens, in the same sequence as the text tokens.

Two things differ from the stock model, both because the paper trains and decodes interleaved
traces (text and reasoning images the model draws itself):
- the loss and the logits come from `model.model(...)` hidden states through `lm_head`: the stock
  ChameleonForConditionalGeneration.forward sets every image token's logit to finfo.min (it can
  only write text), so neither its loss nor its generation could learn or draw an image;
- the loss is next-token cross-entropy on every target token, text and image tokens alike (the
  prompt, i.e. the question and its problem images, is not a target), as in the interleaved SFT
  of Anole-Zebra-CoT (the Thinking-with-generated-images codebase the paper trained with).

Rows become the same example dicts as tokens.example (prompt, steps with text and image, tail,
answer), holding token ids instead of words, so arms.py trains, decodes and scores both scales with
one code path; `IdTokenizer` gives them the tokenizer interface arms.py uses, and parses a
generation (images between the image-start/end ids, the answer after the last "ANSWER:").
Adapters: LoRA through peft when `train.lora` is set (the paper fine-tunes all weights on 8 x H200;
see the full-scale deviations).
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np

from . import data

ANSWER = re.compile(r"ANSWER\s*:\s*(.*?)\s*$", re.S)


class IdTokenizer:
    """What arms.py needs of a tokenizer, for examples already holding Anole token ids."""

    def __init__(self, text_tokenizer, boi: int, eoi: int, image_token_ids: list[int] | None = None):
        self.text = text_tokenizer
        self.boi, self.eoi = boi, eoi
        self.image_token_ids = sorted(image_token_ids or [])   # the VQ codes' BPE ids (arms.image_vocab)
        self.pad_token_id = text_tokenizer.pad_token_id if text_tokenizer.pad_token_id is not None else 1
        self.eos_token_id = text_tokenizer.eos_token_id
        self.eos_token = self.eos_token_id   # convert_ids_to_tokens is the identity here

    def convert_tokens_to_ids(self, ids):
        return [int(i) for i in ids]

    def convert_ids_to_tokens(self, ids):
        return [int(i) for i in ids]

    def parse_output(self, ids: list[int]) -> dict:
        """The drawn images (id lists between image start and end) and the answer text (after the
        last "ANSWER:" of the decoded text, images left out) of one generation."""
        images, current, text = [], None, []
        for i in ids:
            if i == self.boi:
                current = []
            elif i == self.eoi and current is not None:
                images.append(current)
                current = None
            elif current is not None:
                current.append(i)
            elif i != self.eos_token_id:
                text.append(i)
        found = ANSWER.findall(self.text.decode(text, skip_special_tokens=True))
        return {"answer": found[-1] if found else None, "images": images}

    @staticmethod
    def answer_text(ex: dict) -> str:
        return ex["final_answer"]


class InterleavedLM:
    """ChameleonForConditionalGeneration seen through model.model + lm_head: logits over the whole
    vocabulary, image tokens included (no finfo.min mask), in the call shape core.lm.generate uses
    (input_ids, attention_mask, position_ids, cache, use_cache, logits_to_keep)."""

    def __init__(self, lm):
        self.lm = lm
        self.config = lm.config

    @property
    def device(self):
        return next(self.lm.parameters()).device

    def parameters(self):
        return self.lm.parameters()

    def train(self, mode: bool = True):
        self.lm.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def hidden(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False):
        return self.lm.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             cache=cache, use_cache=use_cache)

    def __call__(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                 logits_to_keep: int = 0, **_):
        out = self.hidden(input_ids, attention_mask, position_ids, cache, use_cache)
        h = out.last_hidden_state
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        return SimpleNamespace(logits=self.lm.lm_head(h).float(), cache=out.cache)


def _path(spec: dict) -> str:
    from iclr26.core.acquire import model_path

    return model_path(spec)


def processor_of(spec: dict):
    from transformers import ChameleonProcessor

    return ChameleonProcessor.from_pretrained(_path(spec))


def image_token_ids(spec: dict) -> list[int]:
    """The BPE ids of the VQ codes: the vocabulary map's IMGIMG... names, as transformers'
    ChameleonImageVocabularyMapping.image_tokens reads them."""
    from transformers import ChameleonConfig

    vocab = ChameleonConfig.from_pretrained(_path(spec)).vocabulary_map
    return sorted(v for name, v in vocab.items() if name.startswith("IMGIMG"))


def tokenizer_of(spec: dict, processor=None) -> IdTokenizer:
    proc = processor or processor_of(spec)
    return IdTokenizer(proc.tokenizer, proc.image_start_token_id, proc.image_end_token_id, image_token_ids(spec))


def load(spec: dict, seed: int, device, tcfg: dict | None = None) -> InterleavedLM:
    """The pretrained model (spec.dtype) on `device`. For training (`tcfg`, the train section): with
    train.lora, peft LoRA adapters (seeded) are the trained weights, else every weight is; with
    train.activation_checkpointing, each layer's activations are recomputed in the backward pass."""
    import torch
    from transformers import ChameleonForConditionalGeneration

    from iclr26.core.lm.model import quiet_transformers

    quiet_transformers()
    torch.manual_seed(seed)
    dtype = getattr(torch, spec.get("dtype", "float32"))
    lm = ChameleonForConditionalGeneration.from_pretrained(_path(spec), dtype=dtype)
    tcfg = tcfg or {}
    lora = tcfg.get("lora")
    if lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=int(lora["r"]), lora_alpha=int(lora["alpha"]), lora_dropout=0.0,
                            target_modules=list(lora["target_modules"]), bias="none")
        lm = get_peft_model(lm, config).get_base_model()   # adapters injected in place, the rest frozen
    if tcfg.get("activation_checkpointing"):
        lm.gradient_checkpointing_enable()
        if lora:   # frozen embeddings: the checkpointed layers' inputs must carry gradients
            lm.enable_input_require_grads()
    return InterleavedLM(lm.to(device))


def image_ids(lm: InterleavedLM, processor, pictures: list[np.ndarray], batch_size: int = 8) -> list[list[int]]:
    """BPE ids of each picture (the VQ-VAE's codes, get_image_tokens). A picture is resized to the
    VQ-VAE's square input (the whole picture kept: no crop), then normalised by the processor. The
    VQ-VAE encodes in float32 (the precision Chameleon's tokenizer encodes at: the argmin codes of a
    bf16 encoder can differ), whatever the language model's dtype."""
    import torch
    from PIL import Image

    side = int(lm.config.vq_config.resolution)
    vq = lm.lm.model.vqmodel.float()   # in place: this model only tokenizes (stages.anole_examples)
    out = []
    for start in range(0, len(pictures), batch_size):
        chunk = [Image.fromarray(np.ascontiguousarray(p)).resize((side, side), Image.Resampling.BICUBIC)
                 for p in pictures[start:start + batch_size]]
        pixels = processor.image_processor(chunk, return_tensors="pt")["pixel_values"]   # square in: no crop
        with torch.no_grad():
            ids = lm.lm.model.get_image_tokens(pixels.to(lm.device, next(vq.parameters()).dtype))
        out.extend(ids.cpu().tolist())
    return out


def encode_rows(rows: list[dict], lm: InterleavedLM, processor, log=print) -> list[dict]:
    """Example dicts (tokens.example's layout) of Zebra-CoT rows, in Anole token ids: text pieces by
    the model's tokenizer (the prompt after its BOS), images as [image start] + codes + [image end]; the
    answer suffix is the text "ANSWER: <Final Answer>"; `final_answer` is what decoding is graded
    against."""
    tok = processor.tokenizer
    boi, eoi = processor.image_start_token_id, processor.image_end_token_id
    out = []
    for n, row in enumerate(rows):
        prompt, chain = data.segments(row)
        columns = [v for k, v in prompt + chain if k == "image"]
        codes = dict(zip(columns, image_ids(lm, processor, [data.decode_image(row[c]) for c in columns])))

        def ids(kind, value, codes=codes):
            if kind == "image":
                return [boi, *codes[value], eoi]
            return tok(value, add_special_tokens=False)["input_ids"]

        steps, text = [], []
        for kind, value in chain:
            if kind == "text":
                text += ids(kind, value)
            else:
                steps.append({"text": text, "image": ids(kind, value), "state": [], "column": value})
                text = []
        answer = str(row["Final Answer"]).strip()
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        out.append({"prompt": bos + [i for kind, value in prompt for i in ids(kind, value)], "steps": steps,
                    "tail": text, "answer": tok(f"ANSWER: {answer}", add_special_tokens=False)["input_ids"],
                    "final_answer": answer, "config": row.get("config")})
        if (n + 1) % 200 == 0:
            log(f"anole: {n + 1}/{len(rows)} rows tokenized")
    return out


def interleaved_loss(lm: InterleavedLM, ids, mask, starts: list[int]):
    """Mean next-token cross-entropy over every target token (positions >= the row's prompt length),
    text and image tokens alike, from model.model's hidden states through lm_head."""
    import torch

    hidden = lm.hidden(ids, mask).last_hidden_state[:, :-1]
    labels = ids[:, 1:].clone()
    labels[mask[:, 1:] == 0] = -100
    for row, start in enumerate(starts):
        labels[row, : max(0, start - 1)] = -100
    logits = lm.lm.lm_head(hidden).float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100)


def train(lm: InterleavedLM, sequences: list[list[int]], starts: list[int], pad_id: int, tcfg: dict, seed: int,
          log=None) -> list[float]:
    """AdamW on the trainable weights, linear warm-up then cosine decay (the paper's schedule),
    `batch_size` rows per step in micro-batches of `micro_batch_size` (gradient accumulation)."""
    import torch

    from iclr26.core.lm.model import pad_batch

    steps, batch = int(tcfg["steps"]), int(tcfg["batch_size"])
    micro = int(tcfg.get("micro_batch_size") or batch)
    warmup = int(tcfg.get("warmup", 0))
    rng = np.random.default_rng(seed)
    params = [p for p in lm.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=float(tcfg["lr"]), weight_decay=float(tcfg.get("weight_decay", 0.0)))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup))
                                                 * 0.5 * (1 + np.cos(np.pi * min(s, steps) / max(1, steps))))
    lm.train()
    losses = []
    for step in range(steps):
        pick = rng.integers(0, len(sequences), size=batch)
        total = 0.0
        for at in range(0, batch, micro):
            rows = pick[at:at + micro]
            ids, mask = (t.to(lm.device) for t in pad_batch([sequences[i] for i in rows], pad_id))
            loss = interleaved_loss(lm, ids, mask, [starts[i] for i in rows]) * (len(rows) / batch)
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
        if log is not None:
            log(f"step {step + 1}/{steps} loss {total:.3f}", every_s=30)
    lm.eval()
    return losses
