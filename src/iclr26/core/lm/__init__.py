"""Shared language-model core for the reasoning-trace papers.

tokenizer.py  a real `transformers` tokenizer (WordLevel) for the synthetic tasks, with the
              reasoning special tokens (<think>, </think>, [SKIP], the step separator)
model.py      a Qwen2 decoder: from_config at tiny scale, from_pretrained on a hub id or a
              save_pretrained directory at full scale; a plain next-token training loop
traces.py     seeded chain-arithmetic reasoning traces with the real datasets' row schema
              (problem, answer, trace) and the cards' knobs (redundancy, filler, errors, fixes)
generate.py   batched KV-cache generation with per-token log-probs, entropies and max-probs,
              prefilling, teacher-forced scoring and step splitting
hooks.py      forward hooks on one decoder layer: read hidden states, or shift them

Imported only inside jobs (it imports torch); never at Snakemake DAG-build time.
"""
