"""Stages of card 13, EvolProver (arXiv 2510.00732): evolving formal problems by symmetry and
difficulty, then fine-tuning a whole-proof prover on the evolved data.

    acquire   tiny: the seed generator's problems written in the real layouts (data.write_tiny);
              full: MiniF2F (git, pinned commit and tree; its whole checkout is the Lake project:
              elan + the pinned Lean toolchain by sha256 and Mathlib's cache, lean_tools.setup),
              Ineq-Comp (git), FormalMATH-Lite and Lean-Workbook (hub files at pinned commits); the
              prover's hub snapshot; seeds with data.seeds.trace: the seed corpus written as a Lean
              repository, committed, and traced by lean-dojo into LeanDojo Benchmark's format
              (leandojo_trace; its own elan + toolchain install)
    prepare   every Lean statement parsed (minilean.parse_theorem, the same parser at both scales);
              seeds: the evolutions (evol.evolve: EvolDomain, EvolDifficulty, then EvolAST on the
              seeds and the verified outputs), each kept only if its proof checks; full with
              evolve.llm_evolutions: EvolDomain / EvolDifficulty by the pinned LLM (llm_evol, a GPU),
              each output kept only if Lean accepts its statement and proof in the seeds' traced project
    train     one prover per (arm, seed) on the arm's training set, the same optimizer steps for
              every arm (compute-matched)
    evaluate  n sampled proofs per test problem, each checked (tiny: the MiniLean kernel; full: real
              Lean, `lake env lean --json` in MiniF2F's Lake project, lean_tools.py), pass@k by the
              unbiased estimator, per benchmark

Arms (the table's rows): seed_only; seed + EvolAST; seed + EvolDomain; seed + EvolDifficulty;
evol_all (the pipeline); data_matched (as many training problems as evol_all, all drawn from the
seed corpus: more data without evolution). `run_methods` names the arms run at a scale (tiny: seed_only,
evol_all, data_matched); the others get no jobs there and no records, so their claims come out
"untestable here". Training sets are decontaminated by training_set: no training problem equals a test
statement up to the names of its variables and hypotheses and its layout, and no evolved problem descends
from one so dropped (other rewrites of a test problem are not screened: see training_set).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from iclr26.core.io import read_json, read_jsonl, write_json, write_jsonl

from . import data, prover
from . import minilean as ml

TESTS = ("minif2f", "formalmath_lite", "ineq_comp")


def acquire(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    if spec["source"] == "synthetic":
        return {"source": "synthetic", **data.write_tiny(job.dataset, spec, job.out_dir)}
    info = data.acquire_full(job.dataset, spec, job.out_dir, job.log)
    if spec.get("lean_project"):   # the benchmark's Lake project: elan, the pinned toolchain, Mathlib
        from . import lean_tools

        lean = {**job.cfg["lean"], **spec["lean"]}
        info["lean"] = lean_tools.setup(lean, job.out_dir / "project", job.log)
        if (lean.get("interact") or {}).get("prebuild"):   # LeanInteract's REPL (eval.checker lean_interact)
            from . import lean_interact_checker

            info["lean_interact"] = lean_interact_checker.setup(lean, job.out_dir / "project", job.log)
    if spec.get("trace"):   # the seed corpus as a Lean repository, traced by lean-dojo (leandojo_trace)
        from . import leandojo_trace

        info["leandojo"] = leandojo_trace.trace_seed_corpus(job.cfg, spec, job.out_dir, job.log)
    if job.dataset == "seeds" and not Path(job.cfg["model"]["source"]).exists():
        from iclr26.core.acquire import snapshot_model

        info["model"] = snapshot_model(job.cfg["model"])   # offline on the GPU nodes
        _plain_config(job.cfg["model"], info["model"])
    llm = job.cfg["evolve"].get("llm")
    if job.dataset == "seeds" and job.cfg["evolve"].get("llm_evolutions") and llm \
            and not Path(llm["model"]["source"]).exists():   # the evolutions' LLM (llm_evol), for prepare
        from iclr26.core.acquire import snapshot_model

        info["llm"] = snapshot_model(llm["model"])
    return info


def _plain_config(spec: dict, got: dict) -> None:
    """The prover's snapshot must load without remote code (audit M5: DeepSeek-Prover-V1.5-SFT's first
    commits shipped a config.json whose auto_map points at configuration_deepseek.py; nothing in the
    core passes trust_remote_code)."""
    import json

    path = Path(got.get("path") or "") / "config.json"
    if path.exists() and "auto_map" in json.loads(path.read_text()):
        from iclr26.core.errors import DataError

        raise DataError(f"model {spec['source']} at {spec.get('revision')}: config.json has an auto_map (remote "
                        "code); pin a revision whose config.json is a plain transformers config")


def prepare(job) -> dict:
    spec = job.cfg["data"][job.dataset]
    rows = data.parse_rows(data.read_problems(job.dataset, spec, job.raw_dir()))
    for r in rows:
        r["lean_prompt"] = _lean_prompt(r["lean"])
    info = {"problems": len(rows), "in_fragment": sum(r["in_fragment"] for r in rows)}
    if job.dataset != "seeds":
        write_jsonl(job.out_dir / "problems.jsonl", rows)
        info["subsets"] = {s: sum(r["subset"] == s for r in rows) for s in sorted({r["subset"] for r in rows})}
        return info
    if spec["source"] == "synthetic":
        usable = [r for r in rows if r.get("verified")]
    else:   # full: Lean-Workbook's proved rows (checked by Lean upstream); MiniLean only parses them
        usable = [r for r in rows if r.get("proof")]
    n_seeds = job.cfg["evolve"]["n_seeds"]
    seeds, reserve = usable[:n_seeds], usable[n_seeds:]
    write_jsonl(job.out_dir / "seed.jsonl", seeds)
    write_jsonl(job.out_dir / "reserve.jsonl", reserve)
    info.update(seeds=len(seeds), reserve=len(reserve), verified=len(usable))
    status = job.raw_dir("seeds") / "leandojo" / "status.json"
    if status.exists():   # lean-dojo's trace (acquire; optional, read by nothing downstream: audit M1)
        info["leandojo"] = read_json(status)
        if not info["leandojo"].get("traced"):
            job.log(f"lean-dojo did not trace the seed corpus (recorded at acquire): {info['leandojo'].get('error')}")
    if job.cfg["evolve"].get("llm_evolutions", True) is False:
        job.log("LLM-driven EvolDomain / EvolDifficulty are off (evolve.llm_evolutions): their rule-based "
                "stand-ins and EvolAST run on the seeds inside the MiniLean fragment")
    # the rule-based evolutions need statements inside the MiniLean fragment (all of them at tiny)
    # (named by the seed row's name: every evolved row's parent / origin is a row name; audit 13e N1)
    pairs = [(replace(ml.parse_theorem(r["lean"]), name=r["name"]), r["proof"]) for r in seeds if r.get("verified")]
    from . import evol

    # the hash partition into train / test statements is the tiny generator's; real data is decontaminated
    # by training_set alone (audit L5: the partition would drop ~20% of EvolAST outputs for nothing)
    frac = spec["test_fraction"] if spec["source"] == "synthetic" else 0.0
    parents: dict = {}
    evolved = evol.evolve(pairs, job.cfg["evolve"], job.cfg["evolve"]["seed"], frac, parents)

    def origin(name):   # the seed a chain of evolutions started from
        while name in parents:
            name = parents[name]
        return name

    for kind, items in evolved.items():
        out = [{"name": st.name, "subset": kind, "lean": st.lean(proof), "prompt": st.prompt(),
                "lean_prompt": _lean_prompt(st.lean()), "proof": proof, "in_fragment": True, "verified": True,
                "parent": parents[st.name], "origin": origin(st.name)}
               for st, proof in items]
        write_jsonl(job.out_dir / f"{kind}.jsonl", out)
        info[kind] = len(out)
    llm = job.cfg["evolve"].get("llm")
    if job.cfg["evolve"].get("llm_evolutions") and llm:   # full: the LLM's EvolDomain / EvolDifficulty
        info["llm"] = _llm_evolutions(job, spec, seeds, llm)
        info.update({k: info["llm"][f"rows_{k}"] for k in ("domain", "difficulty", "ast_of_evolved")})
    return info


def _llm_evolutions(job, spec: dict, seeds: list[dict], llm: dict) -> dict:
    """llm_evol.evolve_llm on the first evolve.llm.n_seeds seeds, checked by Lean in the seeds' traced
    Lake project (data.seeds.trace, built by this dataset's acquire); its outputs become domain.jsonl
    and difficulty.jsonl, and EvolAST variants of those inside MiniLean's fragment ast_of_evolved.jsonl."""
    from . import evol, llm_evol

    if not spec.get("trace"):
        raise ValueError("evolve.llm needs data.seeds.trace (its Lake project checks the LLM's outputs)")
    lean = job.cfg["lean"]
    llm = {"device": job.cfg.get("device"), **llm}   # the job's device (cuda at full), unless evolve.llm names one
    rows, counts = llm_evol.evolve_llm(seeds[: llm["n_seeds"]], llm, job.raw_dir("seeds") / "leandojo" / "repo",
                                       Path(spec["trace"]["home"]), job.out_dir / "llm_check", lean["header"],
                                       job.cfg["evolve"]["seed"], job.log)
    rng = np.random.default_rng(job.cfg["evolve"]["seed"])
    ast_rows = []
    for kind in ("domain", "difficulty"):
        out = []
        for r in rows[kind]:
            try:
                st = ml.parse_theorem(r["lean"])
            except ml.Unsupported:
                st = None
            prompt = st.prompt() if st is not None else " ".join(r["lean"][: r["lean"].rfind(":= by")].split()[2:])
            out.append({**r, "subset": kind, "prompt": prompt, "lean_prompt": _lean_prompt(r["lean"]),
                        "in_fragment": bool(st is not None and st.in_fragment), "verified": True,
                        "parent": r["origin"]})
            if st is not None and st.in_fragment and ml.check(st, r["proof"]):   # EvolAST on the verified output
                new, new_proof = evol.ast_variant(st, r["proof"], rng)
                new = replace(new, name=f"{r['name']}_ast")
                if ml.check(new, new_proof):
                    ast_rows.append({"name": new.name, "subset": "ast_of_evolved", "lean": new.lean(new_proof),
                                     "prompt": new.prompt(), "lean_prompt": _lean_prompt(new.lean()),
                                     "proof": new_proof, "in_fragment": True, "verified": True,
                                     "parent": r["name"], "origin": r["origin"]})
        write_jsonl(job.out_dir / f"{kind}.jsonl", out)
        counts[f"rows_{kind}"] = len(out)
    write_jsonl(job.out_dir / "ast_of_evolved.jsonl", ast_rows)
    counts["rows_ast_of_evolved"] = len(ast_rows)
    return counts


def _lean_prompt(lean: str) -> str:
    """The Lean source up to and including `:= by` (what the full-scale prover continues)."""
    cut = lean.find(":= by")
    return (lean[:cut] if cut >= 0 else lean).rstrip() + " := by\n  "


# ----------------------------------------------------------------------------- training sets
def decontam_key(prompt: str) -> str:
    """A statement's prompt up to renaming (audit M4): every name a binder group declares (variables and
    hypothesis names) becomes v0, v1, ... in the order declared, and the whitespace is normalised, so a
    training statement that restates a test statement with other variable or hypothesis names or another
    layout is caught too."""
    toks = prompt.replace("(", " ( ").replace(")", " ) ").split()
    names, depth, group = {}, 0, []
    for t in toks:
        if t == ":" and depth == 0:
            break   # the goal starts
        if t == "(":
            depth += 1
            group = [] if depth == 1 else group
        elif t == ")":
            depth -= 1
        elif depth == 1 and group is not None:
            if t == ":":
                for n in group:
                    names.setdefault(n, f"v{len(names)}")
                group = None   # the rest of the group is its type
            else:
                group.append(t)
    return " ".join(names.get(t, t) for t in toks)


def test_prompts(job) -> dict[str, str]:
    """{decontam_key: test set} of every test problem."""
    return {decontam_key(r["prompt"]): ds for ds in TESTS for r in read_jsonl(job.prepared_dir(ds) / "problems.jsonl")}


EVOLVED = ("ast", "domain", "difficulty", "ast_of_evolved")


def training_set(cfg: dict, prepared_dir: Path, method: str, exclude=frozenset(),
                 dropped: dict | None = None, descendants: dict | None = None) -> list[dict]:
    """The arm's training problems, screened in every part before the arm's parts are taken:
    (1) a problem whose prompt is a test statement up to the names of its variables and hypotheses and its
        layout (decontam_key in `exclude`, the test statements' keys; audits B1, 13d M4) is dropped;
        `dropped` counts them per test set;
    (2) every evolved problem that descends from a problem dropped by (1) (its EvolAST / EvolDomain /
        EvolDifficulty outputs and their EvolAST variants, by the rows' `parent` links written at prepare)
        is dropped too (audit 13e N1: they are the dropped problem rewritten); `descendants` counts them per part.
    Not screened: a training problem that equals a test problem only up to other rewrites (commuted,
    re-associated, flipped, hypotheses reordered or binders regrouped) or in meaning, when it does not
    descend from a dropped problem. At tiny scale the evolutions also drop their outputs in the
    generator's test partition (evol.is_test)."""
    rows = {kind: read_jsonl(prepared_dir / f"{kind}.jsonl") if (prepared_dir / f"{kind}.jsonl").exists() else []
            for kind in ("seed", *EVOLVED, "reserve")}
    for kind in EVOLVED:
        if any("parent" not in r for r in rows[kind]):
            raise ValueError(f"{prepared_dir / kind}.jsonl has rows without a parent (prepared before the "
                             "descendant screen, audit 13e N1): run prepare again")
    hit = set()

    def is_test(r):
        key = decontam_key(r["prompt"])
        if key not in exclude:
            return False
        if dropped is not None:
            where = exclude.get(key, "test") if isinstance(exclude, dict) else "test"
            dropped[where] = dropped.get(where, 0) + 1
        hit.add(r.get("name"))
        return True

    parts = {kind: [r for r in items if not is_test(r)] for kind, items in rows.items()}
    hit.discard(None)
    up = {r.get("name"): r["parent"] for kind in EVOLVED for r in rows[kind]}

    def descends(r):
        name, seen = r["parent"], set()
        while name is not None and name not in seen:
            if name in hit:
                return True
            seen.add(name)
            name = up.get(name)
        return r.get("origin") in hit

    for kind in EVOLVED:
        kept = [r for r in parts[kind] if not descends(r)]
        if descendants is not None:
            descendants[kind] = len(parts[kind]) - len(kept)
        parts[kind] = kept
    arms = cfg["train"]["arms"]
    if method == "data_matched":   # as many problems as the full pipeline's set, all from the seed corpus
        n = sum(len(parts[k]) for k in arms["evol_all"])
        reserve = parts["reserve"]
        if len(parts["seed"]) + len(reserve) < n:
            raise ValueError(f"data_matched needs {n} seed-corpus problems, the corpus has "
                             f"{len(parts['seed']) + len(reserve)} (raise data.seeds.n_reserve)")
        return parts["seed"] + reserve[: n - len(parts["seed"])]
    return [item for kind in arms[method] for item in parts[kind]]


def vocabulary(job) -> list[str]:
    """The tiny tokenizer's words: every token of every prepared statement and proof (an inventory
    of Lean tokens; no label is read from a test file)."""
    words = set()
    for ds in job.paper.datasets:
        for path in sorted(job.prepared_dir(ds).glob("*.jsonl")):
            for r in read_jsonl(path):
                words.update(r["prompt"].split())
                if r.get("proof"):
                    words.update(prover.words(r["proof"]).split())
    return sorted(words)


def _texts(cfg, item) -> tuple[str, str]:
    if cfg["model"].get("source"):
        return item["lean_prompt"], item["proof"]
    return item["prompt"], prover.words(item["proof"])


def train(job) -> dict:
    import torch

    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.lm.tokenizer import build_tokenizer, load_tokenizer
    from iclr26.core.runtime import pick_device

    cfg = job.cfg
    device = pick_device(cfg.get("device"))
    dropped: dict = {}
    descendants: dict = {}
    items = training_set(cfg, job.prepared_dir("seeds"), job.method, test_prompts(job), dropped, descendants)
    job.log(f"{len(items)} training problems; dropped as test statements (up to renaming), per test set: {dropped}; "
            f"evolved descendants of those dropped, per part: {descendants}")
    full = bool(cfg["model"].get("source"))
    if full:
        from iclr26.core.acquire import model_path

        tokenizer = load_tokenizer(model_path(cfg["model"]))
    else:
        tokenizer = build_tokenizer(vocabulary(job))

    def work(key):
        seed = int(key[1:])
        seqs, starts = prover.examples(tokenizer, [_texts(cfg, it) for it in items])
        folder = job.out_dir / f"prover_s{seed}"
        if full:
            from iclr26.core.lm.model import quiet_transformers
            from iclr26.core.lm.train import save_trained, train_recipe

            quiet_transformers()
            model = build_model(cfg["model"], tokenizer, device=device)
            model, losses = train_recipe(model, seqs, starts, tokenizer.pad_token_id, cfg["train"], seed, log=job.log)
            save_trained(model, folder)
        else:   # tiny: core.lm.model.build_model's Qwen2 without transformers' model code (decoder.Qwen2Tiny)
            from .decoder import Qwen2Tiny

            if cfg["model"].get("attn_implementation") == "sdpa" and device == "cpu":   # what the test pins
                model = Qwen2Tiny.from_spec(cfg["model"], tokenizer, seed=seed).to(device)
            else:
                model = build_model(cfg["model"], tokenizer, seed=seed).to(device)
            losses = train_lm(model, seqs, starts, tokenizer.pad_token_id, cfg["train"]["steps"],
                              cfg["train"]["batch_size"], cfg["train"]["lr"], seed, warmup=cfg["train"]["warmup"],
                              log=job.log)
            model.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder / "tokenizer"))
        del model
        torch.set_grad_enabled(True)
        tail = max(1, len(losses) // 10)
        epochs = cfg["train"]["steps"] * cfg["train"]["batch_size"] / max(1, len(items))
        return {"examples": len(items), "epochs": epochs, "first_loss": float(np.mean(losses[:tail])),
                "final_loss": float(np.mean(losses[-tail:]))}

    return {"units": job.units([f"s{s}" for s in job.seeds], work), "examples": len(items),
            "dropped_as_test": dropped, "dropped_descendants": descendants}


# ----------------------------------------------------------------------------- evaluation
def load_prover(job, seed: int):
    """(model, tokenizer) of the seed's prover: the tiny one (trained from config) as decoder.TinyQwen2 and
    decoder.WordTokenizer, which sample the same proofs without importing transformers; the full one through
    core.lm."""
    from iclr26.core.runtime import pick_device

    folder = job.out_dir / f"prover_s{seed}"
    device = pick_device(job.cfg.get("device"))
    spec = job.cfg["model"]
    if not spec.get("source") and spec.get("attn_implementation") == "sdpa" and device == "cpu":
        from .decoder import TinyQwen2, WordTokenizer

        return TinyQwen2(folder), WordTokenizer(folder / "tokenizer")
    from iclr26.core.lm.model import build_model, quiet_transformers
    from iclr26.core.lm.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(folder / "tokenizer")

    quiet_transformers()
    if (folder / "adapter_config.json").exists():   # full scale: the hub base + its LoRA adapters
        from iclr26.core.lm.train import load_adapters

        model = load_adapters(build_model(job.cfg["model"], tokenizer, device=device), folder)
    else:
        model = build_model({"source": str(folder)}, tokenizer, device=device)
    return model.eval(), tokenizer


def benchmarks(job) -> dict[str, list[dict]]:
    """{bench: problems}: minif2f, formalmath_lite, ineq_seed, ineq_type1, ineq_type2."""
    out = {}
    for ds in TESTS:
        rows = read_jsonl(job.prepared_dir(ds) / "problems.jsonl")
        if ds == "ineq_comp":
            for subset in ("seed", "type1", "type2"):
                out[f"ineq_{subset}"] = [r for r in rows if r["subset"] == subset]
        else:
            out[ds] = rows
    limit = job.cfg["eval"].get("max_problems")
    return {b: rows[:limit] if limit else rows for b, rows in out.items()}


def count_correct(job, rows: list[dict], proofs: list[list[str]], key: str) -> list[int]:
    """Checked proofs per problem: the MiniLean kernel (tiny, eval.checker minilean), real Lean
    (full, eval.checker lean: `lake env lean --json` over one file per problem in the benchmark's
    Lake project, a pool of lean.workers processes; lean_tools), LeanInteract's REPL server
    (lean_interact; lean_interact_checker), or our raw REPL client (lean_repl)."""
    cfg = job.cfg
    checker = cfg["eval"]["checker"]
    if checker == "minilean":
        cache = _kernel_cache
        return [sum(bool(cache(r["name"], r["lean"], p)) for p in ps) for r, ps in zip(rows, proofs)]
    lean = cfg["lean"]
    if checker == "lean":
        from . import lean_tools

        got = lean_tools.check_problems(
            [{"name": r["name"], "lean": r["lean"], "proofs": ps} for r, ps in zip(rows, proofs)],
            job.raw_dir(lean["project_dataset"]) / "project", Path(lean["home"]), job.out_dir / "lean_files" / key,
            lean["header"], lean["workers"], lean["timeout_s"])
        return [sum(g) for g in got]
    if checker == "lean_interact":   # LeanInteract's AutoLeanServer (lean_interact_checker)
        from .lean_interact_checker import LeanInteractChecker

        interact = lean.get("interact") or {}
        if not interact.get("prebuild") and not interact.get("local_repl_path"):
            raise ValueError("eval.checker lean_interact needs lean.interact.prebuild: true (the REPL is fetched "
                             "and built by MiniF2F's acquire) or lean.interact.local_repl_path")

        with LeanInteractChecker(lean, job.raw_dir(lean["project_dataset"]) / "project", lean["header"],
                                 lean["timeout_s"]) as server:
            return [sum(server.check_proof(r["lean"], p) for p in ps) for r, ps in zip(rows, proofs)]
    if checker == "lean_repl":
        from .lean_repl import LeanRepl

        with LeanRepl(lean["command"], cwd=str(job.raw_dir(lean["project_dataset"]) / "project"),
                      timeout=lean["timeout_s"], header=lean["header"]) as repl:
            return [sum(repl.check_proof(r["lean"], p) for p in ps) for r, ps in zip(rows, proofs)]
    raise ValueError(f"eval.checker must be minilean, lean, lean_interact or lean_repl, got {checker!r}")


class _KernelCache:
    """MiniLean over (problem, proof): the parsed statement and each distinct proof's verdict are
    kept for the whole job (samples repeat within a problem and across seeds)."""

    def __init__(self):
        self.statements: dict = {}
        self.check = prover.Checker()

    def __call__(self, name: str, lean: str, proof: str) -> bool:
        st = self.statements.get(lean)
        if st is None:
            st = self.statements[lean] = ml.parse_theorem(lean)
        return self.check(name + "\0" + lean, st, proof)


_kernel_cache = _KernelCache()


def evaluate(job) -> dict:
    cfg, ev = job.cfg, job.cfg["eval"]
    benches = benchmarks(job)
    ks = sorted({int(k) for k in ev["k"]} | {int(ev["n_samples"])})
    loaded = {}

    def work(key):
        seed, bench = int(key.split("_", 1)[0][1:]), key.split("_", 1)[1]
        if seed not in loaded:
            loaded.clear()
            loaded[seed] = load_prover(job, seed)
        model, tokenizer = loaded[seed]
        rows = benches[bench]
        prompts = [_texts(cfg, {**r, "proof": ""})[0] for r in rows]
        proofs = prover.sample_proofs(model, tokenizer, prompts, ev["n_samples"], ev["max_new_tokens"],
                                      ev["temperature"], seed * 1000 + sorted(benches).index(bench), ev["batch_size"])
        correct = count_correct(job, rows, proofs, key)
        return {"correct": correct, "n": ev["n_samples"]}

    keys = [f"s{s}_{b}" for s in job.seeds for b in benches]
    done = job.units(keys, work)
    records = []
    for seed in job.seeds:
        per = {}
        for bench in benches:
            res = done[f"s{seed}_{bench}"]
            per[bench] = {f"pass_at_{k}": float(np.mean([prover.pass_at_k(res["n"], c, k) for c in res["correct"]]))
                          if res["correct"] else float("nan") for k in ks}
            per[bench]["n_problems"] = len(res["correct"])
        trans = [c for b in ("ineq_type1", "ineq_type2") for c in done[f"s{seed}_{b}"]["correct"]]
        per["ineq_transformed"] = {f"pass_at_{k}": float(np.mean([prover.pass_at_k(ev["n_samples"], c, k)
                                                                   for c in trans])) for k in ks}
        per["ineq_transformed"]["n_problems"] = len(trans)
        per["average"] = {f"pass_at_{k}": float(np.mean([per[b][f"pass_at_{k}"] for b in ev["average_of"]]))
                          for k in ks}
        top = f"pass_at_{ev['n_samples']}"
        for bench, vals in per.items():   # pass_at_n: the headline pass@k with k = n samples
            records.append({"seed": seed, "bench": bench, **vals, "pass_at_n": vals[top]})
        records.append({"seed": seed, "bench": "ineq_comp",
                        "robustness_gap": per["ineq_seed"][top] - per["ineq_transformed"][top]})
    write_json(job.out_dir / "summary.json", records)
    return {"records": records}


def figures(cfg: dict, records, out_dir) -> list[Path]:
    from . import plots

    return plots.make_all(cfg, records, Path(out_dir))
