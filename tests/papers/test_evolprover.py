"""EvolProver (card 13): the MiniLean kernel, pass@k, the evolutions, the Lean REPL client against a
stand-in process speaking the REPL's JSON protocol, the full-scale acquire from a local git
repository, and the real-Lean path of the full scale (lean_tools): elan and the pinned toolchain
downloaded by sha256 from a loopback server and unpacked in elan's layout, the project's
lean-toolchain checked, and the verifier's file, command line and verdicts read from Lean's
`--json` output format.

Where the offline full-scale path stops: elan-init and lean/lake are small scripts in the real
archive layouts (no Lean binary can be downloaded here), and the `lake exe cache get` / `lake env
lean --json` processes are a stand-in runner that prints Lean's JSON message format, deciding
proofs with MiniLean; hub downloads (data.hub_file, core.acquire.snapshot_model) only reach a
loopback server that lacks the file; lean-dojo's tracing of the seed repository stops at `lake
build` (no toolchain; see its test); LeanInteract runs a stand-in REPL process, not the real REPL;
the LLM evolutions run a tiny save_pretrained model, not the 7B instruction model; the 7B LoRA
fine-tune is covered by core.lm.train's own tests.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from math import comb
from pathlib import Path

import numpy as np
import pytest

from iclr26.core.errors import DataError
from iclr26.papers.evolprover import data, evol, lean_repl, prover
from iclr26.papers.evolprover import minilean as ml

ROOT = Path(__file__).resolve().parents[2]
MINIF2F_FILE = """import Mathlib

set_option maxHeartbeats 0

open BigOperators Real Nat Topology Rat

