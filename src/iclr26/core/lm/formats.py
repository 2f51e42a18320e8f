"""How a reasoning task is laid out as text, the same interface at both scales.

A format turns a problem into prompt token ids that end inside the thinking span, says where one
thinking step ends, joins steps back into text, and grades what follows `</think>`.

TagFormat   tiny: "<problem> <think> step <sep> step ... </think> ans <value>", word-level
            tokenizer, exact-match grading of the value after `ans`.
ChatFormat  full: the model's own chat template with the configured prompt, steps separated by a
            blank line ("\\n\\n"), the final answer in \\boxed{} graded by math-verify against the
            reference answer.

Step boundaries are found in the decoded text of the tokens and mapped back to token ranges: a
token that is only separator belongs to no step; a merged token (".\\n\\n" in a BPE vocabulary)
stays with the step it ends (the text is split at "\\n\\n+"). Code that splits only at a token
that is exactly "\\n\\n" would join a step ending in a merged token to the next one; a paper whose
reference code does that says so in its own module. Markers such as [SKIP] stay plain text at full
scale: no token is added to a pretrained model.
"""
from __future__ import annotations

import functools
import itertools
import re

from .tokenizer import END_THINK, SEP, THINK


def make_format(spec: dict | None, tokenizer):
    """The format named by the config's `format.kind` (tags | chat)."""
    spec = dict(spec or {"kind": "tags"})
    kind = spec.pop("kind", "tags")
    if kind == "tags":
        return TagFormat(tokenizer)
    if kind == "chat":
        return ChatFormat(tokenizer, **spec)
    from ..errors import ConfigError

    raise ConfigError(f"format.kind must be tags or chat, got {kind!r}")


class _Format:
    sep: str
    lead: str          # what follows </think> before the model writes its answer

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end_think_id = tokenizer.convert_tokens_to_ids(END_THINK)
        self._piece = functools.lru_cache(maxsize=None)(self._decode_one)   # token id -> its text

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of every text, in one call to the tokenizer: the same ids, a fraction of the
        per-call overhead (thousands of compressed traces are encoded per evaluation)."""
        return self.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if len(texts) else []

    def prompt_ids(self, problem: str) -> list[int]:
        return self.encode(self.prompt_text(problem))

    def prompt_ids_many(self, problems: list[str]) -> list[list[int]]:
        return self.encode_many([self.prompt_text(p) for p in problems])

    def _decode_one(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def ends_step(self, tokens: list[int]) -> bool:
        """Online: does the last token complete a separator (alone, merged into a word, or as the
        second of two newline tokens)? Used to steer once per boundary while generating."""
        tail = [self._piece(int(t)) for t in tokens[-4:]]
        if not tail:
            return False
        text, before = "".join(tail), "".join(tail[:-1])
        completes = text.rstrip(" ").endswith(self.sep) and not before.rstrip(" ").endswith(self.sep)
        return self.sep in tail[-1] or completes

    def keyword_ids(self, keywords) -> list[int]:
        """Every vocabulary id whose text is one of the keywords, in any case and with or without a
        leading space ("Wait", " wait", ...): the tokens keyword suppression bans."""
        wanted = {k.strip().lower() for k in keywords}
        vocab = self.tokenizer.get_vocab()
        ids = [i for token, i in vocab.items()
               if self.tokenizer.convert_tokens_to_string([token]).strip().lower() in wanted]
        if not ids:
            from ..errors import ConfigError

            raise ConfigError(f"none of the keywords {sorted(wanted)} is a single token of this tokenizer")
        return sorted(ids)

    def thinking_end(self, tokens: list[int]) -> int:
        """Index where the thinking span of generated tokens ends: at </think>, else at eos, else the end."""
        for marker in (self.end_think_id, self.tokenizer.eos_token_id):
            if marker in tokens:
                return tokens.index(marker)
        return len(tokens)

    def step_spans(self, tokens: list[int], start: int, end: int) -> list[tuple[int, int]]:
        """Token ranges [lo, hi) of the steps in tokens[start:end]. Separators are found in the decoded
        text, so a model that writes a blank line as two newline tokens splits like one that writes
        the merged token; tokens inside a separator belong to no step."""
        pieces = [self._piece(int(t)) for t in tokens[start:end]]
        owner = [i for i, piece in enumerate(pieces) for _ in piece]   # char -> token
        first = list(itertools.accumulate([0] + [len(p) for p in pieces]))
        spans, lo = [], 0
        for match in re.finditer(self._sep_pattern, "".join(pieces)):
            a, b = match.span()
            ta, tb = owner[a], owner[b - 1]
            hi = ta + 1 if first[ta] < a else ta          # a token with text before the separator ends the step
            if hi > lo:
                spans.append((start + lo, start + hi))
            lo = max(hi, tb if first[tb + 1] > b else tb + 1)   # one with text after it opens the next
        if len(pieces) > lo:
            spans.append((start + lo, start + len(pieces)))
        return spans

    @property
    def _sep_pattern(self) -> str:
        sep = re.escape(self.sep)
        return f"(?:{sep})+" + (f"{re.escape(self.sep[-1])}*" if self.sep.isspace() else "")

    def step_texts(self, tokens: list[int], spans) -> list[str]:
        return [self.tokenizer.decode(tokens[lo:hi]).strip() for lo, hi in spans]

    def split_steps(self, thinking: str) -> list[str]:
        return [s.strip() for s in thinking.split(self.sep) if s.strip()]

    def join_steps(self, steps: list[str]) -> str:
        return self.sep.join(steps) if self.sep.strip() == "" else f" {self.sep} ".join(steps)

    def parse(self, tokens: list[int]) -> dict:
        """Generated tokens (after the prompt) -> thinking text, thinking tokens, the text after
        </think> ('' when the span never closed) and the graded answer's extraction."""
        eos = self.tokenizer.eos_token_id
        tokens = tokens[: tokens.index(eos)] if eos in tokens else tokens
        if self.end_think_id not in tokens:
            return {"thinking": self.tokenizer.decode(tokens), "thinking_tokens": len(tokens), "answer": ""}
        cut = tokens.index(self.end_think_id)
        tail = self.tokenizer.decode(tokens[cut + 1:], skip_special_tokens=True)
        return {"thinking": self.tokenizer.decode(tokens[:cut]), "thinking_tokens": cut,
                "answer": self.extract(tail)}

    def prefill_ids(self, problem: str, thinking: str) -> list[int]:
        """The prompt, the given thinking, then `</think>` and the answer lead: the model answers
        after a prefilled (possibly compressed) thinking span."""
        return self.prompt_ids(problem) + self.encode(f"{thinking}{self.close}")

    def prefill_ids_many(self, problems: list[str], thinkings: list[str]) -> list[list[int]]:
        """prefill_ids of every (problem, thinking) pair."""
        closed = self.encode_many([f"{thinking}{self.close}" for thinking in thinkings])
        return [prompt + rest for prompt, rest in zip(self.prompt_ids_many(problems), closed)]

    def training_example(self, problem: str, thinking: str, answer: str) -> tuple[list[int], int]:
        """(ids of prompt + thinking + answer + eos, prompt length): the loss covers what follows the prompt."""
        return self.training_examples([problem], [thinking], [answer])[0]

    def training_examples(self, problems: list[str], thinkings: list[str], answers: list[str]) -> list[tuple]:
        """training_example of every (problem, thinking, answer), encoded in two tokenizer calls."""
        prompts = self.prompt_ids_many(problems)
        completions = self.encode_many([self.completion_text(t, a) for t, a in zip(thinkings, answers)])
        eos = self.tokenizer.eos_token_id
        return [(prompt + rest + [eos], len(prompt)) for prompt, rest in zip(prompts, completions)]

    def answer_after_prefill(self, generated: list[int]) -> str:
        eos = self.tokenizer.eos_token_id
        generated = generated[: generated.index(eos)] if eos in generated else generated
        return self.extract(self.lead + self.tokenizer.decode(generated, skip_special_tokens=True))


