"""Shared language-model core for the reasoning-trace papers.

tokenizer.py  a real `transformers` tokenizer (WordLevel) for the synthetic tasks, with the
              reasoning special tokens (<think>, </think>, [SKIP], the step separator)
model.py      a Qwen2 decoder: from_config at tiny scale, from_pretrained on a hub id (its pinned
              snapshot, offline: core.acquire) or a save_pretrained directory at full scale; a plain
              next-token training loop (tiny)
train.py      the full-scale fine-tuning recipe through accelerate: LoRA (peft) or full-parameter,
              bf16-mixed with fp32 optimizer state, activation checkpointing, ZeRO-2/FSDP sharding
traces.py     seeded chain-arithmetic reasoning traces with the real datasets' row schema
              (problem, answer, trace) and the cards' knobs (redundancy, filler, errors, fixes)
generate.py   batched KV-cache generation with per-token log-probs, entropies and max-probs,
              prefilling and teacher-forced scoring; each batch a checkpoint at full scale (resume_in)
formats.py    the text layout at each scale: prompts, step boundaries, answer extraction and grading
              (tags + exact match at tiny scale; chat template, blank-line steps, \\boxed{} + math-verify at full)
benchmarks.py full-scale problem sets from a hub dataset file or a checksummed URL, as {problem, answer} rows
hooks.py      forward hooks on one decoder layer: read hidden states, or shift them
stages.py     what the papers' stage functions share: acquire the problems, train the tiny base
              models (prepare), load the model a stage works with, save a fine-tuned one

Imported only inside jobs (it imports torch); never at Snakemake DAG-build time.
"""