theorem mathd_algebra_478
  (b h v : ℝ)
  (h₀ : 0 < b ∧ 0 < h ∧ 0 < v)
  (h₁ : v = 1 / 3 * (b * h))
  (h₂ : b = 30)
  (h₃ : h = 13 / 2) :
  v = 65 := by sorry"""


def _seeds_job(raw, out_dir, cfg):
    """A stand-in for core.job.Job with what stages.prepare reads of the seeds dataset."""
    class Job:
        dataset = "seeds"

        @staticmethod
        def raw_dir(ds="seeds"):
            return raw

        @staticmethod
        def log(msg, **kw):
            pass
    Job.out_dir, Job.cfg = out_dir, cfg
    return Job


def test_parser_reads_a_real_minif2f_file():
    st = ml.parse_theorem(MINIF2F_FILE)
    assert st.name == "mathd_algebra_478"
    assert st.binders == [(("b", "h", "v"), "ℝ")]
    assert [h for h, _, _ in st.hyps] == ["h₀", "h₁", "h₂", "h₃"]
    assert len(st.hyps[0][1]) == 3 and st.goal[0].op == "="
    again = ml.parse_theorem(st.lean())      # print and re-parse: the same statement
    assert again.header_text() == st.header_text()


def test_kernel_accepts_exact_certificates_only():
    st = ml.parse_theorem("theorem t (a b : ℝ) (ha : 0 ≤ a) (hb : 0 ≤ b) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry")
    assert ml.check(st, "nlinarith [sq_nonneg (a - b)]")
    assert ml.check(st, "nlinarith [sq_nonneg (b - a), sq_nonneg (a + b)]")   # extra hints are harmless
    assert not ml.check(st, "nlinarith [sq_nonneg (a + b)]")                  # (a+b)^2 does not certify it
    assert not ml.check(st, "nlinarith")
    assert not ml.check(st, "sorry")
    assert not ml.check(st, "nlinarith [sq_nonneg (a - b)]\nring")              # a tactic after the goal closed
    false = ml.parse_theorem("theorem f (a b : ℝ) : 3 * a * b ≤ a ^ 2 + b ^ 2 := by sorry")
    assert not ml.check(false, "nlinarith [sq_nonneg (a - b), sq_nonneg (a + b)]")   # a false statement
    prod = ml.parse_theorem("theorem p (a b : ℝ) (ha : 0 ≤ a) (hb : 0 ≤ b) : a ^ 2 + b ^ 2 ≤ (a + b) ^ 2 := by sorry")
    assert ml.check(prod, "linarith [mul_nonneg ha hb]") and not ml.check(prod, "linarith")
    assert ml.check(prod, "nlinarith")                                          # nlinarith multiplies ha * hb
    ring = ml.parse_theorem("theorem r (x y : ℝ) : (x - 2 * y) ^ 2 = x ^ 2 - 4 * x * y + 4 * y ^ 2 := by sorry")
    assert ml.check(ring, "ring") and not ml.check(ring, "nlinarith")
    exp = ml.parse_theorem("theorem e (a b : ℝ) : 0 ≤ Real.exp a * Real.exp b + a ^ 2 := by sorry")
    assert ml.check(exp, "positivity")
    assert ml.check(exp, "nlinarith [mul_nonneg (Real.exp_pos a).le (Real.exp_pos b).le]")


def test_kernel_rejects_the_audits_unsound_proofs():
    """Audit M3: positivity of a square or of a non-negative hypothesis is not strict, and ℕ / ℤ
    arithmetic (truncated subtraction, floor division) is outside the fragment."""
    wrong = [("(x : ℝ) : 0 < x ^ 2", "positivity"), ("(x : ℝ) (h : 0 ≤ x) : 0 < x", "positivity"),
             ("(a b : ℕ) : a - b + b = a", "ring"), ("(a : ℕ) : a / 2 * 2 = a", "ring"),
             ("(a : ℤ) : 2 * (a / 2) = a", "ring"), (": 2 - 3 + 3 = 2", "ring"),
             ("(a b : ℕ) : 2 * a * b ≤ a ^ 2 + b ^ 2", "nlinarith [sq_nonneg (a - b)]")]
    for text, proof in wrong:
        st = ml.parse_theorem(f"theorem t {text} := by sorry")
        assert not ml.check(st, proof), text
    right = [("(x : ℝ) (h : 0 < x) : 0 < x ^ 2 + x", "positivity"), ("(x : ℝ) : 0 < x ^ 2 + 1", "positivity"),
             ("(x : ℝ) : 0 < Real.exp x", "positivity"), ("(x : ℝ) : 0 ≤ x ^ 2", "positivity"),
             ("(f : ℕ → ℝ) (n : ℕ) : 2 * f n * f (n + 1) ≤ f n ^ 2 + f (n + 1) ^ 2",
              "nlinarith [sq_nonneg (f n - f (n + 1))]")]
    for text, proof in right:
        assert ml.check(ml.parse_theorem(f"theorem t {text} := by sorry"), proof), text


def test_no_training_set_contains_a_test_statement(tmp_path):
    """Audit B1: the tiny datasets at reduced size, prepared as the pipeline does; no training file
    holds a test statement, and no training proof hint has the power of a power Type II needs."""
    import yaml

    from iclr26.papers.evolprover import stages

    cfg = yaml.safe_load((ROOT / "config/hydra/paper/evolprover.yaml").read_text())
    frac = cfg["data"]["seeds"]["test_fraction"]
    spec = {"n_seeds": 60, "n_reserve": 0, "data_seed": 0, "test_fraction": frac, "file": "lean_workbook.json",
            "families": ["amgm", "cauchy", "misc", "identity"]}
    data.write_tiny("seeds", spec, tmp_path)
    seeds = [r for r in data.parse_rows(data.read_problems("seeds", spec, tmp_path)) if r.get("verified")]
    parents: dict = {}
    evolved = evol.evolve([(ml.parse_theorem(r["lean"]), r["proof"]) for r in seeds], cfg["evolve"], 0, frac, parents)
    train = [r["prompt"] for r in seeds] + [st.prompt() for items in evolved.values() for st, _ in items]
    tests = {}
    for ds in ("minif2f", "formalmath_lite", "ineq_comp"):
        tspec = {**cfg["data"][ds], "test_fraction": frac, "n_problems": 12, "n_seed_problems": 8}
        data.write_tiny(ds, tspec, tmp_path / ds)
        rows = data.parse_rows(data.read_problems(ds, tspec, tmp_path / ds))
        assert rows and all(r["in_fragment"] for r in rows)
        tests[ds] = {r["prompt"] for r in rows}
    assert all(not evol.is_test(st, frac) for items in evolved.values() for st, _ in items)
    both = set().union(*tests.values())
    # the statements themselves: the seed and Ineq/MiniF2F partition is disjoint by the hash
    assert not (set(train) & (tests["minif2f"] | tests["ineq_comp"]))
    # FormalMATH-Lite-like items are variants of test seeds: training_set drops any coincidence
    out = tmp_path / "prepared"
    out.mkdir()
    for kind, items in {"seed": [(ml.parse_theorem(r["lean"]), r["proof"]) for r in seeds], **evolved}.items():
        lineage = (lambda st: {"parent": parents[st.name]}) if kind != "seed" else (lambda st: {})
        (out / f"{kind}.jsonl").write_text("".join(__import__("json").dumps(
            {"name": st.name, "prompt": st.prompt(), "proof": p, **lineage(st)}) + "\n" for st, p in items))
    arms = {"train": {"arms": {"evol_all": ["seed", "ast", "domain", "difficulty", "ast_of_evolved"]}}}
    keys = {stages.decontam_key(p) for p in both}
    kept = stages.training_set(arms, out, "evol_all", keys)
    assert kept and not {stages.decontam_key(r["prompt"]) for r in kept} & keys
    planted_key = stages.decontam_key(train[0])
    planted = stages.training_set(arms, out, "evol_all", {planted_key: "minif2f"}, dropped := {}, desc := {})
    n_planted = sum(stages.decontam_key(t) == planted_key for t in train)
    assert train[0] not in {r["prompt"] for r in planted}
    assert len(planted) == len(train) - n_planted - sum(desc.values()) and sum(desc.values()) > 0   # and its offspring
    assert dropped == {"minif2f": n_planted}
    # Type II's substitution never appears in a training hint (the held-out floor is visible)
    assert not any("^" in p for items in evolved.values() for _, p in items)
    assert not any("^" in r["proof"] for r in seeds)


def test_normal_form_agrees_with_sympy():
    sympy = pytest.importorskip("sympy")
    rng = np.random.default_rng(0)
    for i in range(20):
        st, _ = evol.make_seed(rng, i, ["amgm", "cauchy", "misc", "identity"][i % 4])
        r = st.goal[0]
        text = f"({ml.show(r.lhs)}) - ({ml.show(r.rhs)})".replace("^", "**")
        expanded = sympy.expand(sympy.sympify(text))
        got = ml.p_add(ml.poly(r.lhs), ml.poly(r.rhs), -1)
        if expanded == 0:                      # a ring identity: both sides have one normal form
            assert got == {} and r.op == "="
            continue
        want = sympy.Poly(expanded)
        names = [str(g) for g in want.gens]
        back = {tuple(sorted((names[j], e) for j, e in enumerate(m) if e)): c for m, c in want.terms()}
        assert {m: sympy.Rational(c.numerator, c.denominator) for m, c in got.items()} == back


def test_pass_at_k_is_the_unbiased_estimator():
    for n, c, k in [(5, 2, 1), (6, 3, 2), (8, 1, 4), (6, 0, 3), (6, 6, 3)]:
        samples = [1] * c + [0] * (n - c)
        brute = np.mean([any(s) for s in itertools.combinations(samples, k)])
        assert prover.pass_at_k(n, c, k) == pytest.approx(brute)
        assert prover.pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert prover.pass_at_k(32, 1, 32) == 1.0 and prover.pass_at_k(32, 1, 1) == pytest.approx(1 / 32)
    with pytest.raises(ValueError):
        prover.pass_at_k(4, 1, 8)


def test_tiny_prover_without_transformers_equals_core_lm_bit_for_bit(tmp_path):
    """decoder.Qwen2Tiny / TinyQwen2 / sample / WordTokenizer stand in for core.lm.model.build_model +
    core.lm.generate + core.lm.tokenizer.load_tokenizer at tiny scale: the same initial weights, the same losses
    and weights after train_lm (padded batches), a save_pretrained folder transformers loads, the same sampled
    tokens (left-padded prompts of several lengths, repeated prompts, rows ending at eos at different steps,
    several batches, greedy too), the same token ids and texts."""
    import torch

    from iclr26.core.lm.generate import generate
    from iclr26.core.lm.model import build_model, train_lm
    from iclr26.core.lm.tokenizer import build_tokenizer, load_tokenizer
    from iclr26.papers.evolprover import decoder

    tok = build_tokenizer([f"w{i}" for i in range(20)])
    spec = {"source": None, "attn_implementation": "sdpa",
            "config": {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                       "intermediate_size": 32, "max_position_embeddings": 64}}
    ref, mine = build_model(spec, tok, seed=3), decoder.Qwen2Tiny.from_spec(spec, tok, seed=3)
    assert list(ref.state_dict()) == list(mine.state_dict())
    assert all(torch.equal(v, mine.state_dict()[k]) for k, v in ref.state_dict().items())
    rng = np.random.default_rng(0)
    seqs = [rng.integers(7, len(tok), size=rng.integers(3, 12)).tolist() + [tok.eos_token_id] for _ in range(20)]
    starts = [int(rng.integers(1, 3)) for _ in seqs]
    losses = [train_lm(m, seqs, starts, tok.pad_token_id, 6, 4, 1e-2, 0, warmup=2) for m in (ref, mine)]
    assert losses[0] == losses[1]
    assert all(torch.equal(v, mine.state_dict()[k]) for k, v in ref.state_dict().items())
    mine.save_pretrained(tmp_path / "m")
    loaded = build_model({"source": str(tmp_path / "m")}, tok)   # transformers reads our folder
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in ref.state_dict().items())
    prompts = [s[: starts[i] + 2] for i, s in enumerate(seqs[:6])]   # of 3 and 4 tokens: left-padded batches
    padded = [p for p in prompts for _ in range(5)]
    same = [s[:3] for s in seqs[6:10] for _ in range(3)]              # no padding: sdpa without a mask
    tiny = decoder.TinyQwen2(tmp_path / "m")
    lengths = set()
    for temperature, seed, flat in ((1.0, 5, padded), (1.0, 6, padded), (0.0, 0, padded), (1.0, 7, same)):
        want = generate(loaded.eval(), flat, tok.pad_token_id, tok.eos_token_id, 9, temperature=temperature, seed=seed,
                        batch_size=12).tokens
        got = decoder.sample(tiny, flat, tok.pad_token_id, tok.eos_token_id, 9, temperature, seed, 12)
        assert got == want
        lengths |= {len(t) for t in want}
    assert len(lengths) > 2   # rows left the batch at different steps
    tok.save_pretrained(str(tmp_path / "tok"))
    words, ref_tok = decoder.WordTokenizer(tmp_path / "tok"), load_tokenizer(tmp_path / "tok")
    assert (words.pad_token_id, words.eos_token_id) == (ref_tok.pad_token_id, ref_tok.eos_token_id)
    for text in ("w1 w2  w13", "w4 <think> w5 </think> <eos>", "nope w3"):
        ids = ref_tok.encode(text, add_special_tokens=False)
        assert words.encode(text) == ids
        assert words.decode(ids, skip_special_tokens=True) == ref_tok.decode(ids, skip_special_tokens=True)


def test_evolutions_are_verified_and_type_two_stays_held_out():
    pool = evol.seed_pool(24, 5, ["amgm", "cauchy", "misc", "identity"])
    seeds = [(s, p) for s, p, _ in pool]
    out = evol.evolve(seeds, {"domains": ["seq", "exp"], "domain_per_seed": 2, "difficulty_deltas": [1, -1],
                              "ast_per_seed": 2}, 0)
    assert all(out[k] for k in ("ast", "domain", "difficulty", "ast_of_evolved"))
    for items in out.values():
        for st, proof in items:
            assert ml.check(st, proof)
    # EvolAST keeps the meaning: the goal polynomial up to renaming of the variables
    st, proof = seeds[0]
    rng = np.random.default_rng(1)
    for _ in range(10):
        new, new_proof = evol.ast_variant(st, proof, rng)
        assert ml.check(new, new_proof)
        sign = 1 if new.goal[0].op == st.goal[0].op else -1
        a = ml._rel_fact(st.goal[0])[0]
        b = ml._rel_fact(new.goal[0])[0]
        assert sorted(a.values()) == sorted(v * sign for v in b.values()) or sorted(a.values()) == sorted(b.values())
    # Type II (x -> x^2) is produced by no evolution: no evolved statement raises a variable to a power of a power
    type_two = {evol.type_two(s, p)[0].header_text().split(":", 1)[1] for s, p in seeds}
    evolved = {s.header_text().split(":", 1)[1] for items in out.values() for s, _ in items}
    assert not type_two & evolved
    assert not any(") ^ 2 ) ^ 2" in t or " ^ 2 ) ^ 2" in t for t in evolved)
    # Type I: the copy over letters no seed has, or over the corpus's own unused names; both verified
    for st, proof in seeds[:8]:
        old = {n for names, _ in st.binders for n in names}
        for fresh, pool in (("new", set(evol.FRESH)), ("corpus", set(evol.NAMES) - old)):
            got = evol.type_one(st, proof, fresh)
            if got is None:
                continue
            new = {n for names, _ in got[0].binders for n in names} - old
            assert len(new) == len(old) and new <= pool and ml.check(*got), (fresh, got[0].header_text())


def test_test_partition_is_disjoint_from_training():
    train = data.draw(30, 0, ["amgm", "misc"], False, 0.3)
    test = data.draw(10, 0, ["amgm", "misc"], True, 0.3)
    key = lambda s: s.header_text().split(":", 1)[1]  # noqa: E731
    assert not {key(s) for s, _, _ in train} & {key(s) for s, _, _ in test}


STANDIN = textwrap.dedent('''
    """A stand-in for the Lean REPL: its JSON protocol on stdin/stdout, proofs checked by MiniLean."""
    import json, sys
    from iclr26.papers.evolprover import minilean as ml
    envs = 0
    buf = ""
    for line in sys.stdin:
        if line.strip():
            buf += line
            continue
        if not buf:
            continue
        req, buf = json.loads(buf), ""
        cmd = req.get("cmd", "")
        if "crash" in cmd:
            sys.exit(3)
        if "hang" in cmd:
            import time; time.sleep(30)
        if cmd.startswith("import"):
            out = {"env": envs}
        elif "env" not in req:
            out = {"message": "unknown environment"}
        else:
            st = ml.parse_theorem(cmd)
            proof = cmd.split(":= by", 1)[1]
            msgs, sorries = [], []
            if "sorry" in proof:
                msgs.append({"severity": "warning", "pos": {"line": 1, "column": 8}, "endPos": {"line": 1, "column": 9},
                             "data": "declaration uses 'sorry'"})
                sorries.append({"goal": "?"})
            elif not ml.check(st, proof.strip()):
                msgs.append({"severity": "error", "pos": {"line": 2, "column": 2}, "endPos": {"line": 2, "column": 11},
                             "data": "linarith failed"})
            out = {"env": envs + 1, "messages": msgs}
            if sorries:
                out["sorries"] = sorries
        envs += 1
        sys.stdout.write(json.dumps(out, indent=1) + "\\n\\n")
        sys.stdout.flush()
''')


def test_repl_client_against_a_stand_in_process(tmp_path):
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    lean = ml.parse_theorem("theorem t (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry").lean()
    with lean_repl.LeanRepl([sys.executable, str(script)], timeout=60, header=ml.HEADER) as repl:
        assert repl.check_proof(lean, "nlinarith [sq_nonneg (a - b)]")
        assert not repl.check_proof(lean, "nlinarith [sq_nonneg (a + b)]")
        assert not repl.check_proof(lean, "sorry")
        first = repl.proc.pid
        assert not repl.check_proof(lean, "crash")               # the REPL dies: restarted, proof failed
        assert repl.check_proof(lean, "nlinarith [sq_nonneg (b - a)]")
        assert repl.proc.pid != first
        repl.timeout = 0.2
        repl.command = [sys.executable, "-c", "import time; time.sleep(30)"]   # a restart that never answers
        assert not repl.check_proof(lean, "hang")                # no answer in time: failed, not stuck
    assert lean_repl.passes({"env": 1, "messages": [{"severity": "info", "data": "ok"}]})
    assert not lean_repl.passes({"env": 1, "messages": [{"severity": "warning", "data": "declaration uses 'sorry'"}]})


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_full_acquire_from_a_local_git_repository(tmp_path):
    repo = tmp_path / "miniF2F-lean4"
    (repo / "MiniF2F" / "Test").mkdir(parents=True)
    (repo / "MiniF2F" / "Test" / "mathd_algebra_478.lean").write_text(MINIF2F_FILE)
    seed = ml.parse_theorem("theorem amgm (x y : ℝ) : 2 * x * y ≤ x ^ 2 + y ^ 2 := by sorry")
    (repo / "MiniF2F" / "Test" / "amgm.lean").write_text(seed.lean())
    (repo / "lean-toolchain").write_text("leanprover/lean4:v4.24.0\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "x")
    _git(repo, "config", "uploadpack.allowReachableSHA1InWant", "true")
    commit, tree = _git(repo, "rev-parse", "HEAD"), _git(repo, "rev-parse", "HEAD:MiniF2F/Test")
    spec = {"source": "git", "git": f"file://{repo}", "commit": commit, "folder": "MiniF2F/Test", "tree": tree,
            "files": ["lean-toolchain"]}
    out = tmp_path / "raw"
    info = data.acquire_full("minif2f", spec, out, log=lambda m: None)
    assert info["files"] == 2 and (out / "lean-toolchain").exists()
    rows = data.parse_rows(data.read_problems("minif2f", spec, out))
    assert {r["name"] for r in rows} == {"amgm", "mathd_algebra_478"}
    amgm = next(r for r in rows if r["name"] == "amgm")
    assert amgm["in_fragment"] and ml.check(ml.parse_theorem(amgm["lean"]), "nlinarith [sq_nonneg (x - y)]")
    with pytest.raises(DataError, match="tree"):
        data.acquire_full("minif2f", {**spec, "tree": "0" * 40}, tmp_path / "raw2", log=lambda m: None)
    # the Lake project proofs are checked in: the whole checkout, without .git
    data.acquire_full("minif2f", {**spec, "lean_project": True}, tmp_path / "raw3", log=lambda m: None)
    project = tmp_path / "raw3" / "project"
    assert (project / "lean-toolchain").exists() and not (project / ".git").exists()
    # a commit the remote does not have: one line naming the repository and the commit
    with pytest.raises(DataError, match=f"git file://{repo} at {'1' * 40}"):
        data.acquire_full("minif2f", {**spec, "commit": "1" * 40}, tmp_path / "raw4", log=lambda m: None)


def test_one_line_errors(tmp_path, static_server):
    """Every error the paper's code raises for a user: a hub file that cannot be downloaded, an
    unknown source, a corpus too small for the data-matched arm, an unknown checker."""
    from iclr26.papers.evolprover import stages

    spec = {"hub_id": "internlm/Lean-Workbook", "file": "lean_workbook.json", "revision": "5" * 40,
            "endpoint": static_server[1]}   # a loopback server without the file (HTTP 404)
    with pytest.raises(DataError, match="cannot download internlm/Lean-Workbook/lean_workbook.json at 5{40}"):
        data.acquire_full("seeds", {**spec, "source": "hub"}, tmp_path)
    with pytest.raises(ValueError, match="must be synthetic, git or hub, got 'ftp'"):
        data.acquire_full("seeds", {"source": "ftp"}, tmp_path)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    row = '{"prompt": "p%d", "proof": "ring"}\n'
    (prepared / "seed.jsonl").write_text("".join(row % i for i in range(3)))
    (prepared / "ast.jsonl").write_text("".join(row % i for i in range(10, 15)))
    (prepared / "reserve.jsonl").write_text(row % 99)
    cfg = {"train": {"arms": {"evol_all": ["seed", "ast"]}}}
    with pytest.raises(ValueError, match="ast.jsonl has rows without a parent .* run prepare again"):
        stages.training_set(cfg, prepared, "evol_all")
    (prepared / "ast.jsonl").write_text("".join(f'{{"prompt": "p{i}", "proof": "ring", "parent": null}}\n'
                                                for i in range(10, 15)))
    assert len(stages.training_set(cfg, prepared, "evol_all")) == 8
    with pytest.raises(ValueError, match="data_matched needs 8 seed-corpus problems, the corpus has 4"):
        stages.training_set(cfg, prepared, "data_matched")

    class Job:
        cfg = {"eval": {"checker": "coq"}, "lean": {}}
    with pytest.raises(ValueError, match="eval.checker must be minilean, lean, lean_interact or lean_repl, got 'coq'"):
        stages.count_correct(Job(), [], [], "s0_minif2f")


def test_reads_leanineqcomps_real_layout(tmp_path):
    """LeanIneqComp's benchmark/<family>_<subset>.jsonl rows (a real row, rpow: outside MiniLean's
    fragment, left to the Lean REPL) and a row inside the fragment."""
    import json

    real = {"name": "amgm_p1", "formal_statement": "theorem amgm_p1 (x y z: ℝ) (hx : x > 0) (hy : y > 0) (hz : z > 0) "
            ": (x + y + z) / 3 ≥ (x * y * z) ^ (3⁻¹: ℝ ) := by\n"}
    easy = {"name": "amgm_p2", "formal_statement": "theorem amgm_p2 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by\n"}
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "benchmark" / "amgm_seed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (real, easy)))
    (tmp_path / "benchmark" / "amgm_type2.jsonl").write_text(json.dumps(easy) + "\n")
    rows = data.parse_rows(data.read_problems("ineq_comp", {}, tmp_path))
    assert [(r["name"], r["subset"], r["in_fragment"]) for r in rows] == [
        ("amgm_p1", "seed", False), ("amgm_p2", "seed", True), ("amgm_p2", "type2", True)]


def _full_spec(dataset: str) -> dict:
    """data.<dataset> of the full scale's config file, as written (its pins, file and field names)."""
    import yaml

    return yaml.safe_load((ROOT / "config/hydra/paper_scale/evolprover/full.yaml").read_text())["data"][dataset]