class TagFormat(_Format):
    sep = SEP
    lead = "ans "
    close = f" {END_THINK} ans"
    answer_tokens = 1

    def prompt_text(self, problem: str) -> str:
        return f"{problem} {THINK}"

    def completion_text(self, thinking: str, answer: str) -> str:
        return f"{thinking} {END_THINK} ans {answer}"

    @staticmethod
    def extract(text: str) -> str:
        words = text.split()
        return words[1] if len(words) >= 2 and words[0] == "ans" else ""

    @staticmethod
    def is_correct(answer: str, gold: str) -> bool:
        return answer != "" and answer == str(gold)


class ChatFormat(_Format):
    """A prompt in the model's own chat template, which opens the thinking span: an optional system
    turn and a user template around the problem (`{problem}`), both from the paper's config."""
    sep = "\n\n"
    lead = ""
    close = f"\n{END_THINK}\n\n"

    def __init__(self, tokenizer, system: str | None = None, user: str = "{problem}", answer_tokens: int = 512):
        super().__init__(tokenizer)
        self.system, self.user, self.answer_tokens = system, user, int(answer_tokens)

    def prompt_text(self, problem: str) -> str:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": self.user.format(problem=problem)}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not text.rstrip().endswith(THINK):   # R1-distill templates open <think>; older ones do not
            text += f"{THINK}\n"
        return text

    def completion_text(self, thinking: str, answer: str) -> str:
        return f"{thinking}{self.close}The final answer is $\\boxed{{{answer}}}$."

    @staticmethod
    def extract(text: str) -> str:
        """The last \\boxed{} (or final LaTeX expression) math-verify finds, as text."""
        from math_verify import parse

        found = parse(text)
        return str(found[-1]) if found else ""

    @staticmethod
    def is_correct(answer: str, gold: str) -> bool:
        """math-verify's symbolic equivalence of the extracted answer and the reference."""
        if not answer:
            return False
        from math_verify import parse, verify

        return bool(verify(parse(f"${gold}$"), parse(f"${answer}$")))
