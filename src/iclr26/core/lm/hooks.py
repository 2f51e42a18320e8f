"""Hooks on the residual stream at the input of one decoder layer: read it, or shift it.

Layer l's input is what `output_hidden_states` reports as hidden_states[l] (0: the embeddings),
so `layer` here means what it means there. Steering:
h <- h + alpha_b * v at the last position of row b, alpha_b set per row before each forward pass
(0 leaves the row untouched).
"""
from __future__ import annotations

import torch


def decoder_layers(model):
    """The decoder blocks of a causal LM (Qwen2/Llama-style `model.model.layers`)."""
    return model.get_decoder().layers


class LayerHook:
    """Context manager around one layer. `captured` is the layer's input of the last forward pass
    ([batch, seq, hidden]) when capture=True; `set_shift(alpha, vector)` shifts the next passes."""

    def __init__(self, model, layer: int, capture: bool = False):
        self.layer = decoder_layers(model)[layer]
        self.capture = capture
        self.captured = None
        self.alpha = None   # [batch] or None
        self.vector = None  # [hidden]
        self._handle = None

    def set_shift(self, alpha, vector=None) -> None:
        self.alpha = None if alpha is None else torch.as_tensor(alpha, dtype=torch.float32)
        if vector is not None:
            self.vector = torch.as_tensor(vector, dtype=torch.float32)

    def _hook(self, module, args, kwargs):
        positional = len(args) > 0   # decoder layers take hidden_states first, by position or by name
        hidden = args[0] if positional else kwargs["hidden_states"]
        if self.alpha is not None and self.vector is not None and bool((self.alpha != 0).any()):
            hidden = hidden.clone()
            alpha, vector = (t.to(hidden.device, hidden.dtype) for t in (self.alpha, self.vector))
            hidden[:, -1, :] += alpha[:, None] * vector[None, :]
        if self.capture:
            self.captured = hidden.detach()
        if positional:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    def __enter__(self):
        self._handle = self.layer.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        self._handle = None
        return False
