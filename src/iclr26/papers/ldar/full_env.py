"""Full scale: the LaRA files of the official repository, BAAI/bge-large-en-v1.5 similarities, and
an open LLM (transformers) as the frozen reader, judged by a local LLM (default) or the GPT-4o API.

prepare (GPU): the official split (datasets/traintest/{length}_{level}_{train|test}.jsonl; every
hallu query is a test query, as the code evaluates hallu on all of them), each document split into
windows of `embedder.chunk_tokens` tokens overlapping by `embedder.chunk_overlap` (the code:
llama-index SentenceSplitter, 600 / 100), passages and questions embedded with bge (CLS pooling,
L2-normalised, as llama-index's HuggingFaceEmbedding does for bge), cosine similarities.
Rewards: the reader answers from the selected chunks with the official RAG prompt shape
("chunk i: ..." in descending similarity), or from the whole document (middle-truncated) for long
context; the judge says True or False. Every (query, passages) reward is memoised, so the oracle's
search and the evaluation never ask twice.
"""
from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, write_json

from .data import LEVELS, context_dir, read_rows
from .flat import load_flat, save_flat

RAG_PROMPT = ("Here are some chunks retrieved from {what}. Read these chunks to answer a question.\n\n"
              "{context}\n\nQuestion: {question}\n\nBe concise.")
FULL_PROMPT = "Read the {what} below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe concise."
WHAT = {"book": ("a book", "book"), "financial": ("a financial statement", "financial statement"),
        "paper": ("some papers", "papers")}
JUDGE_SYSTEM = "You are a discriminator that judges whether the predictions to questions are correct."
READER_SYSTEM = "You are a helpful assistant"  # the code's system message for the reader (eval_utils.create_msgs)
# The judge prompts are the official get_score_one_llm's (evaluation/optim_utils.py), word for word.
JUDGE = ("I will provide you with a question and its groundtruth answer, as well as an answer from an AI "
         "assistant. You need to judge whether the AI assistant's answer is correct based on the groundtruth "
         "answer. If it is correct, you should only output True; if it is incorrect, only output False.\n\n"
         "[Query] {question}\n\n[Groundtruth Answer] {answer}\n\n[AI Assistant's Answer] {prediction}\n\n"
         "Now, start your judgment:")
JUDGE_HALLU = ("You need to help me determine whether an AI model is hallucinating. I will provide you with a "
               "question, a ground truth answer, and a prediction from the model. If the prediction from the model "
               "and the ground truth answer are basically consistent, and it is determined that this question is "
               "not mentioned in the text, then the model is deemed not to be hallucinating and the answer is "
               "considered correct. If it is correct, you should only output True; if it is incorrect, only "
               "output False.\n\n"
               "[Query] {question}\n\n[Groundtruth Answer] {answer}\n\n[AI Assistant's Answer] {prediction}\n\n"
               "Now, start your judgement:")


def load_split_rows(raw: Path, length: str, levels) -> list[dict]:
    rows = []
    for level in levels:
        for part in ("train", "test"):
            path = raw / "datasets" / "traintest" / f"{length}_{level}_{part}.jsonl"
            for row in read_rows(path) if path.exists() else []:
                rows.append({**row, "split": "test" if level == "hallu" else part})
    return rows


def windows(ids: list[int], size: int, overlap: int) -> list[list[int]]:
    step = max(1, size - overlap)
    return [ids[i:i + size] for i in range(0, max(1, len(ids) - overlap), step)]


def embed(model, tok, texts: list[str], device: str, batch: int, max_length: int) -> np.ndarray:
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tok(texts[i:i + batch], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt").to(device)
            cls = model(**enc).last_hidden_state[:, 0].float()
            out.append(torch.nn.functional.normalize(cls, dim=-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 1))


def prepare_full(raw: Path, out: Path, length: str, cfg: dict, log=None) -> dict:
    from transformers import AutoModel, AutoTokenizer

    from iclr26.core.acquire import from_pretrained, model_path
    from iclr26.core.runtime import pick_device

    spec = cfg["embedder"]
    device = pick_device(cfg.get("device"))
    path = model_path(spec)
    tok = from_pretrained(AutoTokenizer, path)
    model = from_pretrained(AutoModel, path).to(device).eval()
    rows = load_split_rows(raw, length, cfg["data"]["lara"]["levels"])
    docs: dict[str, dict] = {}
    for row in rows:
        key = f"{context_dir(row['type'])}/{row['file']}"
        if key not in docs:
            text = (raw / "datasets" / length / key).read_text(encoding="utf-8")
            ids = tok(text, add_special_tokens=False)["input_ids"]
            chunks = [tok.decode(w) for w in windows(ids, spec["chunk_tokens"], spec["chunk_overlap"])]
            docs[key] = {"text": text, "passages": chunks,
                         "emb": embed(model, tok, chunks, device, spec["batch_size"], spec["max_length"])}
            if log:
                log(f"{length}: {len(docs)} documents embedded", every_s=30)
        row["doc"] = key
    questions = embed(model, tok, [r["question"] for r in rows], device, spec["batch_size"], spec["max_length"])
    sims = [docs[r["doc"]]["emb"] @ q for r, q in zip(rows, questions)]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "rows.json", rows)
    save_flat(out / "sims.npz", sims=sims)
    write_json(out / "passages.json", {k: {"text": d["text"], "passages": d["passages"]} for k, d in docs.items()})
    return {"queries": len(rows), "documents": len(docs),
            "passages": float(np.mean([len(d["passages"]) for d in docs.values()])) if docs else 0.0,
            "levels": {lv: sum(r["level"] == lv for r in rows) for lv in LEVELS}}


