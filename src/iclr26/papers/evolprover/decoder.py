"""The tiny prover without transformers' model code: the Qwen2 decoder that core.lm.model.build_model
builds from config (model.source null), trained (Qwen2Tiny) and sampled (TinyQwen2, sample) with the same
operations as transformers' Qwen2ForCausalLM with sdpa attention, so the weights, losses and samples are
those of core.lm.model.build_model + core.lm.generate.generate, bit for bit (tests/papers/test_evolprover.py
checks it against them). What it saves is the ~5 CPU-s import of transformers' model code per job.

Qwen2Tiny: the same modules, parameter names and order, and initialisation (torch.manual_seed(seed), the
modules' default init in construction order, then transformers' _init_weights: normal(0, 0.02) weights,
zero biases and padding row; lm_head last), the same forward (sdpa with transformers' mask: none and causal
when no row is padded, else causal & padding) and loss (mean cross-entropy of the shifted labels); it runs in
core.lm.model.train_lm and saves a save_pretrained folder (config.json, model.safetensors) that transformers
loads as a Qwen2ForCausalLM.

sample: samples exactly what generate samples with that model (same prompts, seed, batch size,
temperature, top_p 1): the same batches of rows, left-padded, the same mask, and the same random draws:
torch.multinomial(probs, 1) on CPU is argmax(probs / q) with q = Exp(1) draws of probs' shape (ATen's
one-sample path), so every step draws q for the whole batch, finished rows included, as generate does. What
differs is only what is not computed: the prompt pass runs once per distinct prompt (the n samples of a
problem share it), rows that have ended (eos) leave the forward passes (their tokens were never kept), keys
and values are written into a buffer of the batch's final length instead of concatenated every step, and
the per-token statistics generate also returns (log-prob, entropy) are not computed.

WordTokenizer reads the tiny tokenizer's file with the tokenizers library (the same ids and texts as
core.lm.tokenizer.load_tokenizer), so the tiny evaluate job imports no transformers at all.

Full scale (a hub model, LoRA adapters) trains with core.lm.train and samples with core.lm.generate.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

QWEN2_DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "initializer_range": 0.02, "hidden_act": "silu",
                  "attention_dropout": 0.0, "max_position_embeddings": 32768, "tie_word_embeddings": False}


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=True)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)


class _MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)


class _Norm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))


class _Layer(nn.Module):
    def __init__(self, cfg: dict, head_dim: int):
        super().__init__()
        self.self_attn = _Attention(cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                                    head_dim)
        self.mlp = _MLP(cfg["hidden_size"], cfg["intermediate_size"])
        self.input_layernorm = _Norm(cfg["hidden_size"])
        self.post_attention_layernorm = _Norm(cfg["hidden_size"])


class _Body(nn.Module):
    def __init__(self, cfg: dict, head_dim: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"], cfg["pad_token_id"])
        self.layers = nn.ModuleList([_Layer(cfg, head_dim) for _ in range(cfg["num_hidden_layers"])])
        self.norm = _Norm(cfg["hidden_size"])


class _Output:
    def __init__(self, loss, logits):
        self.loss, self.logits = loss, logits


class Qwen2Tiny(nn.Module):
    """transformers' Qwen2ForCausalLM (sdpa attention, no cache) for training from config: see the module
    docstring. `config` holds config.json's fields."""

    def __init__(self, config: dict, seed: int = 0):
        super().__init__()
        cfg = self.config = dict(config)
        if cfg["num_key_value_heads"] != cfg["num_attention_heads"] or cfg.get("tie_word_embeddings"):
            raise ValueError("Qwen2Tiny: no grouped-query attention and no tied embeddings")
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        std = cfg["initializer_range"]
        torch.manual_seed(seed)   # core.lm.model.build_model's seeding, then the draws of from_config
        self.model = _Body(cfg, self.head_dim)
        with torch.no_grad():
            self.model.embed_tokens.weight.normal_(0.0, std)
            self.model.embed_tokens.weight[cfg["pad_token_id"]].zero_()
            for module in self.model.layers.modules():
                if isinstance(module, nn.Linear):
                    module.weight.normal_(0.0, std)
                    if module.bias is not None:
                        module.bias.zero_()
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        with torch.no_grad():
            self.lm_head.weight.normal_(0.0, std)
        rope = cfg["rope_parameters"]
        self.inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, self.head_dim, 2, dtype=torch.float)
                                                       / self.head_dim))

    @classmethod
    def from_spec(cls, spec: dict, tokenizer, seed: int = 0) -> Qwen2Tiny:
        """The model core.lm.model.build_model(spec, tokenizer, seed) builds (spec.source null, sdpa)."""
        fields = {**QWEN2_DEFAULTS, **dict(spec.get("config", {}))}
        fields.setdefault("num_key_value_heads", fields.get("num_attention_heads", 4))
        fields["rope_parameters"] = {"rope_theta": fields.pop("rope_theta"), "rope_type": "default"}
        n = fields["num_hidden_layers"]
        config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "dtype": "float32",
                  "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                  "eos_token_id": tokenizer.eos_token_id, "bos_token_id": None, "use_cache": True,
                  "use_sliding_window": False, "sliding_window": None, "max_window_layers": 28,
                  "layer_types": ["full_attention"] * n, **fields}
        return cls(config, seed)

    @property
    def device(self):
        return self.lm_head.weight.device

    def _rms(self, x, norm):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.config["rms_norm_eps"])
        return norm.weight * h.to(x.dtype)

    def forward(self, input_ids, attention_mask=None, labels=None):
        b, t = input_ids.shape
        h = self.model.embed_tokens(input_ids)
        freqs = torch.arange(t, device=h.device)[None][..., None].float() * self.inv_freq.to(h.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * 1.0).unsqueeze(1), (emb.sin() * 1.0).unsqueeze(1)
        mask = None
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            pad = attention_mask.bool()
            causal = torch.arange(t, device=h.device)[None, :] <= torch.arange(t, device=h.device)[:, None]
            mask = (causal[None] & pad[:, None, :])[:, None]
        empty = torch.tensor([], dtype=h.dtype, device=h.device)
        for layer in self.model.layers:
            a = layer.self_attn
            x = self._rms(h, layer.input_layernorm)
            shape = (b, t, -1, self.head_dim)
            q = a.q_proj(x).view(shape).transpose(1, 2)
            k = a.k_proj(x).view(shape).transpose(1, 2)
            v = a.v_proj(x).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            k, v = torch.cat([empty, k], dim=-2), torch.cat([empty, v], dim=-2)   # transformers' cache update
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.head_dim ** -0.5,
                                                  is_causal=mask is None and t > 1)
            attn = attn.reshape(b, -1, t, self.head_dim).transpose(1, 2).contiguous().reshape(b, t, -1).contiguous()
            h = h + a.o_proj(attn)
            x = self._rms(h, layer.post_attention_layernorm)
            m = layer.mlp
            h = h + m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))
        logits = self.lm_head(self._rms(h, self.model.norm)[:, 0:, :])
        loss = None
        if labels is not None:
            shifted = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), shifted.view(-1), ignore_index=-100)
        return _Output(loss, logits)

    def save_pretrained(self, folder) -> None:
        """config.json and model.safetensors in transformers' save_pretrained layout."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config, indent=2, sort_keys=True) + "\n")
        save_file({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()},
                  str(folder / "model.safetensors"), metadata={"format": "pt"})


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TinyQwen2:
    """The weights of a Qwen2ForCausalLM save_pretrained folder and its incremental forward pass."""

    def __init__(self, folder: str | Path):
        from safetensors.torch import load_file

        folder = Path(folder)
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("model_type") != "qwen2" or cfg.get("use_sliding_window"):
            raise ValueError(f"{folder}: TinyQwen2 reads a full-attention qwen2 model, got {cfg.get('model_type')}")
        w = load_file(str(folder / "model.safetensors"))
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        if self.n_kv != self.n_heads:
            raise ValueError(f"{folder}: TinyQwen2 has no grouped-query attention ({self.n_kv} kv heads)")
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.scaling = self.head_dim ** -0.5
        self.eps = cfg["rms_norm_eps"]
        self.n_layers = cfg["num_hidden_layers"]
        rope = cfg.get("rope_parameters") or {"rope_theta": cfg.get("rope_theta", 10000.0), "rope_type": "default"}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"{folder}: TinyQwen2 has the default rotary embedding only, got {rope['rope_type']}")
        base, dim = rope["rope_theta"], self.head_dim
        self.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))   # as transformers
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed) if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
        self.norm = w["model.norm.weight"]
        self.layers = []
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            self.layers.append({k: w.get(p + name) for k, name in (
                ("ln1", "input_layernorm.weight"), ("ln2", "post_attention_layernorm.weight"),
                ("q", "self_attn.q_proj.weight"), ("qb", "self_attn.q_proj.bias"),
                ("k", "self_attn.k_proj.weight"), ("kb", "self_attn.k_proj.bias"),
                ("v", "self_attn.v_proj.weight"), ("vb", "self_attn.v_proj.bias"),
                ("o", "self_attn.o_proj.weight"), ("gate", "mlp.gate_proj.weight"),
                ("up", "mlp.up_proj.weight"), ("down", "mlp.down_proj.weight"))})

    def _rms(self, x, weight):   # Qwen2RMSNorm
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def _rotary(self, positions):   # Qwen2RotaryEmbedding (attention scaling 1)
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * 1.0).unsqueeze(1), (emb.sin() * 1.0).unsqueeze(1)

    def forward(self, ids, positions, keys, values, start: int, mask):
        """Logits of the last position for tokens `ids` (B, T) at `positions`, written into the key /
        value buffers (per layer, (B, heads, length, head_dim)) at [start, start + T); `mask` is the sdpa
        mask (B, 1, T, start + T) or None (then causal when T > 1, as transformers decides)."""
        b, t = ids.shape
        h = F.embedding(ids, self.embed)
        cos, sin = self._rotary(positions)
        end = start + t
        for layer, k_buf, v_buf in zip(self.layers, keys, values):
            x = self._rms(h, layer["ln1"])
            shape = (b, t, -1, self.head_dim)
            q = F.linear(x, layer["q"], layer["qb"]).view(shape).transpose(1, 2)
            k = F.linear(x, layer["k"], layer["kb"]).view(shape).transpose(1, 2)
            v = F.linear(x, layer["v"], layer["vb"]).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            k_buf[:, :, start:end] = k
            v_buf[:, :, start:end] = v
            attn = F.scaled_dot_product_attention(q, k_buf[:, :, :end], v_buf[:, :, :end], attn_mask=mask,
                                                  dropout_p=0.0, scale=self.scaling,
                                                  is_causal=mask is None and t > 1)
            attn = attn.transpose(1, 2).contiguous().reshape(b, t, -1).contiguous()
            h = h + F.linear(attn, layer["o"])
            x = self._rms(h, layer["ln2"])
            h = h + F.linear(F.silu(F.linear(x, layer["gate"])) * F.linear(x, layer["up"]), layer["down"])
        h = self._rms(h[:, -1:, :], self.norm)
        return F.linear(h, self.lm_head)[:, -1, :].float()


class WordTokenizer:
    """The tiny prover's tokenizer (core.lm.tokenizer.build_tokenizer's save_pretrained folder) read with the
    tokenizers library it is made of: the same ids and texts as core.lm.tokenizer.load_tokenizer's (encode
    without special tokens, decode skipping them), without importing transformers."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        from iclr26.core.lm.tokenizer import EOS, PAD

        self._tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        self.pad_token_id, self.eos_token_id = self._tok.token_to_id(PAD), self._tok.token_to_id(EOS)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