# FormalMATH's row schema as the official FormalMATH-Bench code and public readers of the hub file use it:
# theorem_names, autoformalization (imports + the theorem, `:= by sorry`), refined_statement, source, ...
FORMALMATH_ROWS = [
    {"source": "olympiads", "refined_statement": "Prove that for all real a, b: 2ab <= a^2 + b^2.",
     "theorem_names": "olymid-ref-base_1", "autoformalization": "import Mathlib\n\nopen Real\n\n"
     "theorem olymid_ref_base_1 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry", "compiler_feedback_bool": True,
     "domain": ["Mathematics -> Algebra -> Inequalities"]},
    {"source": "omni_math", "refined_statement": "Show that n^2 + n is even for every natural n.",
     "theorem_names": "omni_theorem_7", "autoformalization": "import Mathlib\n\n"
     "theorem omni_theorem_7 (n : ℕ) : Even (n ^ 2 + n) := by sorry", "compiler_feedback_bool": True,
     "domain": ["Mathematics -> Number Theory"]},
]


@pytest.mark.parametrize("layout", ["array", "lines"])
def test_reads_formalmath_lite_rows_in_the_real_schema(tmp_path, layout):
    """Audit 13d H1 / M6: rows in FormalMATH's schema, read through the full config's spec (its file and
    `autoformalization` field), from one JSON array or from JSON lines (FoMA_Eval's own reader)."""
    import json

    spec = _full_spec("formalmath_lite")
    assert spec["statement_field"] == "autoformalization" and spec["hub_id"].startswith("SphereLab/")
    text = json.dumps(FORMALMATH_ROWS) if layout == "array" else "".join(json.dumps(r) + "\n" for r in FORMALMATH_ROWS)
    (tmp_path / spec["file"]).write_text(text)
    # the full spec's row count (the Lite set's 425, audit 13e N5): a copy of another size is one DataError
    assert spec["rows"] == 425
    message = r"SphereLab/FormalMATH-All/FormalMATH_lite.json at de3c3f74\w+: 2 rows, the FormalMATH-Lite set has 425 "
    with pytest.raises(DataError, match=message):
        data.read_problems("formalmath_lite", spec, tmp_path)
    spec = {**spec, "rows": len(FORMALMATH_ROWS)}
    rows = data.parse_rows(data.read_problems("formalmath_lite", spec, tmp_path))
    assert [(r["name"], r["in_fragment"]) for r in rows] == [("olymid-ref-base_1", True), ("omni_theorem_7", False)]
    assert rows[0]["prompt"] == ml.parse_theorem(FORMALMATH_ROWS[0]["autoformalization"]).prompt()
    assert rows[1]["lean"].startswith("import Mathlib") and "Even (n ^ 2 + n)" in rows[1]["lean"]