class FullEnv:
    def __init__(self, folder: Path, cfg: dict):
        self.cfg, self.folder = cfg, folder
        self.rows = read_json(folder / "rows.json")
        self.sims = load_flat(folder / "sims.npz")["sims"]
        self.docs = read_json(folder / "passages.json")
        self.memo: dict[tuple, float] = {}
        self._reader = None

    # -- the LLM
    def reader(self):
        if self._reader is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from iclr26.core.acquire import from_pretrained, model_path
            from iclr26.core.runtime import pick_device

            spec = self.cfg["model"]
            device = pick_device(self.cfg.get("device"))
            path = model_path(spec)
            tok = from_pretrained(AutoTokenizer, path, padding_side="left")
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            dtype = getattr(torch, spec.get("dtype", "float32"))
            model = from_pretrained(AutoModelForCausalLM, path, dtype=dtype).to(device).eval()
            self._reader = (model, tok, device)
        return self._reader

    def generate(self, messages: list[list[dict]], max_new_tokens: int) -> list[str]:
        import torch

        model, tok, device = self.reader()
        out = []
        for i in range(0, len(messages), self.cfg["eval"]["batch_size"]):
            prompts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
                       for m in messages[i:i + self.cfg["eval"]["batch_size"]]]
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tok.pad_token_id)
            out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    def truncate_middle(self, text: str) -> str:
        """The code's long-context prompt: the document middle-truncated to fit the context."""
        _, tok, _ = self.reader()
        ids = tok(text, add_special_tokens=False)["input_ids"]
        limit = self.cfg["eval"]["max_context_tokens"]
        if len(ids) <= limit:
            return text
        return tok.decode(ids[: limit // 2]) + tok.decode(ids[len(ids) - limit // 2:])

    def prompt(self, q: int, sel) -> list[dict]:
        row = self.rows[q]
        doc = self.docs[row["doc"]]
        what = WHAT[context_dir(row["type"])]
        if len(sel) == len(doc["passages"]) and list(sel) == sorted(sel):  # long context: the document
            text = FULL_PROMPT.format(what=what[1], context=self.truncate_middle(doc["text"]), question=row["question"])
        else:
            context = "".join(f"chunk {i}: {doc['passages'][j]}.\n\n" for i, j in enumerate(sel))
            text = RAG_PROMPT.format(what=what[0], context=context, question=row["question"])
        return [{"role": "system", "content": READER_SYSTEM}, {"role": "user", "content": text}]

    # -- the judge
    def judge(self, items: list[tuple[dict, str]]) -> list[float]:
        spec = self.cfg["judge"]
        messages = [[{"role": "system", "content": JUDGE_SYSTEM},
                     {"role": "user", "content": (JUDGE_HALLU if row["level"] == "hallu" else JUDGE).format(
                         question=row["question"], answer=row["answer"], prediction=pred)}] for row, pred in items]
        if spec["kind"] == "local":  # the reader model itself judges (deviations)
            replies = self.generate(messages, spec["max_new_tokens"])
        elif spec["kind"] == "openai":
            replies = [openai_chat(spec, m) for m in messages]
        else:
            raise ValueError(f"judge.kind must be local or openai, got {spec['kind']!r}")
        return [1.0 if "true" in r.lower() else 0.0 for r in replies]

    def rewards(self, queries, selections) -> np.ndarray:
        keys = [(int(q), tuple(int(i) for i in sel)) for q, sel in zip(queries, selections)]
        todo = list(dict.fromkeys(k for k in keys if k not in self.memo))
        if todo:
            preds = self.generate([self.prompt(q, sel) for q, sel in todo], self.cfg["eval"]["max_new_tokens"])
            for key, score in zip(todo, self.judge([(self.rows[q], p) for (q, _), p in zip(todo, preds)])):
                self.memo[key] = score
        return np.array([self.memo[k] for k in keys])

    def hindsight_best(self, test: list[int], cfg: dict) -> list[np.ndarray]:
        """Full scale has no gold passages: the oracle row is the smallest fixed ratio (of the
        table's grid, then the whole document) whose answer is judged correct, per query."""
        from .methods import fixed_ratio, long_context

        chosen = [long_context(self.sims[q]) for q in test]
        pending = list(range(len(test)))
        for ratio in cfg["eval"]["oracle_ratios"]:
            if not pending:
                break
            sels = [fixed_ratio(self.sims[test[j]], ratio) for j in pending]
            ok = self.rewards([test[j] for j in pending], sels)
            for j, sel, good in zip(pending, sels, ok):
                if good:
                    chosen[j] = sel
            pending = [j for j, good in zip(pending, ok) if not good]
        return chosen


def openai_chat(spec: dict, messages: list[dict]) -> str:
    """The paper's GPT-4o judge (an explicit option: needs OPENAI_API_KEY and network), over the
    plain HTTP API so that no client package is needed."""
    key = os.environ.get(spec.get("api_key_env", "OPENAI_API_KEY"))
    if not key:
        raise RuntimeError(f"judge.kind openai needs ${spec.get('api_key_env', 'OPENAI_API_KEY')}")
    body = json.dumps({"model": spec["api_model"], "messages": messages, "temperature": 0}).encode()
    req = urllib.request.Request(spec["api_url"], data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]
