"""The LLM-driven evolutions at full scale: EvolDomain and EvolDifficulty as the paper describes them
(card 13, section 2), prompted to a pinned hub LLM (evolve.llm.model) through transformers, every
output checked by real Lean before it joins the training set; EvolAST then rewrites the verified
outputs that fall inside MiniLean's fragment (evol.ast_variant, kernel-checked).

    EvolDomain      F(S_i, D_m): the seed statement S_i and a target domain D_m from evolve.llm.domains;
                    the paper's three-step instruction (deconstruct and abstract the logical skeleton,
                    analogise and transfer it into D_m, instantiate and package a new proposition);
                    evolve.llm.domain_per_seed domains per seed, drawn without replacement.
    EvolDifficulty  E(S_i, s_k, delta): one of the paper's five strategies s_k (logical structure,
                    mathematical depth, abstraction, constraints, parameters) drawn per request, and
                    delta in evolve.llm.difficulty_deltas (+1 harder, -1 easier).
Each prompt asks for a natural-language version and one Lean 4 block: a theorem (Mathlib) with its
complete tactic proof. `parse` takes the last ```lean block's theorem and the tactic block after
`:= by`; an output without one, whose block has `sorry` or any of lean_tools.BANNED (after its import /
set_option / open lines), or whose statement is the seed's own (up to its name and whitespace), is
dropped; other declarations in the block are not sent to Lean. The rest are checked with `lake env lean --json`
(lean_tools.check_problems, in the seeds' traced Lake project, which leandojo_trace built with
Mathlib in the seeds' acquire) and only the proofs Lean accepts join the training set (the card's
"statement compile check + proof found + Lean-verified": here the proof is the LLM's own).
Generation is core.lm.generate (temperature evolve.llm.temperature, one sample per request).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

STRATEGIES = ("logical structure", "mathematical depth", "abstraction", "constraints", "parameters")

DOMAIN_PROMPT = """You are given a formal Lean 4 (Mathlib) theorem.

{statement}

Create an analogous theorem in the domain of {domain}:
1. Deconstruct and abstract: extract the logical skeleton of the theorem (its structures, operations and relations).
2. Analogise and transfer: map those structures and operations to their counterparts in {domain}.
3. Instantiate and package: write one concrete new proposition in {domain} that follows the same \
skeleton.

Answer with a natural-language statement of the new proposition, then one ```lean block that \
contains the new theorem and its complete tactic proof (`:= by` followed by tactics; no `sorry`)."""

DIFFICULTY_PROMPT = """You are given a formal Lean 4 (Mathlib) theorem.

{statement}

Write a new theorem that is {direction} than this one by adjusting its {strategy}, keeping it true and provable.

Answer with a natural-language statement of the new proposition, then one ```lean block that \
contains the new theorem and its complete tactic proof (`:= by` followed by tactics; no `sorry`)."""

LEAN_BLOCK = re.compile(r"```lean4?\s*\n(.*?)```", re.S)
THEOREM = re.compile(r"\b(theorem|lemma)\s+\S+.*?:=\s*by\b", re.S)


def requests(seeds: list[dict], llm: dict, seed: int) -> list[dict]:
    """One request per (seed, target domain) and per (seed, delta): {origin, kind, target, prompt}."""
    from .lean_repl import strip_header

    rng = np.random.default_rng(seed)
    out = []
    for s in seeds:
        statement = strip_header(s["lean"]).strip()
        domains = list(llm["domains"])
        for d in rng.choice(len(domains), size=min(int(llm["domain_per_seed"]), len(domains)), replace=False):
            out.append({"origin": s["name"], "kind": "domain", "target": domains[int(d)],
                        "prompt": DOMAIN_PROMPT.format(statement=statement, domain=domains[int(d)])})
        for delta in llm["difficulty_deltas"]:
            strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))]
            out.append({"origin": s["name"], "kind": "difficulty", "target": f"{strategy} {int(delta):+d}",
                        "prompt": DIFFICULTY_PROMPT.format(statement=statement, strategy=strategy,
                                                           direction="harder" if delta > 0 else "easier")})
    return out


def parse(text: str, seed_statement: str = "") -> tuple[str, str] | None:
    """(statement up to `:= by`, tactic block) from an LLM answer, or None (see the module docstring)."""
    from . import lean_tools
    from .lean_repl import strip_header

    blocks = LEAN_BLOCK.findall(text)
    if not blocks:
        return None
    code = strip_header(blocks[-1])
    m = THEOREM.search(code)
    if not m:
        return None
    statement = code[m.start():m.end()]
    statement = statement[:statement.rfind(":=")].rstrip()
    proof = "\n".join(ln[2:] if ln.startswith("  ") else ln.strip() for ln in code[m.end():].strip("\n").splitlines())
    proof = proof.strip()
    if not proof or lean_tools.banned(code):   # anywhere in the block (header lines stripped)
        return None
    norm = lambda t: " ".join(re.sub(r"^(theorem|lemma)\s+\S+", "", t.strip()).split())  # noqa: E731
    seed_statement = strip_header(seed_statement).strip() if seed_statement else ""
    seed_cut = seed_statement.rfind(":=")
    if seed_statement and norm(statement) == norm(seed_statement[:seed_cut] if seed_cut >= 0 else seed_statement):
        return None
    return statement, proof


def chat(tokenizer, prompt: str) -> str:
    """The prompt in the LLM's chat template (a plain prompt when it has none)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    return prompt