def test_lean_workbook_proofs_become_tactic_blocks_at_full_scale(tmp_path, monkeypatch):
    """Audit 13d H2 / M6: Lean-Workbook rows in its schema (id, split, natural_language_statement, answer,
    tags, formal_statement without header ending `:= by sorry`, proof: whole `theorem ... := by ...` texts,
    status), one outside MiniLean's fragment (ℕ), read through the full config's spec and prepared by
    stages.prepare: every training target is the tactic block, never `theorem ...`."""
    import json

    from iclr26.papers.evolprover import stages

    def row(i, stmt, proof):
        return {"id": f"lean_workbook_{i}", "split": "lean_workbook", "natural_language_statement": "…",
                "answer": "", "tags": ["inequality"],
                "formal_statement": f"theorem lean_workbook_{i} {stmt} := by sorry",
                "proof": [f"theorem lean_workbook_{i} {stmt} := by\n  {proof}"] if proof else [], "status": "proved"}
    rows = [row(1, "(n : ℕ) (h₀ : 0 < n) : n ^ 2 ≥ n", "nlinarith [sq_nonneg (n - 1)]"),
            row(2, "(a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2", "nlinarith [sq_nonneg (a - b)]"),
            row(3, "(x : ℕ) : x + 0 = x", "have h : x + 0 = x := by simp\n  exact h"),
            row(4, "(x : ℕ) : x ≤ x", None)]
    rows[3]["status"] = "open"
    spec = _full_spec("seeds")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / spec["file"]).write_text("".join(json.dumps(r) + "\n" for r in rows))   # JSON lines (read_records)

    Job = _seeds_job(raw, tmp_path / "prepared", {
        "data": {"seeds": {**spec, "test_fraction": 0.2}}, "model": {"source": "deepseek-ai/x"},
        "evolve": {"n_seeds": 10, "seed": 0, "llm_evolutions": False, "domains": ["seq"], "domain_per_seed": 1,
                   "difficulty_deltas": [1], "ast_per_seed": 1}})
    Job.out_dir.mkdir()
    fractions, real = [], evol.evolve
    monkeypatch.setattr(evol, "evolve", lambda *a, **k: fractions.append(a[3]) or real(*a, **k))
    info = stages.prepare(Job())
    # audit L5: real data has no hash test partition (the tiny generator's), so no evolved output is lost to it;
    # the one in-fragment seed (row 2) is evolved; each output names its parent and its origin seed (audit 13e N1)
    assert fractions == [0.0] and info["domain"] == info["difficulty"] == info["ast_of_evolved"] == 1
    child = json.loads((Job.out_dir / "ast_of_evolved.jsonl").read_text())
    assert child["name"] == "lean_workbook_2_diff0_ast" and child["origin"] == "lean_workbook_2"
    assert child["parent"] == "lean_workbook_2_diff0"
    seeds = [json.loads(line) for line in (Job.out_dir / "seed.jsonl").read_text().splitlines()]
    targets = {r["name"]: stages._texts(Job.cfg, r) for r in seeds}
    assert set(targets) == {"lean_workbook_1", "lean_workbook_2", "lean_workbook_3"}   # no proof: not a seed
    assert targets["lean_workbook_1"][1] == "nlinarith [sq_nonneg (n - 1)]"                # ℕ, outside the fragment
    assert targets["lean_workbook_2"][1] == "nlinarith [sq_nonneg (a - b)]"
    assert targets["lean_workbook_3"][1] == "have h : x + 0 = x := by simp\n  exact h"      # its own `:= by` kept
    assert all(not t.lstrip().startswith(("theorem", "lemma")) for _, t in targets.values())
    assert targets["lean_workbook_1"][0].endswith(":= by\n  ") and "sorry" not in targets["lean_workbook_1"][0]
    assert data.tactic_block("theorem t (x : ℕ) : x = x := rfl") is None                    # term mode: no target


def test_decontamination_catches_renamed_restatements():
    """Audit 13d M4: a training statement equal to a test statement up to variable and hypothesis names
    and layout has the same key; a different statement does not."""
    from iclr26.papers.evolprover import stages

    key = stages.decontam_key
    test = "( a b : ℝ ) ( ha : 0 ≤ a ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by"
    assert key(test) == key("(x y : ℝ)  (h₀ : 0 ≤ x) : 2 * x * y ≤ x ^ 2 + y ^ 2 := by")
    assert key(test) != key("( a b : ℝ ) ( ha : 0 ≤ a ) : 2 * a * b ≤ a ^ 2 + 2 * b ^ 2 := by")
    assert key(test) != key("( a b : ℕ ) ( ha : 0 ≤ a ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by")


# ----------------------------------------------------------------------------- real Lean at full scale
def _tar(path: Path, members: dict, fmt: str) -> Path:
    """An archive in a release's real layout: members {relative path: (text, mode)}."""
    import tarfile

    stage = path.with_suffix(".d")
    for rel, (text, mode) in members.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_text(text)
        (stage / rel).chmod(mode)
    if fmt == "tar.gz":
        with tarfile.open(path, "w:gz") as t:
            for rel in members:
                t.add(stage / rel, arcname=rel)
    else:   # tar.zst, as the Lean releases ship it
        subprocess.run(["tar", "--zstd", "-cf", str(path), "-C", str(stage), *members], check=True)
    return path


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lean_spec(static_server, tmp_path):
    """A fake elan tarball and a fake Lean v4.24.0 archive (real names and layouts) on a loopback server."""
    root, base = static_server
    init = "#!/bin/sh\nmkdir -p \"$ELAN_HOME/bin\"\necho \"$@\" > \"$ELAN_HOME/init_args\"\n"
    elan = _tar(root / "elan-x86_64-unknown-linux-gnu.tar.gz", {"elan-init": (init, 0o755)}, "tar.gz")
    lean = _tar(root / "lean-4.24.0-linux.tar.zst",
                {"lean-4.24.0-linux/bin/lean": ("#!/bin/sh\n", 0o755),
                 "lean-4.24.0-linux/bin/lake": ("#!/bin/sh\n", 0o755),
                 "lean-4.24.0-linux/lib/lean/Init.olean": ("", 0o644)}, "tar.zst")
    return {"toolchain": "leanprover/lean4:v4.24.0", "home": str(tmp_path / "elan"),
            "elan": {"url": f"{base}/{elan.name}", "sha256": _sha(elan)},
            "toolchain_archive": {"url": f"{base}/{lean.name}", "sha256": _sha(lean)},
            "header": ml.HEADER}


def _fake_lean(home, calls):
    """A stand-in for `lake` with the real `lean --json` output format (one JSON object per line, the
    field layout Lean >= 4.19 prints): each theorem is checked by MiniLean; a failed one gets Lean's
    error on its proof line and, as Lean does after error recovery, sorryAx among its axioms."""
    import json
    import re

    def run(cmd, cwd=None, env=None, capture_output=True, text=True, timeout=None):
        calls.append(cmd)
        assert env["ELAN_HOME"] == str(home) and env["PATH"].startswith(str(home / "bin"))
        if cmd[:2] != ["lake", "env"]:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        assert cmd[2:4] == ["lean", "--json"]
        lines, out, start = Path(cmd[4]).read_text().split("\n"), [], None
        for no, line in enumerate(lines, 1):
            if line.startswith("theorem"):
                start = no
            m = re.match(r"#print axioms (\S+)", line)
            if m:
                body = "\n".join(lines[start - 1:no - 1])
                proof = body.split(":= by", 1)[1].strip()
                ok = ml.check(ml.parse_theorem(body), proof)
                msg = {"severity": "error", "pos": {"line": no - 1, "column": 2}, "kind": "[anonymous]",
                       "keepFullRange": False, "fileName": cmd[4], "endPos": {"line": no - 1, "column": 11},
                       "data": "linarith failed to find a contradiction", "caption": ""}
                axioms = "[propext, " + ("" if ok else "sorryAx, ") + "Classical.choice, Quot.sound]"
                out += [] if ok else [json.dumps(msg, separators=(",", ":"))]
                out.append(json.dumps({"severity": "information", "pos": {"line": no, "column": 0},
                                       "kind": "[anonymous]", "keepFullRange": False, "fileName": cmd[4],
                                       "endPos": {"line": no, "column": 6},
                                       "data": f"'{m.group(1)}' depends on axioms: {axioms}", "caption": ""},
                                      separators=(",", ":")))
        return subprocess.CompletedProcess(cmd, 0, "\n".join(out) + "\n", "")
    return run