@torch.no_grad()
def sample(model: TinyQwen2, prompts: list[list[int]], pad_id: int, eos_id: int, max_new_tokens: int,
           temperature: float, seed: int, batch_size: int) -> list[list[int]]:
    """New tokens per prompt (up to and including eos), as core.lm.generate.generate(...).tokens."""
    gen = torch.Generator().manual_seed(int(seed))
    out = []
    for start in range(0, len(prompts), batch_size):
        out.extend(_sample_chunk(model, prompts[start:start + batch_size], pad_id, eos_id, max_new_tokens,
                                 temperature, gen))
    return out


def _sample_chunk(model, prompts, pad_id, eos_id, max_new, temperature, gen):
    n, width = len(prompts), max(len(p) for p in prompts)
    pad = torch.zeros((n, width + max_new), dtype=torch.bool)   # the 2D attention mask, generated tokens included
    for i, p in enumerate(prompts):
        pad[i, width - len(p):] = True
    positions = (pad[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    # transformers passes sdpa a mask only when some row of the batch is padded; then it is causal & padding
    masked = not bool(pad[:, :width].all())
    # the prompt pass runs once per distinct prompt (the n samples of a problem share it) and is copied to its rows
    distinct: dict = {}
    which = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts])
    firsts = [which.tolist().index(d) for d in range(len(distinct))]   # a row of each distinct prompt
    ids = torch.full((len(firsts), width), pad_id, dtype=torch.long)
    for i, p in enumerate(distinct):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
    mask = None
    if masked:
        causal = torch.arange(width)[None, :] <= torch.arange(width)[:, None]
        mask = (causal[None] & pad[firsts, None, :width])[:, None]
    shape = (len(firsts), model.n_heads, width + max_new, model.head_dim)
    keys = [torch.empty(shape) for _ in range(model.n_layers)]
    values = [torch.empty(shape) for _ in range(model.n_layers)]
    logits = model.forward(ids, positions[firsts], keys, values, 0, mask)[which]
    keys = [k[which] for k in keys]
    values = [v[which] for v in values]
    tokens: list[list[int]] = [[] for _ in range(n)]
    rows = torch.arange(n)                      # the rows in the forward passes, in the batch's order
    alive = torch.ones(n, dtype=torch.bool)     # of those, the rows not finished
    last, length = positions[:, -1:], width
    for step in range(max_new):
        if temperature <= 0:
            chosen = logits.argmax(-1)
        else:   # torch.multinomial(probs, 1, generator): the Exp(1) draws of the whole batch (finished rows too)
            q = torch.empty((n, logits.shape[-1]), dtype=logits.dtype).exponential_(1, generator=gen)
            chosen = (torch.softmax(logits / temperature, dim=-1) / q[rows]).argmax(-1)
        for row, tok, on in zip(rows.tolist(), chosen.tolist(), alive.tolist()):
            if on:
                tokens[row].append(tok)
        alive &= chosen != eos_id
        n_alive = int(alive.sum())
        if n_alive == 0 or step == max_new - 1:
            break
        if n_alive <= 0.75 * len(rows):   # finished rows leave the forward passes (generate computes and drops them)
            rows, chosen, last = rows[alive], chosen[alive], last[alive]
            keys = [k[alive] for k in keys]
            values = [v[alive] for v in values]
            alive = alive[alive]
        chosen = torch.where(alive, chosen, torch.full_like(chosen, pad_id))
        last = last + 1
        mask = pad[rows, None, None, :length + 1] if masked else None
        logits = model.forward(chosen[:, None], last, keys, values, length, mask)
        length += 1
    return tokens