def generate(model, tokenizer, prompts: list[str], llm: dict, seed: int) -> list[str]:
    """One sampled answer per prompt (core.lm.generate through prover.sample_proofs)."""
    from . import prover

    texts = [chat(tokenizer, p) for p in prompts]
    out = prover.sample_proofs(model, tokenizer, texts, 1, int(llm["max_new_tokens"]), float(llm["temperature"]),
                               seed, int(llm["batch_size"]))
    return [o[0] for o in out]


def verify(items: list[dict], project: Path, home: Path, work: Path, header: str, workers: int, timeout: float,
           runner=None) -> list[bool]:
    """Lean's verdict on each {name, statement, proof} (lean_tools.check_problems)."""
    import subprocess

    from . import lean_tools

    problems = [{"name": it["name"], "lean": it["statement"] + " := by sorry", "proofs": [it["proof"]]} for it in items]
    got = lean_tools.check_problems(problems, project, home, work, header, workers, timeout,
                                    runner=runner or subprocess.run)
    return [bool(g and g[0]) for g in got]


def evolve_llm(seeds: list[dict], llm: dict, project: Path, home: Path, work: Path, header: str, seed: int, log=print,
               model=None, tokenizer=None, runner=None) -> tuple[dict[str, list[dict]], dict]:
    """The LLM evolutions of `seeds` ({name, lean}): {"domain": rows, "difficulty": rows} of the
    Lean-verified outputs ({name, origin, target, lean, proof}) and the counts of each step."""
    if model is None:
        from iclr26.core.acquire import model_path
        from iclr26.core.lm.model import build_model
        from iclr26.core.lm.tokenizer import load_tokenizer
        from iclr26.core.runtime import pick_device

        tokenizer = load_tokenizer(model_path(llm["model"]))
        model = build_model(llm["model"], tokenizer, device=pick_device(llm.get("device"))).eval()
    reqs = requests(seeds, llm, seed)
    by_name = {s["name"]: s for s in seeds}
    answers = generate(model, tokenizer, [r["prompt"] for r in reqs], llm, seed)
    parsed = []
    for i, (r, text) in enumerate(zip(reqs, answers)):
        got = parse(text, by_name[r["origin"]]["lean"])
        if got is not None:
            parsed.append({**r, "name": f"{r['origin']}_{r['kind']}_{i}", "statement": got[0], "proof": got[1]})
    ok = verify(parsed, project, home, work, header, int(llm.get("workers", 1)), float(llm.get("timeout_s", 600)),
                runner) if parsed else []
    out = {"domain": [], "difficulty": []}
    for it, good in zip(parsed, ok):
        if good:
            out[it["kind"]].append({"name": it["name"], "origin": it["origin"], "target": it["target"],
                                    "lean": it["statement"] + " := by\n  " + "\n  ".join(it["proof"].splitlines()),
                                    "proof": it["proof"]})
    counts = {"requests": len(reqs), "parsed": len(parsed), "verified": sum(ok),
              **{f"verified_{k}": len(v) for k, v in out.items()}}
    log(f"LLM evolutions: {counts['requests']} requests, {counts['parsed']} parsed, {counts['verified']} "
        "accepted by Lean")
    return out, counts