def test_lean_toolchain_install_from_a_loopback_server(static_server, tmp_path):
    """elan and the pinned toolchain downloaded by sha256 and unpacked in elan's layout; the
    project's lean-toolchain checked; Mathlib's cache fetched; the self-check run. Stops short of
    executing real elan-init / lean (fake scripts in the real archive layout)."""
    from iclr26.core.errors import ConfigError
    from iclr26.papers.evolprover import lean_tools

    lean = _lean_spec(static_server, tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "lean-toolchain").write_text("leanprover/lean4:v4.24.0\n")
    home, calls = Path(lean["home"]), []
    info = lean_tools.setup(lean, project, log=lambda m: None, runner=_fake_lean(home, calls))
    tc = home / "toolchains" / "leanprover--lean4---v4.24.0"
    assert (tc / "bin" / "lean").stat().st_mode & 0o111 and (tc / "lib" / "lean" / "Init.olean").exists()
    assert (home / "init_args").read_text().split() == ["-y", "--no-modify-path", "--default-toolchain", "none"]
    assert info["project_toolchain"] == "leanprover/lean4:v4.24.0"
    assert info["archive_sha256"] == lean["toolchain_archive"]["sha256"]
    assert calls[0] == ["lake", "exe", "cache", "get"] and calls[-1][:4] == ["lake", "env", "lean", "--json"]
    # a wrong digest, a project on another toolchain, an unpinned toolchain: one line each
    bad = {**lean, "home": str(tmp_path / "elan2"),
           "toolchain_archive": {**lean["toolchain_archive"], "sha256": "0" * 64}}
    with pytest.raises(DataError, match="sha256 mismatch"):
        lean_tools.install(bad, Path(bad["home"]), Path(bad["home"]) / "dl", log=lambda m: None)
    (project / "lean-toolchain").write_text("leanprover/lean4:v4.9.0\n")
    with pytest.raises(DataError, match="lean-toolchain names"):
        lean_tools.project_toolchain(project, lean)
    with pytest.raises(ConfigError, match="not a pinned release"):
        lean_tools.install({**lean, "toolchain": "leanprover/lean4:stable"}, home, home / "dl")
    assert lean_tools.pin_problems(lean) == []
    assert len(lean_tools.pin_problems({**lean, "toolchain": "leanprover/lean4:v4.9.0", "elan": {"url": "x"}})) == 2
    # a Lean that accepts everything fails the self-check at acquire, not as pass@k later
    (project / "lean-toolchain").write_text("leanprover/lean4:v4.24.0\n")

    import json

    def lenient(cmd, **kw):
        if cmd[:2] != ["lake", "env"]:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        names = [ln.split()[-1] for ln in Path(cmd[4]).read_text().splitlines() if ln.startswith("#print axioms")]
        text = "\n".join(json.dumps({"severity": "information", "pos": {"line": i, "column": 0},
                                     "data": f"'{n}' depends on axioms: [propext]"}) for i, n in enumerate(names))
        return subprocess.CompletedProcess(cmd, 0, text, "")
    with pytest.raises(DataError, match="self-check"):
        lean_tools.setup(lean, project, log=lambda m: None, runner=lenient)


# verbatim-format `lake env lean --json` lines (the field layout of Lean >= 4.19 as recorded in
# public projects): a sorry warning, an error, axioms with and without sorryAx, a crash note
REAL_LEAN_JSON = (
    '{"severity":"warning","pos":{"line":9,"column":8},"kind":"hasSorry","keepFullRange":false,"isSilent":false,'
    '"fileName":"/w/p.lean","endPos":{"line":9,"column":12},"data":"declaration uses \'sorry\'","caption":""}\n'
    '{"severity":"information","pos":{"line":11,"column":0},"kind":"[anonymous]","keepFullRange":false,'
    '"fileName":"/w/p.lean","endPos":{"line":11,"column":6},"data":"\'t_p0\' depends on axioms: [sorryAx]",'
    '"caption":""}\n'
    '{"severity":"error","pos":{"line":14,"column":2},"kind":"[anonymous]","keepFullRange":false,"isSilent":false,'
    '"fileName":"/w/p.lean","endPos":{"line":14,"column":11},'
    '"data":"linarith failed to find a contradiction\\ncase a\\n'
    'a b : ℝ\\na✝ : 2 * a * b > a ^ 2 + b ^ 2\\n⊢ False failed","caption":""}\n'
    '{"severity":"information","pos":{"line":15,"column":0},"kind":"[anonymous]","keepFullRange":false,'
    '"fileName":"/w/p.lean","endPos":{"line":15,"column":6},"data":"\'t_p1\' depends on axioms: [propext, sorryAx, '
    'Classical.choice, Quot.sound]","caption":""}\n'
    '{"caption":"","data":"\'t_p2\' depends on axioms: [propext, Classical.choice, Quot.sound]","endPos":{"column":6,'
    '"line":19},"fileName":"/w/p.lean","isSilent":false,"keepFullRange":false,"kind":"[anonymous]","pos":{"column":0,'
    '"line":19},"severity":"information"}\n'
    'Stack overflow detected. Aborting.\n')


def test_lean_checker_command_file_and_output_parsing(tmp_path):
    """The verifier's file (header, theorem per sample, #print axioms), its command line, and the
    verdicts read from Lean's JSON messages: only a theorem with no error / sorry on its lines and an
    axioms answer without sorryAx passes; an unanswered one (Lean stopped) fails."""
    from iclr26.papers.evolprover import lean_tools

    statement = "theorem t (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry"
    proofs = ["sorry", "linarith", "nlinarith [sq_nonneg (a - b)]", "nlinarith [sq_nonneg (a - b), sq_nonneg (a + b)]"]
    text, spans = lean_tools.proof_file(ml.HEADER, statement, proofs, "t")
    lines = text.split("\n")
    assert lines[:len(ml.HEADER.rstrip().split("\n"))] == ml.HEADER.rstrip().split("\n")
    assert [s["name"] for s in spans] == ["t_p0", "t_p1", "t_p2", "t_p3"]
    assert [(s["first"], s["last"], s["axioms_line"]) for s in spans][:3] == [(7, 8, 9), (11, 12, 13), (15, 16, 17)]
    assert lines[spans[2]["first"] - 1] == "theorem t_p2 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by"
    assert lines[spans[2]["axioms_line"] - 1] == "#print axioms t_p2" and "sorry" not in lines[spans[2]["last"] - 1]
    assert lean_tools.check_command(Path("/w/p.lean")) == ["lake", "env", "lean", "--json", "/w/p.lean"]
    msgs = lean_tools.parse_messages(REAL_LEAN_JSON)
    assert len(msgs) == 5 and msgs[2]["severity"] == "error"
    spans = [{"name": f"t_p{i}", "first": 4 * i + 8, "last": 4 * i + 9, "axioms_line": 4 * i + 11} for i in range(4)]
    assert lean_tools.verdicts(msgs, spans) == [False, False, True, False]   # t_p3: Lean never answered (crash)
    assert lean_tools.verdicts(msgs, spans, ["x", "x", "exact?  -- sorry", "x"]) == [False, False, False, False]
    # the whole step through a stand-in `lake` (MiniLean decides, Lean's output format)
    home, calls = tmp_path / "elan", []
    got = lean_tools.check_problems([{"name": "t", "lean": ml.HEADER + statement, "proofs": proofs + [proofs[2]]}],
                                    tmp_path, home, tmp_path / "work", ml.HEADER, workers=2,
                                    runner=_fake_lean(home, calls))
    assert got == [[False, False, True, True, True]] and len(calls) == 1   # one Lean process per problem


def test_full_config_pins_the_lean_toolchain_statically():
    """The composed full-scale config: the toolchain is a release tag, elan and the archive carry a
    url and a 64-hex sha256 (the preflight's url walk sees them under data.minif2f), eval checks
    with real Lean in MiniF2F's project."""
    from iclr26.core.config import compose_job_config
    from iclr26.core.preflight import external_sources
    from iclr26.papers.evolprover import lean_tools

    cfg = compose_job_config("evolprover", "full", (), None)
    pins = cfg["data"]["minif2f"]["lean"]
    assert lean_tools.pin_problems(pins) == [] and cfg["eval"]["checker"] == "lean"
    assert cfg["lean"]["project_dataset"] == "minif2f" and cfg["data"]["minif2f"]["lean_project"]
    urls = {s["id"]: s["problem"] for s in external_sources(cfg) if s["kind"] == "url"}
    assert urls == {pins["elan"]["url"]: None, pins["toolchain_archive"]["url"]: None}
    # LeanInteract's REPL pinned (revision and repository), lean-dojo's trace in the seeds' acquire
    interact, trace = cfg["lean"]["interact"], cfg["data"]["seeds"]["trace"]
    assert interact["repl_rev"].startswith("v") and interact["repl_git"].startswith("https://github.com/")
    assert trace["n_theorems"] <= trace["n_candidates"] and trace["home"] != cfg["lean"]["home"]

    from iclr26.papers.evolprover import stages

    Job = type("Job", (), {"cfg": {"eval": {"checker": "lean_interact"},
                                   "lean": {**cfg["lean"], "interact": {**interact, "prebuild": False}}}})
    with pytest.raises(ValueError, match="needs lean.interact.prebuild: true"):
        stages.count_correct(Job(), [], [], "s0_minif2f")


