"""Text embeddings of every node (title + abstract), by `embed.kind`:

    tfidf   tiny/smoke: TF-IDF + a fixed seeded random projection (build.tfidf); no download
    hub     full default: a pinned open model (SPECTER2 base; CLS pooling), from the snapshot that
            acquire downloaded (core.acquire), on the GPU
    openai  the paper's text-embedding-3-large (3072-d): needs OPENAI_API_KEY and network; an
            explicit option, never the default (the GPU nodes have neither)
"""
from __future__ import annotations

import json
import os
import urllib.request

import numpy as np


def embed(texts: list[str], cfg: dict, log=print) -> np.ndarray:
    spec = cfg["embed"]
    if spec["kind"] == "tfidf":
        from .build import tfidf

        return tfidf(texts, spec["dim"], spec["seed"])
    if spec["kind"] == "hub":
        return _hub(texts, spec, cfg.get("device"), log)
    if spec["kind"] == "openai":
        return _openai(texts, spec)
    raise ValueError(f"embed.kind must be tfidf, hub or openai, got {spec['kind']!r}")


def _hub(texts: list[str], spec: dict, wanted: str | None, log) -> np.ndarray:
    from pathlib import Path

    import torch
    from transformers import AutoModel, AutoTokenizer

    from iclr26.core.acquire import local_snapshot
    from iclr26.core.runtime import pick_device

    path = Path(spec["source"]) if Path(spec["source"]).exists() else local_snapshot(spec)  # a local folder (tests)
    device = pick_device(wanted)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), spec["batch_size"]):
            batch = tok(texts[start:start + spec["batch_size"]], padding=True, truncation=True,
                        max_length=spec["max_length"], return_tensors="pt").to(device)
            out.append(model(**batch).last_hidden_state[:, 0].float().cpu().numpy())  # CLS, as SPECTER
            log(f"embedded {start + len(batch['input_ids'])}/{len(texts)}", every_s=60)
    z = np.concatenate(out).astype(np.float32)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-8)


def _openai(texts: list[str], spec: dict) -> np.ndarray:
    key = os.environ.get(spec["api_key_env"])
    if not key:
        raise RuntimeError(f"embed.kind=openai needs {spec['api_key_env']} in the environment")
    out = []
    for start in range(0, len(texts), spec["batch_size"]):
        body = json.dumps({"model": spec["api_model"], "input": texts[start:start + spec["batch_size"]]}).encode()
        req = urllib.request.Request(spec["api_url"], data=body, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            out.extend(item["embedding"] for item in json.load(resp)["data"])
    return np.asarray(out, dtype=np.float32)
