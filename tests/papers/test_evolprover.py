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

import numpy as np
import pytest

from iclr26.core.errors import DataError
from iclr26.papers.evolprover import data, evol, lean_repl, prover
from iclr26.papers.evolprover import minilean as ml

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
