"""EvolProver (card 13): the MiniLean kernel, pass@k, the evolutions, the Lean REPL client against a
stand-in process speaking the REPL's JSON protocol, and the full-scale acquire from a local git
repository.

Not exercised offline: a real Lean toolchain / Mathlib / REPL (the stand-in speaks the protocol,
checking with MiniLean); hub downloads (data.hub_file, core.acquire.snapshot_model: no hub here);
lean-dojo and lean-interact (envs/lean.yaml; not installed in the pipeline's venv, see that file);
the 7B LoRA fine-tune (core.lm.train's own tests cover train_recipe on a save_pretrained model).
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
    evolved = evol.evolve([(ml.parse_theorem(r["lean"]), r["proof"]) for r in seeds], cfg["evolve"], 0, frac)
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
        (out / f"{kind}.jsonl").write_text("".join(
            __import__("json").dumps({"prompt": st.prompt(), "proof": p}) + "\n" for st, p in items))
    arms = {"train": {"arms": {"evol_all": ["seed", "ast", "domain", "difficulty", "ast_of_evolved"]}}}
    kept = stages.training_set(arms, out, "evol_all", both)
    assert kept and not {r["prompt"] for r in kept} & both
    planted = stages.training_set(arms, out, "evol_all", {train[0]})
    assert train[0] not in {r["prompt"] for r in planted} and len(planted) == len(train) - train.count(train[0])
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
                msgs.append({"severity": "warning", "data": "declaration uses 'sorry'"})
                sorries.append({"goal": "?"})
            elif not ml.check(st, proof.strip()):
                msgs.append({"severity": "error", "data": "linarith failed"})
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
        repl.timeout = 0.5
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