# ----------------------------------------------------------------------------- LeanInteract, lean-dojo
def _stand_in_lake(home: Path, log: Path | None = None) -> Path:
    """A stand-in for elan's `lake` proxy: `lake env CMD...` runs CMD (as Lake does, in the project's
    environment); every other call is logged with the cwd and its git HEAD, and `lake build` fails
    as it would with no Lean toolchain behind the proxy."""
    (home / "bin").mkdir(parents=True, exist_ok=True)
    lake = home / "bin" / "lake"
    note = f'echo "$(pwd) $(git rev-parse HEAD 2>/dev/null) $*" >> "{log}"\n' if log else ""
    lake.write_text("#!/bin/sh\nif [ \"$1\" = env ]; then shift; exec \"$@\"; fi\n" + note +
                    "if [ \"$1\" = build ]; then echo 'stand-in lake: no Lean toolchain' >&2; exit 1; fi\nexit 1\n")
    lake.chmod(0o755)
    return lake


def test_lean_interact_checker_against_a_stand_in_repl(tmp_path):
    """eval.checker lean_interact: LeanInteract's real LeanREPLConfig (LocalProject, local_repl_path,
    no build), AutoLeanServer and Command, pointed at a REPL checkout whose `.lake/build/bin/repl` is
    the stand-in process above (the REPL's JSON protocol, proofs decided by MiniLean), started by
    LeanInteract as `lake env <repl>` through a stand-in lake. Shows: true proofs pass, a false one,
    a sorry and a banned text fail; a REPL that dies or hangs fails that proof and LeanInteract
    restarts it (its session cache replays the header); the process environment is restored; and
    stages.count_correct reaches the checker from the config. Stops short of a real REPL and Lean."""
    import os

    from iclr26.papers.evolprover import stages
    from iclr26.papers.evolprover.lean_interact_checker import LeanInteractChecker

    home, project, repl = tmp_path / "elan", tmp_path / "project", tmp_path / "repl"
    _stand_in_lake(home)
    for d in (project, repl):
        d.mkdir()
        (d / "lean-toolchain").write_text("leanprover/lean4:v4.24.0\n")
    binary = repl / ".lake" / "build" / "bin" / "repl"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!{sys.executable}\n" + STANDIN)
    binary.chmod(0o755)
    lean = {"home": str(home), "header": ml.HEADER, "timeout_s": 30, "project_dataset": "minif2f",
            "interact": {"local_repl_path": str(repl), "memory_hard_limit_mb": None,
                         "max_total_memory": 1.0}}   # no restart for the test machine's memory load
    path_before = os.environ.get("PATH")
    lean_file = ml.parse_theorem("theorem t (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry").lean()
    with LeanInteractChecker(lean, project, ml.HEADER, timeout=30) as checker:
        assert os.environ["ELAN_HOME"] == str(home)
        assert checker.check_proof(lean_file, "nlinarith [sq_nonneg (a - b)]")
        assert not checker.check_proof(lean_file, "nlinarith [sq_nonneg (a + b)]")
        assert not checker.check_proof(lean_file, "sorry")
        assert not checker.check_proof(lean_file, "nlinarith [sq_nonneg (a - b)]\n  #exit")   # lean_tools.BANNED
        first = checker.server._proc.pid
        assert not checker.check_proof(lean_file, "crash")          # the REPL dies: that proof fails
        assert checker.check_proof(lean_file, "nlinarith [sq_nonneg (b - a)]")   # restarted, header replayed
        assert checker.server._proc.pid != first
        checker.timeout = 0.5
        assert not checker.check_proof(lean_file, "hang")            # no answer in time: failed, not stuck
    assert os.environ.get("PATH") == path_before and os.environ.get("ELAN_HOME") != str(home)

    class Job:
        cfg = {"eval": {"checker": "lean_interact"}, "lean": lean}

        @staticmethod
        def raw_dir(ds):
            return tmp_path
    rows = [{"name": "t", "lean": lean_file}]
    assert stages.count_correct(Job(), rows, [["nlinarith [sq_nonneg (a - b)]", "linarith", "ring"]], "s0_t") == [1]


def test_leandojo_traces_the_seed_repository_up_to_lake_build(tmp_path):
    """The lean-dojo path of the seeds' acquire (leandojo_trace), as far as it runs with no Lean:
    the seed corpus written as a Lake project (lakefile requiring Mathlib at the commit of a
    lake-manifest.json in Lake's format, one file per seed with its proof), committed with a fixed
    identity (the same files give the same commit id), then lean-dojo's own `LeanGitRepo(<local
    path>, <commit>)` and `trace(repo, build_deps=False)` in a child process with CACHE_DIR,
    DISABLE_REMOTE_CACHE, NUM_PROCS, TMP_DIR, ELAN_HOME and PATH set. lean-dojo recognises the path as
    a LOCAL git repository, clones it into its cache at our commit, reads the pinned toolchain,
    finds no traced copy (the remote cache is off), clones the commit into its working folder and
    runs `lake exe cache get` (its failure is ignored by lean-dojo) and `lake build` there.

    Where it stops, and why: at `lake build`. There is no Lean toolchain on this machine (no
    download), so `lake` is a stand-in that fails the build; lean-dojo raises CalledProcessError
    and our child reports `lean-dojo stopped at `lake build``. Not reached offline: lean-dojo's
    `lean --print-prefix`, `lake env lean --run ExtractData.lean noDeps`, TracedRepo's loading of
    the *.ast.json files (and its query of the Lean 4 commit on GitHub), and our benchmark_row over
    the traced theorems."""
    import json

    from iclr26.papers.evolprover import leandojo_trace as lt

    manifest = tmp_path / "lake-manifest.json"   # Lake's manifest format (version 7), as MiniF2F-lean4 ships one
    manifest.write_text(json.dumps({"version": "1.1.0", "packagesDir": ".lake/packages", "name": "miniF2F",
                                    "packages": [
        {"url": "https://github.com/leanprover-community/batteries", "type": "git", "name": "batteries",
         "rev": "b" * 40},
        {"url": "https://github.com/leanprover-community/mathlib4", "type": "git", "name": "mathlib", "rev": "f" * 40,
         "inputRev": "v4.24.0", "scope": "", "manifestFile": "lake-manifest.json", "inherited": False,
         "configFile": "lakefile.lean"}]}))
    rev = lt.mathlib_rev(manifest)
    assert rev == "f" * 40
    amgm = "theorem lean_workbook_1 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by\n"
    seeds = [{"name": "lean_workbook_1", "lean": amgm, "proof": amgm + "  nlinarith [sq_nonneg (a - b)]"},
             {"name": "lean_workbook_2", "lean": ml.HEADER + "theorem lean_workbook_2 (x : ℝ) : 0 ≤ x ^ 2 := by sorry",
              "proof": "positivity"}]
    seeds = [{**s, "proof": lt._tactics(s["proof"])} for s in seeds]
    repo = tmp_path / "EvolSeedsRepo"
    names = lt.seed_project(repo, "leanprover/lean4:v4.24.0", rev, seeds, ml.HEADER)
    assert names == ["lean_workbook_1", "lean_workbook_2"]
    text = (repo / "EvolSeeds" / "lean_workbook_1.lean").read_text()
    assert text.startswith(ml.HEADER.rstrip()) and "sorry" not in text and "#print" not in text
    assert amgm + "  nlinarith [sq_nonneg (a - b)]" in text
    assert "sorry" not in (repo / "EvolSeeds" / "lean_workbook_2.lean").read_text()
    assert (repo / "EvolSeeds.lean").read_text() == \
        "import EvolSeeds.lean_workbook_1\nimport EvolSeeds.lean_workbook_2\n"
    assert f'require mathlib from git "{lt.MATHLIB_GIT}" @ "{rev}"' in (repo / "lakefile.lean").read_text()
    commit_id = lt.commit(repo)
    again = tmp_path / "again" / "EvolSeedsRepo"
    lt.seed_project(again, "leanprover/lean4:v4.24.0", rev, seeds, ml.HEADER)
    assert lt.commit(again) == commit_id                      # the pin is reproducible from the files

    home, log = tmp_path / "elan", tmp_path / "lake.log"
    _stand_in_lake(home, log)
    with pytest.raises(DataError, match=f"lean-dojo stopped at `lake build` \\(exit 1\\) in its clone of {repo} "
                                        f"at {commit_id}"):
        lt.trace(repo, commit_id, home, tmp_path / "dojo", tmp_path / "theorems.jsonl", num_procs=1, timeout=120)
    calls = [ln.split(" ", 2) for ln in log.read_text().splitlines()]
    assert [c[2] for c in calls] == ["exe cache get", "build"]            # lean-dojo's noDeps build order
    assert all(c[1] == commit_id and c[0].endswith("/EvolSeedsRepo") and c[0] != str(repo) for c in calls)
    cached = tmp_path / "dojo" / "repos" / f"gitpython-EvolSeedsRepo-{commit_id}" / "EvolSeedsRepo"
    assert (cached / "lean-toolchain").read_text().strip() == "leanprover/lean4:v4.24.0"   # lean-dojo's own clone
    assert not (tmp_path / "theorems.jsonl").exists()


