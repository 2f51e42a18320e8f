"""The seed generator and the evolutions of card 13, as program transformations on MiniLean ASTs.

Seeds (the Lean-Workbook stand-in): polynomial inequalities built from 1-3 lemma applications,
    P = sum_i l_i^2 (+ m * u * v with 0 <= u, 0 <= v),  written  (negative part) ≤ (positive part),
    proved by `nlinarith [sq_nonneg (l_1), ..., mul_nonneg hu hv]`; and ring identities
    l_1 * l_2 = (its expansion), proved by `ring`. Families: amgm (one square), cauchy (2-3
    squares), misc (a square and a product term), identity.
EvolAST (syntactic symmetry, the paper's rule-based AST rewrites): commute + and *, re-associate,
    rename variables, flip a ≤ b to b ≥ a, reorder hypotheses; the proof is carried along (renamed).
EvolDomain (semantic symmetry; an LLM in the paper, a rule-based analogy translator here): the
    same skeleton over another domain: sequences (a -> f n, b -> f (n + 1)) or exponentials
    (a -> Real.exp a, whose positivity replaces the hypotheses: (Real.exp_pos a).le).
EvolDifficulty (an LLM in the paper): delta +1 composes one more lemma (P + l^2, one more hint);
    delta -1 drops one (P - l_k^2) or specialises a variable to 1.
Test-only transformations (Ineq-Comp): Type I duplicates the inequality with fresh variables and
    adds the copies; Type II substitutes x -> x^2. Type II is never used in any augmentation.
Every produced (statement, proof) is kept only if the MiniLean kernel accepts the proof.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from fractions import Fraction

import numpy as np

from . import minilean as ml

NAMES = ("a", "b", "c", "x", "y", "z")
FRESH = ("p", "q", "r", "s", "t", "u", "v", "w")


# ----------------------------------------------------------------------------- helpers
def num(k) -> tuple:
    return ("num", Fraction(k))


def var(name: str) -> tuple:
    return ("var", name)


def linear(rng, names: list[str]) -> tuple:
    """A small linear form: u - c v, c u - v, u + v - w or u - c (c in 1..3)."""
    kind = rng.integers(4)
    u, v = rng.choice(names, 2, replace=False) if len(names) > 1 else (names[0], None)
    c = int(rng.integers(1, 4))
    if kind == 0 or v is None and kind != 3:
        return ("sub", var(u), num(c)) if v is None else ("sub", var(u), ("mul", num(c), var(v)) if c > 1 else var(v))
    if kind == 1:
        return ("sub", ("mul", num(c), var(u)) if c > 1 else var(u), var(v))
    if kind == 2 and len(names) > 2:
        w = [n for n in names if n not in (u, v)][0]
        return ("sub", ("add", var(u), var(v)), var(w))
    return ("sub", var(u), num(c))


def goal_from_poly(p: ml.Poly, atom_exprs=None) -> ml.Rel:
    """P >= 0 written `negative part ≤ positive part`."""
    pos = {m: c for m, c in p.items() if c > 0}
    neg = {m: -c for m, c in p.items() if c < 0}
    return ml.Rel(ml.from_poly(neg, atom_exprs), "≤", ml.from_poly(pos, atom_exprs))


def hint_text(hints: list[str]) -> str:
    return f"nlinarith [{', '.join(hints)}]"


def nonneg_hyp(name: str, atom: tuple) -> tuple:
    return (name, [ml.Rel(num(0), "≤", atom)], "")


def hints_of(proof: str) -> list[str] | None:
    toks = ml.lex(proof)
    if not toks or toks[0] not in ("nlinarith", "linarith"):
        return None
    return [" ".join(item) for item in ml._split_list(toks[1:])] if len(toks) > 1 else []


# ----------------------------------------------------------------------------- seeds
def make_seed(rng, idx: int, family: str) -> tuple[ml.Statement, str]:
    n_vars = int(rng.integers(2, 4))
    names = list(rng.choice(NAMES, n_vars, replace=False))
    if family == "identity":
        l1, l2 = linear(rng, names), linear(rng, names)
        lhs = ("pow", l1, 2) if rng.random() < 0.5 else ("mul", l1, l2)
        goal = ml.Rel(lhs, "=", ml.from_poly(ml.poly(lhs)))
        st = ml.Statement(f"seed_{idx}", _binders(names, [goal]), [], [goal])
        return st, "ring"
    k = {"amgm": 1, "cauchy": int(rng.integers(2, 4)), "misc": 1}[family]
    forms = [linear(rng, names) for _ in range(k)]
    p, hints, hyps = {}, [], []
    for f in forms:
        p = ml.p_add(p, ml.p_pow(ml.poly(f), 2))
        hints.append(f"sq_nonneg ({ml.show(f)})")
    if family == "misc":
        u, v = sorted(rng.choice(names, 2, replace=False))
        m = int(rng.integers(1, 4))
        hyps = [nonneg_hyp(f"h{u}", var(u)), nonneg_hyp(f"h{v}", var(v))]
        p = ml.p_add(p, {((u, 1), (v, 1)) if u != v else ((u, 2),): Fraction(m)})
        hints.append(f"mul_nonneg h{u} h{v}")
    goal = goal_from_poly(p)
    st = ml.Statement(f"seed_{idx}", _binders(names, [goal]), hyps, [goal])
    return st, hint_text(hints)


def _binders(names: list[str], goal: list[ml.Rel]) -> list:
    """One binder group with the variables the goal uses, in the drawn order."""
    used = set()
    for r in goal:
        used.update(ml.atoms(r.lhs) + ml.atoms(r.rhs))
    return [(tuple(n for n in names if n in used), "ℝ")]


def seed_stream(seed: int, families: list[str], limit: int = 10**7):
    """Distinct (statement, proof, family) in the generator's order, every proof kernel-checked;
    distinct by goal text. Its first n items are seed_pool(n, ...)."""
    rng = np.random.default_rng(seed)
    seen, i = set(), 0
    while i < limit:
        family = families[i % len(families)]
        st, proof = make_seed(rng, i, family)
        i += 1
        key = st.header_text().split(":", 1)[1]
        if key in seen or not ml.check(st, proof):
            continue
        seen.add(key)
        yield st, proof, family
    raise RuntimeError("seed generator cannot find enough distinct problems")


def seed_pool(n: int, seed: int, families: list[str]) -> list[tuple[ml.Statement, str, str]]:
    """n distinct (statement, proof, family), every proof kernel-checked; distinct by goal text."""
    stream = seed_stream(seed, families, limit=50 * n + 1)
    return [next(stream) for _ in range(n)]


# ----------------------------------------------------------------------------- program transformations
def _map_expr(e, fn):
    """Apply fn bottom-up to every node."""
    if e[0] in ("add", "sub", "mul", "div"):
        e = (e[0], _map_expr(e[1], fn), _map_expr(e[2], fn))
    elif e[0] in ("neg",):
        e = ("neg", _map_expr(e[1], fn))
    elif e[0] == "pow":
        e = ("pow", _map_expr(e[1], fn), e[2])
    return fn(e)


def _map_statement(st: ml.Statement, fn) -> ml.Statement:
    st = copy.deepcopy(st)
    st.goal = [ml.Rel(_map_expr(r.lhs, fn), r.op, _map_expr(r.rhs, fn)) for r in st.goal]
    st.hyps = [(h, [ml.Rel(_map_expr(r.lhs, fn), r.op, _map_expr(r.rhs, fn)) for r in rels], t)
               for h, rels, t in st.hyps]
    return st


def _map_proof(proof: str, fn) -> str:
    """Apply an expression map inside every sq_nonneg / pow_two_nonneg hint."""
    hints = hints_of(proof)
    if hints is None:
        return proof
    out = []
    for h in hints:
        toks = h.split()
        if toks[0] in ("sq_nonneg", "pow_two_nonneg"):
            out.append(f"{toks[0]} ({ml.show(_map_expr(ml.parse_expr(toks[1:]), fn))})")
        else:
            out.append(h)
    return (proof.split()[0] + (f" [{', '.join(out)}]" if out else "")).replace("( ", "(").replace(" )", ")")


def _rename_in_text(text: str, mapping: dict) -> str:
    return " ".join(mapping.get(t, t) for t in ml.lex(text)).replace("( ", "(").replace(" )", ")")


def rename(st: ml.Statement, proof: str, mapping: dict) -> tuple[ml.Statement, str]:
    """Rename variables (and the hypotheses named after them) consistently in statement and proof."""
    def fn(e):
        return var(mapping[e[1]]) if e[0] == "var" and e[1] in mapping else e

    new = _map_statement(st, fn)
    new.binders = [(tuple(mapping.get(n, n) for n in names), t) for names, t in st.binders]
    hmap = {h: "h" + mapping[h[1:]] for h, _, _ in st.hyps if h[1:] in mapping}
    new.hyps = [(hmap.get(h, h), rels, t) for h, rels, t in new.hyps]
    return new, _rename_in_text(_map_proof(proof, fn), hmap)


def ast_variant(st: ml.Statement, proof: str, rng) -> tuple[ml.Statement, str]:
    """EvolAST: 2-3 meaning-preserving rewrites, drawn from commute / reassociate / rename / flip /
    reorder hypotheses."""
    ops = rng.choice(["commute", "assoc", "rename", "flip", "reorder"], size=int(rng.integers(2, 4)), replace=False)
    for op in ops:
        if op == "commute":
            def fn(e):
                return (e[0], e[2], e[1]) if e[0] in ("add", "mul") and rng.random() < 0.5 else e
            st = _map_statement(st, fn)
        elif op == "assoc":
            def fn(e):
                if e[0] in ("add", "mul") and e[1][0] == e[0] and rng.random() < 0.7:
                    return (e[0], e[1][1], (e[0], e[1][2], e[2]))
                return e
            st = _map_statement(st, fn)
        elif op == "rename":
            old = [n for names, _ in st.binders for n in names]
            pool = [n for n in NAMES + FRESH if n not in old]
            new = list(rng.choice(pool, len(old), replace=False))
            st, proof = rename(st, proof, dict(zip(old, new)))
        elif op == "flip":
            st = replace(st, goal=[ml.Rel(r.rhs, {"≤": "≥", "≥": "≤", "<": ">", ">": "<"}.get(r.op, r.op), r.lhs)
                                   for r in st.goal])
        elif op == "reorder" and len(st.hyps) > 1:
            st = replace(st, hyps=list(reversed(st.hyps)))
    return st, proof


def domain_variant(st: ml.Statement, proof: str, domain: str) -> tuple[ml.Statement, str]:
    """EvolDomain: the same skeleton over sequences (f n, f (n + 1), ...) or exponentials."""
    names = [n for names, _ in st.binders for n in names]
    if domain == "seq":
        atoms = {n: ("app", "f", (var("n") if i == 0 else ("add", var("n"), num(i)),)) for i, n in enumerate(names)}
        new = _map_statement(st, lambda e: atoms[e[1]] if e[0] == "var" and e[1] in atoms else e)
        new.binders = [(("f",), "ℕ → ℝ"), (("n",), "ℕ")]
        text = proof
        for n, a in atoms.items():   # hint expressions
            text = _map_proof(text, lambda e, n=n, a=a: a if e == var(n) else e)
        return new, text
    if domain == "exp":
        atoms = {n: ("app", "Real.exp", (var(n),)) for n in names}
        new = _map_statement(st, lambda e: atoms[e[1]] if e[0] == "var" and e[1] in atoms else e)
        # positivity of exp replaces the hypotheses 0 ≤ u
        pos = {h: f"(Real.exp_pos {h[1:]}).le" for h, _, _ in st.hyps}
        new.hyps = []
        text = proof
        for n, a in atoms.items():
            text = _map_proof(text, lambda e, n=n, a=a: a if e == var(n) else e)
        text = " ".join(pos.get(t, t) for t in text.replace("[", "[ ").replace(",", " ,").replace("]", " ]").split())
        return new, text.replace("[ ", "[").replace(" ,", ",").replace(" ]", "]")
    raise ValueError(domain)


def _normal_goal(st: ml.Statement) -> ml.Poly | None:
    if len(st.goal) != 1 or st.goal[0].op not in ("≤", "≥"):
        return None
    p, _ = ml._rel_fact(st.goal[0])
    return p


def difficulty_variant(st: ml.Statement, proof: str, delta: int, rng) -> tuple[ml.Statement, str] | None:
    """EvolDifficulty: +1 adds one more square lemma (P + l^2); -1 drops one square hint
    (P - l_k^2) or specialises a variable without hypotheses to 1."""
    p, hints = _normal_goal(st), hints_of(proof)
    if p is None or hints is None:
        return None
    atom_exprs = {a: ml.parse_expr(a) for a in ml.atoms(st.goal[0].lhs) + ml.atoms(st.goal[0].rhs)}
    if delta > 0:
        names = [n for names, _ in st.binders for n in names]
        if st.binders and st.binders[0][1] != "ℝ":
            return None
        form = linear(rng, names)
        new_p = ml.p_add(p, ml.p_pow(ml.poly(form), 2))
        new_hints = hints + [f"sq_nonneg ({ml.show(form)})"]
        return replace(st, goal=[goal_from_poly(new_p, atom_exprs)]), hint_text(new_hints)
    squares = [h for h in hints if h.startswith("sq_nonneg")]
    if len(squares) > 1:
        drop = squares[int(rng.integers(len(squares)))]
        expr = ml.parse_expr(drop.split(" ", 1)[1])
        new_p = ml.p_add(p, ml.p_pow(ml.poly(expr), 2), -1)
        return replace(st, goal=[goal_from_poly(new_p, atom_exprs)]), hint_text([h for h in hints if h != drop])
    hyp_atoms = {ml.atom_key(r.rhs) for _, rels, _ in st.hyps for r in rels or []}
    free = [n for names, _ in st.binders for n in names if n not in hyp_atoms and n in atom_exprs]
    if not free or len(atom_exprs) < 2:
        return None
    v = free[int(rng.integers(len(free)))]
    def one(e):
        return num(1) if e == var(v) else e
    new_p = ml.poly(_map_expr(ml.Rel(st.goal[0].rhs, "", st.goal[0].lhs).lhs, one))
    new_p = ml.p_add(new_p, ml.poly(_map_expr(st.goal[0].lhs, one)), -1) if st.goal[0].op == "≤" else \
        ml.p_add(ml.poly(_map_expr(st.goal[0].lhs, one)), ml.poly(_map_expr(st.goal[0].rhs, one)), -1)
    binders = [(tuple(n for n in names if n != v), t) for names, t in st.binders]
    return (replace(st, binders=[b for b in binders if b[0]], goal=[goal_from_poly(new_p)]),
            _map_proof(proof, one))


def type_one(st: ml.Statement, proof: str, fresh: str = "new") -> tuple[ml.Statement, str] | None:
    """Ineq-Comp Type I: the inequality twice, the copy over fresh variables, added. fresh "new":
    the copy's variables are letters no seed uses (p, q, r, ...); "corpus": the seed corpus's own
    variable names the statement does not use (a, b, c, x, y, z), then new letters."""
    if len(st.goal) != 1 or st.goal[0].op not in ("≤", "≥"):
        return None
    old = [n for names, _ in st.binders for n in names]
    pool = FRESH if fresh == "new" else tuple(n for n in NAMES if n not in old) + FRESH
    copy_st, copy_proof = rename(st, proof, dict(zip(old, pool)))
    a, b = st.goal[0], copy_st.goal[0]
    if a.op != b.op:
        return None
    goal = ml.Rel(("add", a.lhs, b.lhs), a.op, ("add", a.rhs, b.rhs))
    new = replace(st, binders=[(tuple(old) + tuple(n for names, _ in copy_st.binders for n in names), "ℝ")],
                  hyps=st.hyps + copy_st.hyps, goal=[goal])
    return new, hint_text((hints_of(proof) or []) + (hints_of(copy_proof) or []))


def type_two(st: ml.Statement, proof: str) -> tuple[ml.Statement, str]:
    """Ineq-Comp Type II: substitute x -> x^2 (statement, hypotheses and hints)."""
    names = {n for names, _ in st.binders for n in names}

    def sq(e):
        return ("pow", e, 2) if e[0] == "var" and e[1] in names else e
    return _map_statement(st, sq), _map_proof(proof, sq)


def verified(st: ml.Statement, proof: str, name: str) -> tuple[ml.Statement, str] | None:
    st = replace(st, name=name)
    return (st, proof) if ml.check(st, proof) else None


def statement_key(st: ml.Statement) -> str:
    """The statement without its name (what makes two statements the same problem)."""
    return st.header_text().split(":", 1)[1]


def is_test(st: ml.Statement, fraction: float) -> bool:
    """The test partition: a statement whose key hashes below `fraction` is a test statement (every
    benchmark draws from it, no training set may contain one)."""
    return int(hashlib.sha256(statement_key(st).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def evolve(seeds: list[tuple[ml.Statement, str]], spec: dict, seed: int,
           test_fraction: float = 0.0, parents: dict | None = None) -> dict[str, list[tuple[ml.Statement, str]]]:
    """The paper's pipeline on a seed set: EvolDomain and EvolDifficulty on the seeds, verification,
    then EvolAST on the seeds and on the verified outputs. {kind: [(statement, proof)]}, kinds:
    ast (of seeds), domain, difficulty, ast_of_evolved (EvolAST of the domain/difficulty outputs).
    An output in the test partition (is_test) is dropped (audit B1: an easier variant of a training
    seed can be a test statement word for word). `parents`, if given, gets {output name: the name of
    the statement it was evolved from} (a seed, or for ast_of_evolved a domain / difficulty output):
    stages.training_set drops every descendant of a problem it drops (audit 13e N1)."""
    rng = np.random.default_rng(seed)
    out = {"ast": [], "domain": [], "difficulty": [], "ast_of_evolved": []}
    seen = {statement_key(st) for st, _ in seeds}

    def keep(kind, item, name, parent):
        if item is None:
            return None
        got = verified(item[0], item[1], name)
        if got is not None and is_test(got[0], test_fraction):
            return None
        if got is not None and (key := statement_key(got[0])) not in seen:
            seen.add(key)
            out[kind].append(got)
            if parents is not None:
                parents[name] = parent
            return got
        return None

    for st, proof in seeds:
        for j, dom in enumerate(spec["domains"][: spec["domain_per_seed"]]):
            keep("domain", domain_variant(st, proof, dom), f"{st.name}_dom{j}", st.name)
        for j, delta in enumerate(spec["difficulty_deltas"]):
            keep("difficulty", difficulty_variant(st, proof, delta, rng), f"{st.name}_diff{j}", st.name)
        for j in range(spec["ast_per_seed"]):
            keep("ast", ast_variant(st, proof, rng), f"{st.name}_ast{j}", st.name)
    for st, proof in out["domain"] + out["difficulty"]:
        keep("ast_of_evolved", ast_variant(st, proof, rng), f"{st.name}_ast", st.name)
    return out
