"""The trained model: a transformers ViT built from a config (never from pretrained weights).

Tiny and smoke: `ViTConfig(**model.config)`, a pre-LN ViT of about 0.1 M parameters.
Full: the config of a real hub model (`model.source`, e.g. a DeiT-S/16 id, or a local directory
written by save_pretrained) through `core.acquire.from_pretrained(AutoConfig, ...)`, with
`model.config` overriding image size, patch size, labels, dropout; then `from_config`, so the
weights are freshly initialised and trained from scratch, as in the paper.

Pooling. transformers' ViTForImageClassification classifies from the CLS token; the card's model
mean-pools the patch tokens. `model.pool: mean` (the card) averages the final-LayerNorm'd patch
tokens (CLS excluded) into the same classifier layer; `cls` uses transformers' own forward.
"""
from __future__ import annotations

import torch


def build_config(model_cfg: dict, depth: int | None = None):
    from transformers import AutoConfig, ViTConfig

    fields = dict(model_cfg.get("config") or {})
    if depth is not None:
        fields["num_hidden_layers"] = int(depth)
    fields["attn_implementation"] = model_cfg.get("attn_implementation", "eager")
    if model_cfg.get("source"):
        from iclr26.core.acquire import from_pretrained

        return from_pretrained(AutoConfig, model_cfg["source"], revision=model_cfg.get("revision"), **fields)
    return ViTConfig(**fields)


def build_model(model_cfg: dict, depth: int | None = None):
    """A randomly initialised ViTForImageClassification (the global torch RNG decides the init)."""
    from transformers import AutoModelForImageClassification, ViTForImageClassification

    config = build_config(model_cfg, depth)
    model = AutoModelForImageClassification.from_config(config, attn_implementation=config._attn_implementation)
    if not isinstance(model, ViTForImageClassification):
        raise TypeError(f"model.source must be a ViT config (model_type 'vit'); got {type(model).__name__}")
    return model


def logits(model, pixel_values: torch.Tensor, pool: str) -> torch.Tensor:
    if pool == "cls":
        return model(pixel_values=pixel_values).logits
    if pool == "mean":
        hidden = model.vit(pixel_values=pixel_values).last_hidden_state  # (B, 1 + N, d), after final LN
        return model.classifier(hidden[:, 1:].mean(dim=1))
    raise ValueError(f"model.pool must be 'mean' or 'cls', got {pool!r}")