@pytest.fixture(scope="module")
def instruct_model_dir(tmp_path_factory):
    """A small untrained instruction model written with save_pretrained (a byte-level BPE tokenizer with
    a chat template, a 1-layer Qwen2): the full scale's LLM code path loads it as it would load a hub id.
    Untrained (conftest's hub_model_dir trains its model for seconds): its answers are never parseable
    Lean, which is all the end-to-end run below needs."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    special = ["<s>", "</s>", "<pad>", "<user>", "<assistant>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.train_from_iterator(["theorem t (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by nlinarith"] * 4,
                             trainers.BpeTrainer(vocab_size=300, special_tokens=special,
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.chat_template = ("{% for m in messages %}<user>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    directory = tmp_path_factory.mktemp("instruct_model")
    tok.save_pretrained(directory)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    return directory


def test_llm_evolutions_prompts_parsing_lean_check_and_a_save_pretrained_model(instruct_model_dir, tmp_path):
    """The full scale's LLM evolutions (llm_evol): EvolDomain / EvolDifficulty requests carry the
    paper's instructions (three steps; one of five strategies, harder or easier) and are drawn
    deterministically; an answer's last ```lean block gives the new statement and its proof, and an
    answer without one, with sorry or a banned word, or restating the seed is dropped; the Lean
    check (lean_tools.check_problems through the stand-in `lake` of Lean's JSON format, MiniLean
    deciding) keeps a true proof and drops a false one; and the whole step runs with a
    save_pretrained model through transformers and core.lm.generate. That tiny model writes no
    parseable Lean, so end to end every answer is dropped before Lean (the counts say so); a 7B
    instruction model is not run here."""
    from iclr26.papers.evolprover import llm_evol

    seeds = [{"name": "s1", "lean": ml.HEADER + "theorem s1 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by sorry"},
             {"name": "s2", "lean": "theorem s2 (x : ℝ) : 0 ≤ x ^ 2 := by\n"}]
    llm = {"domains": ["number theory", "geometry", "sequences"], "domain_per_seed": 2, "difficulty_deltas": [1, -1],
           "temperature": 1.0, "max_new_tokens": 16, "batch_size": 8, "workers": 1, "timeout_s": 60,
           "model": {"source": str(instruct_model_dir)}, "device": "cpu"}
    reqs = llm_evol.requests(seeds, llm, 0)
    assert [(r["origin"], r["kind"]) for r in reqs] == [("s1", "domain")] * 2 + [("s1", "difficulty")] * 2 + \
        [("s2", "domain")] * 2 + [("s2", "difficulty")] * 2
    assert reqs == llm_evol.requests(seeds, llm, 0)
    dom, diff = reqs[0], reqs[2]
    assert dom["target"] in llm["domains"] and f"domain of {dom['target']}" in dom["prompt"]
    assert "Deconstruct and abstract" in dom["prompt"] and "Analogise and transfer" in dom["prompt"]
    assert "theorem s1 (a b : ℝ)" in dom["prompt"] and "import Mathlib" not in dom["prompt"]
    assert diff["target"].rsplit(" ", 1)[0] in llm_evol.STRATEGIES and "harder" in diff["prompt"]
    assert "easier" in reqs[3]["prompt"] and reqs[0]["target"] != reqs[1]["target"]

    good = ("Natural language: for reals x, y, 2xy is at most x^2 + y^2.\n```lean\nimport Mathlib\n"
            "theorem evo (x y : ℝ) : 2 * x * y ≤ x ^ 2 + y ^ 2 := by\n  nlinarith [sq_nonneg (x - y)]\n```\n")
    assert llm_evol.parse(good, seeds[1]["lean"]) == ("theorem evo (x y : ℝ) : 2 * x * y ≤ x ^ 2 + y ^ 2",
                                                     "nlinarith [sq_nonneg (x - y)]")
    restated = good.replace("(x y : ℝ) : 2 * x * y ≤ x ^ 2 + y ^ 2", "(a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2")
    assert llm_evol.parse(restated, seeds[0]["lean"]) is None              # the seed restated under another name
    assert llm_evol.parse(good.replace("nlinarith [sq_nonneg (x - y)]", "sorry")) is None
    assert llm_evol.parse(good.replace("import Mathlib", "axiom cheat : False")) is None
    assert llm_evol.parse("theorem t : 1 = 1 := by rfl") is None          # no ```lean block
    assert llm_evol.parse("```lean\ntheorem t : 1 = 1 := by\n```") is None   # no proof

    home, calls = tmp_path / "elan", []
    items = [{"name": "evo", "statement": "theorem evo (x y : ℝ) : 2 * x * y ≤ x ^ 2 + y ^ 2",
              "proof": "nlinarith [sq_nonneg (x - y)]"},
             {"name": "bad", "statement": "theorem bad (x y : ℝ) : 3 * x * y ≤ x ^ 2 + y ^ 2",
              "proof": "nlinarith [sq_nonneg (x - y)]"}]
    assert llm_evol.verify(items, tmp_path, home, tmp_path / "work", ml.HEADER, 1, 60,
                           runner=_fake_lean(home, calls)) == [True, False]
    out, counts = llm_evol.evolve_llm(seeds, llm, tmp_path, home, tmp_path / "work2", ml.HEADER, 0,
                                      log=lambda m: None, runner=_fake_lean(home, calls))
    assert counts["requests"] == 8 and counts["parsed"] == counts["verified"] == 0
    assert out == {"domain": [], "difficulty": []}


def test_seeds_acquire_trace_step_up_to_lean_dojos_lake_build(static_server, tmp_path, monkeypatch):
    """leandojo_trace.trace_seed_corpus, the seeds' acquire step, end to end as far as it runs with
    no Lean: MiniF2F-lean4 pinned by commit and tree (a local git repository with its
    lean-toolchain and lake-manifest.json), elan and the toolchain installed into the trace's own
    ELAN_HOME from a loopback server by sha256, our Lake commands and the `lake env lean --json`
    check of every candidate seed through a runner that speaks Lean's JSON format (MiniLean
    deciding), only the accepted seeds written into the repository (a false proof planted in the
    Lean-Workbook-format file is left out), the commit, then lean-dojo's own trace, which stops at
    `lake build` in its clone (a stand-in lake: no toolchain here; see the test above)."""
    import json

    from iclr26.papers.evolprover import leandojo_trace as lt

    mf = tmp_path / "miniF2F-lean4"
    (mf / "MiniF2F" / "Test").mkdir(parents=True)
    (mf / "MiniF2F" / "Test" / "mathd_algebra_478.lean").write_text(MINIF2F_FILE)
    (mf / "lean-toolchain").write_text("leanprover/lean4:v4.24.0\n")
    (mf / "lake-manifest.json").write_text(json.dumps({"version": "1.1.0", "packages": [
        {"url": lt.MATHLIB_GIT, "type": "git", "name": "mathlib", "rev": "f" * 40}]}))
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "x"),
                 ("config", "uploadpack.allowReachableSHA1InWant", "true")):
        _git(mf, *args)
    lean = _lean_spec(static_server, tmp_path)
    cfg = {"lean": {"header": ml.HEADER, "timeout_s": 60},
           "data": {"minif2f": {"source": "git", "git": f"file://{mf}", "commit": _git(mf, "rev-parse", "HEAD"),
                                "folder": "MiniF2F/Test", "tree": _git(mf, "rev-parse", "HEAD:MiniF2F/Test"),
                                "files": ["lean-toolchain", "lake-manifest.json"],
                                "lean": {k: lean[k] for k in ("toolchain", "elan", "toolchain_archive")}}}}
    spec = {"source": "hub", "file": "lean_workbook.json", "n_seeds": 6, "n_reserve": 0, "data_seed": 0,
            "test_fraction": 0.2, "families": ["amgm", "cauchy", "misc", "identity"],
            "trace": {"home": str(tmp_path / "trace_elan"), "n_candidates": 6, "n_theorems": 4, "workers": 2,
                      "num_procs": 1}}
    out = tmp_path / "raw_seeds"
    data.write_tiny("seeds", spec, out)
    corpus = json.loads((out / "lean_workbook.json").read_text())
    corpus[1]["proof"] = ["ring"]                    # a proof Lean (here MiniLean) rejects for an inequality
    (out / "lean_workbook.json").write_text(json.dumps(corpus))
    want = [r["id"] for r in corpus if ml.check(ml.parse_theorem(r["formal_statement"]), r["proof"][0])][:4]
    assert "lean_workbook_1" not in want and len(want) == 4
    home, log, calls = Path(spec["trace"]["home"]), tmp_path / "dojo_lake.log", []
    _stand_in_lake(home, log)                        # the `lake` lean-dojo's own shell commands find on PATH
    # lean-dojo's trace is optional (nothing downstream reads it): its failure is recorded, the job goes on
    info = lt.trace_seed_corpus(cfg, spec, out, log=lambda m: None, runner=_fake_lean(home, calls))
    assert info["traced"] is False and "lean-dojo stopped at `lake build`" in info["error"]
    assert info["accepted"] == 4 and info["checked"] == 6
    assert json.loads((out / "leandojo" / "status.json").read_text())["traced"] is False
    repo = out / "leandojo" / "repo"
    assert sorted(p.stem for p in (repo / "EvolSeeds").glob("*.lean")) == sorted(want)
    assert f'@ "{"f" * 40}"' in (repo / "lakefile.lean").read_text()
    assert (repo / "lean-toolchain").read_text().strip() == "leanprover/lean4:v4.24.0"
    assert (home / "toolchains" / "leanprover--lean4---v4.24.0" / "bin" / "lean").exists()
    assert calls[:2] == [["lake", "exe", "cache", "get"], ["lake", "build"]]
    assert len([c for c in calls if c[:2] == ["lake", "env"]]) == 6          # every candidate checked by Lean
    head = _git(repo, "rev-parse", "HEAD")
    assert [ln.split(" ", 2)[1:] for ln in log.read_text().splitlines()] == [[head, "exe cache get"], [head, "build"]]
    # trace.required: a tracing failure stops the job (lean-dojo's child stood in by its one-line error)
    def stopped(*args, **kwargs):
        raise DataError("lean-dojo stopped at `lake build` (exit 1)")
    monkeypatch.setattr(lt, "trace", stopped)
    with pytest.raises(DataError, match="lean-dojo stopped at `lake build`"):
        lt.trace_seed_corpus(cfg, {**spec, "trace": {**spec["trace"], "required": True}}, out, log=lambda m: None,
                             runner=_fake_lean(home, []))


def test_banned_words_match_whole_tokens():
    """Audit 13d L7: a banned word is a whole Lean token (`axiom`, `sorry`), not a part of a name."""
    from iclr26.papers.evolprover import lean_tools

    assert all(lean_tools.banned(t) for t in ("sorry", "exact (sorry)", "axiom cheat : False", "#exit", "/- x -/"))
    assert not any(lean_tools.banned(t) for t in ("nlinarith [h_axiom, importance]", "exact elaborate", "simp"))


def _prepared_seeds(tmp_path, n_seeds=40):
    """The tiny seeds' prepare (stages.prepare, synthetic source) at reduced size: {kind: rows}."""
    import json

    import yaml

    from iclr26.papers.evolprover import stages

    cfg = yaml.safe_load((ROOT / "config/hydra/paper/evolprover.yaml").read_text())
    spec = {**cfg["data"]["seeds"], "n_seeds": n_seeds, "n_reserve": 0}
    raw, out = tmp_path / "raw", tmp_path / "prepared"
    raw.mkdir()
    out.mkdir()
    data.write_tiny("seeds", spec, raw)

    Job = _seeds_job(raw, out, {"data": {"seeds": spec}, "model": {"source": None},
                                "evolve": {**cfg["evolve"], "n_seeds": n_seeds}})
    stages.prepare(Job())
    rows = {kind: [json.loads(line) for line in (out / f"{kind}.jsonl").read_text().splitlines()]
            for kind in ("seed", *stages.EVOLVED)}
    return cfg, out, rows


