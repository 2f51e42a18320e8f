"""A word-level `transformers` tokenizer for synthetic reasoning tasks.

The tokenizer is a `tokenizers` WordLevel model wrapped in PreTrainedTokenizerFast and saved with
save_pretrained, so prompts, special tokens and decoding go through the same API
(`AutoTokenizer.from_pretrained`) as a hub tokenizer at full scale.
"""
from __future__ import annotations

from pathlib import Path

THINK, END_THINK, SKIP, SEP = "<think>", "</think>", "[SKIP]", "<sep>"
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL = (PAD, EOS, UNK, THINK, END_THINK, SKIP, SEP)


def build_tokenizer(words, directory: str | Path | None = None):
    """Tokenizer over SPECIAL + `words` (whitespace-separated); saved to `directory` if given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {}
    for word in (*SPECIAL, *words):
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK,
        additional_special_tokens=[THINK, END_THINK, SKIP, SEP])
    tokenizer.padding_side = "left"  # decoder-only generation pads on the left
    if directory is not None:
        tokenizer.save_pretrained(str(directory))
    return tokenizer


def load_tokenizer(source: str | Path, revision: str | None = None):
    """AutoTokenizer from a save_pretrained directory or a hub id (core.acquire.from_pretrained)."""
    from transformers import AutoTokenizer

    from ..acquire import from_pretrained

    tokenizer = from_pretrained(AutoTokenizer, str(source), revision)
    tokenizer.padding_side = "left"
    return tokenizer


def special_ids(tokenizer) -> dict[str, int]:
    """Ids of the tiny tokenizer's reasoning markers (a hub tokenizer has <think> and </think>; its
    steps end at blank lines and [SKIP] is text there, see formats.py)."""
    ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in
           (("think", THINK), ("end_think", END_THINK), ("skip", SKIP), ("sep", SEP))}
    ids["eos"], ids["pad"] = tokenizer.eos_token_id, tokenizer.pad_token_id
    return ids