def test_descendants_of_a_dropped_problem_are_dropped(tmp_path):
    """Audit 13e N1: a seed that restates a test problem up to renaming is dropped, and so is every evolved
    problem that descends from it (EvolAST copies of it are the test problem rewritten); a domain output that
    restates one takes its EvolAST variant with it. Without the parent links the descendants would stay."""
    from iclr26.papers.evolprover import stages

    cfg, out, rows = _prepared_seeds(tmp_path)
    arms = {"train": {"arms": cfg["train"]["arms"]}}
    assert all(r["parent"] and r["origin"] in {s["name"] for s in rows["seed"]}
               for kind in stages.EVOLVED for r in rows[kind])
    by_origin = {}
    for kind in stages.EVOLVED:
        for r in rows[kind]:
            by_origin.setdefault(r["origin"], []).append(r)
    # a seed with EvolAST, domain and difficulty offspring, restated as a test problem with other names
    seed = next(s for s in rows["seed"] if {"ast", "domain", "ast_of_evolved"} <= {r["subset"] for r in
                                                                                     by_origin.get(s["name"], [])})
    st = ml.parse_theorem(seed["lean"])
    names = [n for group, _ in st.binders for n in group]
    test, _ = evol.rename(st, seed["proof"], dict(zip(names, ["p", "q", "r"][: len(names)])))
    exclude = {stages.decontam_key(test.prompt()): "ineq_comp"}
    assert test.prompt() != seed["prompt"]
    everything = stages.training_set(arms, out, "evol_all")
    assert any(r.get("origin") == seed["name"] for r in everything)   # the offspring are there unscreened
    kept = stages.training_set(arms, out, "evol_all", exclude, dropped := {}, desc := {})
    assert dropped == {"ineq_comp": 1}
    assert not [r["name"] for r in kept if r["name"] == seed["name"] or r.get("origin") == seed["name"]
                or r["name"].startswith(seed["name"] + "_")]
    assert sum(desc.values()) == len(by_origin[seed["name"]]) and desc["ast"] >= 1
    assert len(kept) == len(everything) - 1 - sum(desc.values())
    # a dropped evolved problem (a domain output) takes its own EvolAST variant with it, not its seed
    dom = next(r for r in rows["domain"] if any(a["parent"] == r["name"] for a in rows["ast_of_evolved"]))
    kept = stages.training_set(arms, out, "evol_all", {stages.decontam_key(dom["prompt"]): "minif2f"}, {}, desc := {})
    assert desc == {"ast": 0, "domain": 0, "difficulty": 0, "ast_of_evolved": 1}
    assert {r["name"] for r in everything} - {r["name"] for r in kept} == {dom["name"], dom["name"] + "_ast"}


def test_prover_snapshot_with_remote_code_is_refused(tmp_path):
    """Audit 13d M5 / 13e N6: a prover snapshot whose config.json has an auto_map (remote code) fails acquire
    with one DataError naming the model and revision; a plain config passes."""
    import json

    from iclr26.papers.evolprover import stages

    spec = {"source": "deepseek-ai/DeepSeek-Prover-V1.5-SFT", "revision": "c08e3ccc" + "0" * 32}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekConfig"}}))
    with pytest.raises(DataError, match="DeepSeek-Prover-V1.5-SFT at c08e3ccc0+: config.json has an auto_map"):
        stages._plain_config(spec, {"path": str(tmp_path)})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    stages._plain_config(spec, {"path": str(tmp_path)})


def test_banned_commands_that_change_syntax_or_attributes():
    """Audit 13e N6: whole-token matching must still ban macro_rules / elab_rules and the other commands that
    change the syntax or the attributes; names that contain them are not banned."""
    from iclr26.papers.evolprover import lean_tools

    bad = ["macro_rules | `(tactic| trivial) => `(tactic| sorry)", "elab_rules : tactic | `(tactic| done) => pure ()",
           "syntax \"cheat\" : tactic", "local notation \"π\" => 3", "attribute [simp] foo in simp",
           "infixl:65 \" +' \" => HAdd.hAdd", "run_cmd pure ()"]
    assert all(lean_tools.banned(t) for t in bad)
    assert not any(lean_tools.banned(t) for t in ("exact h_macro_rules", "nlinarith [syntax_ok, h.notation_free]",
                                                   "exact List.prefix_refl _", "linarith [elab_rules']"))


def test_tactic_block_edge_cases():
    """Audit 13e N4: the main theorem's block (by its name, else the last) when a helper lemma comes first, and
    None if the block uses the helper; modifiers (private, protected, attributes); a 4-space block re-indented
    to the prompt's 2 spaces with its nesting kept."""
    helper = ("theorem aux (x : ℝ) : 0 ≤ x ^ 2 := by\n  positivity\n\n"
              "theorem lean_workbook_7 (a b : ℝ) : 2 * a * b ≤ a ^ 2 + b ^ 2 := by\n  nlinarith [sq_nonneg (a - b)]")
    assert data.tactic_block(helper, "lean_workbook_7") == "nlinarith [sq_nonneg (a - b)]"
    assert data.tactic_block(helper) == "nlinarith [sq_nonneg (a - b)]"   # no name: the last declaration
    main_first = helper.split("\n\n")[1] + "\n\nlemma later (x : ℝ) : x = x := by\n  rfl"
    assert data.tactic_block(main_first, "lean_workbook_7") == "nlinarith [sq_nonneg (a - b)]"   # cut at `lemma`
    uses = helper.replace("nlinarith [sq_nonneg (a - b)]", "nlinarith [aux (a - b)]")
    assert data.tactic_block(uses, "lean_workbook_7") is None
    for mod in ("private theorem", "protected lemma", "@[simp] theorem", "nonrec theorem", "noncomputable theorem"):
        assert data.tactic_block(f"{mod} t (x : ℝ) : 0 ≤ x ^ 2 := by\n  positivity") == "positivity", mod
    four = "theorem t (x : ℝ) (h : 0 ≤ x) : 0 ≤ x := by\n    have h2 : 0 ≤ x := by\n        exact h\n    linarith"
    assert data.tactic_block(four) == "have h2 : 0 ≤ x := by\n      exact h\n  linarith"   # nesting kept
    assert data.tactic_block("theorem t (x : ℝ) : 0 ≤ x ^ 2 := by positivity") == "positivity"
    assert data.tactic_block("theorem t (x : ℝ) : 0 ≤ x ^ 2 := by\n") is None   # an empty block
