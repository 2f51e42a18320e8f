"""MiniLean: a small, deterministic proof checker for a fragment of Lean 4 (card 13, section 6).

The fragment: real-valued polynomial (in)equalities over atoms (variables `a`, applications `f n`,
`Real.exp a`), hypotheses `(h : 0 ≤ a)`, and whole proofs of one closing tactic:
    nlinarith [facts]   goal  rhs - lhs  is a non-negative combination of the facts, the context's
                        hypotheses, their pairwise products and the squares t^2 written in the goal
                        (Lean's nlinarith preprocessing), found by NNLS and checked EXACTLY over
                        the rationals (a certificate is accepted only if it is exact)
    linarith [facts]    the same without products
    positivity          the goal is `0 ≤ e` / `0 < e` and e is syntactically non-negative / positive
    ring / ring_nf      an equality whose sides have the same polynomial normal form
Facts: `sq_nonneg e`, `pow_two_nonneg e`, `mul_nonneg p q`, a hypothesis name, `(Real.exp_pos e).le`.
A proof with `sorry`, an unknown tactic or fact, or a tactic after the goal is closed fails, as in Lean.

Statements are read by `parse_theorem` from Lean 4 source (a MiniF2F file, a `formal_statement`
field); the same parser reads real MiniF2F files at full scale, where statements outside the
fragment are kept as text (`in_fragment` false) and checked by the real Lean REPL instead.
Polynomials are dicts {monomial: Fraction} (a monomial: sorted ((atom, power), ...)); this hot
path runs for every sampled proof, where sympy's expand is ~50x slower; the tests check the normal
form against sympy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

HEADER = "import Mathlib\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"
RELS = ("≤", "≥", "<", ">", "=", "≠")
TOKEN = re.compile(r"\s*(:=|[0-9]+(?:\.[0-9]+)?|[A-Za-z_α-ωΑ-Ω][A-Za-z_0-9'.₀-₉α-ωΑ-Ω!?]*|→|↔|≤|≥|≠|∧|∨|ℝ|ℕ|ℤ|ℚ|ℂ"
                   r"|∀|∃|¬|[-+*/^()\[\]{},:<>=|⟨⟩·∑∏√%]|\S)")


class Unsupported(ValueError):
    """Text outside the MiniLean fragment."""


def lex(text: str) -> list[str]:
    return TOKEN.findall(text.strip())


# ----------------------------------------------------------------------------- polynomials
Poly = dict  # {((atom, power), ...): Fraction}


def p_const(c) -> Poly:
    return {(): Fraction(c)} if c else {}


def p_atom(name: str) -> Poly:
    return {((name, 1),): Fraction(1)}


def p_add(p: Poly, q: Poly, sign: int = 1) -> Poly:
    out = dict(p)
    for m, c in q.items():
        v = out.get(m, 0) + sign * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def _mono_mul(m1, m2):
    d = dict(m1)
    for a, e in m2:
        d[a] = d.get(a, 0) + e
    return tuple(sorted(d.items()))


_MUL_CACHE: dict = {}


def p_mul(p: Poly, q: Poly) -> Poly:
    """p * q (a fresh dict). Memoised by the two operands' items: nlinarith multiplies the same hints and
    hypotheses for every sample of a problem; the cache only saves time, the product is the same."""
    key = (tuple(p.items()), tuple(q.items()))
    got = _MUL_CACHE.get(key)
    if got is None:
        if len(_MUL_CACHE) > 200_000:
            _MUL_CACHE.clear()
        got = _MUL_CACHE[key] = _p_mul(p, q)
    return dict(got)


def _p_mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = _mono_mul(m1, m2)
            v = out.get(m, 0) + c1 * c2
            if v:
                out[m] = v
            else:
                out.pop(m, None)
    return out


def p_pow(p: Poly, n: int) -> Poly:
    out = p_const(1)
    for _ in range(n):
        out = p_mul(out, p)
    return out


# ----------------------------------------------------------------------------- expressions
# AST nodes (tuples): ("num", Fraction) ("var", name) ("app", fname, (args...))
# ("add"|"sub"|"mul"|"div", a, b) ("pow", a, n) ("neg", a)
PREC = {"add": 65, "sub": 65, "mul": 70, "div": 70, "neg": 75, "pow": 75}


class _Parser:
    def __init__(self, toks: list[str]):
        self.toks, self.i = toks, 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want=None):
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise Unsupported(f"expected {want!r}, got {tok!r}")
        self.i += 1
        return tok

    def expr(self, min_prec=0):
        if self.peek() == "-":
            self.take()
            left = ("neg", self.expr(75))
        else:
            left = self.application()
        while True:
            op = {"+": "add", "-": "sub", "*": "mul", "/": "div", "^": "pow"}.get(self.peek())
            if op is None or PREC[op] < min_prec:
                return left
            self.take()
            if op == "pow":
                exp = self.take()
                if not exp.isdigit():
                    raise Unsupported(f"exponent {exp!r}")
                left = ("pow", left, int(exp))
            else:
                left = (op, left, self.expr(PREC[op] + 1))

    def _starts_arg(self):
        tok = self.peek()
        return tok is not None and (tok == "(" or tok[0].isdigit() or _is_ident(tok))

    def application(self):
        head = self.primary()
        if head[0] == "var":
            args = []
            while self._starts_arg():
                args.append(self.primary())
            if args:
                return ("app", head[1], tuple(args))
        return head

    def primary(self):
        tok = self.take()
        if tok == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if tok[0].isdigit():
            return ("num", Fraction(tok))
        if _is_ident(tok):
            return ("var", tok)
        raise Unsupported(f"token {tok!r}")


def _is_ident(tok: str) -> bool:
    return bool(tok) and (tok[0].isalpha() or tok[0] == "_") and tok not in ("ℝ", "ℕ", "ℤ", "ℚ", "ℂ")


def parse_expr(text_or_toks) -> tuple:
    toks = lex(text_or_toks) if isinstance(text_or_toks, str) else list(text_or_toks)
    p = _Parser(toks)
    e = p.expr()
    if p.peek() is not None:
        raise Unsupported(f"trailing {p.peek()!r}")
    return e


def show(e, parent: int = 0, right: bool = False) -> str:
    """Lean 4 text of an expression, tokens separated by spaces, minimal parentheses."""
    kind = e[0]
    if kind == "num":
        v = e[1]
        return str(v.numerator) if v.denominator == 1 else f"({v.numerator} / {v.denominator})"
    if kind == "var":
        return e[1]
    if kind == "app":
        s = " ".join([e[1]] + [show(a, 1024) for a in e[2]])
        return f"( {s} )" if parent >= 1024 else s
    if kind == "neg":
        s = "- " + show(e[1], 75)
        return f"( {s} )" if parent > 65 else s
    if kind == "pow":
        s = f"{show(e[1], 76)} ^ {e[2]}"
    else:
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[kind]
        prec = PREC[kind]
        s = f"{show(e[1], prec)} {sym} {show(e[2], prec + 1)}"
    prec = PREC[kind]
    return f"( {s} )" if prec < parent or (prec == parent and right) else s


def atom_key(e) -> str:
    return show(e)


_POLY_CACHE: dict = {}


def poly(e) -> Poly:
    """The normal form of an expression (a fresh dict: callers may change it). Memoised by the
    expression (a nested tuple): the kernel meets the same hints and goals across the samples of a
    problem; the cache only saves time, the result is the same."""
    got = _POLY_CACHE.get(e)
    if got is None:
        if len(_POLY_CACHE) > 200_000:
            _POLY_CACHE.clear()
        got = _POLY_CACHE[e] = _poly(e)
    return dict(got)


def _poly(e) -> Poly:
    kind = e[0]
    if kind == "num":
        return p_const(e[1])
    if kind in ("var", "app"):
        return p_atom(atom_key(e))
    if kind == "neg":
        return p_add({}, poly(e[1]), -1)
    if kind == "add":
        return p_add(poly(e[1]), poly(e[2]))
    if kind == "sub":
        return p_add(poly(e[1]), poly(e[2]), -1)
    if kind == "mul":
        return p_mul(poly(e[1]), poly(e[2]))
    if kind == "div":
        d = poly(e[2])
        if list(d) != [()]:
            raise Unsupported("division by a non-constant")
        return {m: c / d[()] for m, c in poly(e[1]).items()}
    if kind == "pow":
        return p_pow(poly(e[1]), e[2])
    raise Unsupported(kind)


def subst(e, mapping: dict):
    """Replace atoms (by their text) with expressions."""
    kind = e[0]
    if kind in ("var", "app"):
        key = atom_key(e)
        if key in mapping:
            return mapping[key]
        if kind == "app":
            return ("app", e[1], tuple(subst(a, mapping) for a in e[2]))
        return e
    if kind == "num":
        return e
    if kind in ("neg",):
        return ("neg", subst(e[1], mapping))
    if kind == "pow":
        return ("pow", subst(e[1], mapping), e[2])
    return (kind, subst(e[1], mapping), subst(e[2], mapping))


def atoms(e, out=None) -> list[str]:
    out = [] if out is None else out
    if e[0] in ("var", "app"):
        if atom_key(e) not in out:
            out.append(atom_key(e))
    elif e[0] in ("neg", "pow"):
        atoms(e[1], out)
    elif e[0] != "num":
        atoms(e[1], out)
        atoms(e[2], out)
    return out


def from_poly(p: Poly, atom_exprs: dict | None = None):
    """An expression of a polynomial: monomials by degree (high first), then by text."""
    if not p:
        return ("num", Fraction(0))

    def mono(m):
        parts = []
        for a, k in m:
            base = (atom_exprs or {}).get(a) or parse_expr(a)
            parts.append(base if k == 1 else ("pow", base, k))
        return parts

    terms = sorted(p.items(), key=lambda mc: (-sum(k for _, k in mc[0]), str(mc[0])))
    out = None
    for m, c in terms:
        factors = mono(m)
        mag = abs(c)
        node = None
        if mag != 1 or not factors:
            node = ("num", mag)
        for f in factors:
            node = f if node is None else ("mul", node, f)
        if out is None:
            out = node if c > 0 else ("neg", node)
        else:
            out = ("add" if c > 0 else "sub", out, node)
    return out


# ----------------------------------------------------------------------------- statements
@dataclass
class Rel:
    lhs: tuple
    op: str
    rhs: tuple

    def show(self) -> str:
        return f"{show(self.lhs)} {self.op} {show(self.rhs)}"


@dataclass
class Statement:
    name: str
    binders: list = field(default_factory=list)      # [(names tuple, type text)]
    hyps: list = field(default_factory=list)         # [(hyp name, [Rel, ...] | None, text)]
    goal: list | None = None                         # [Rel, ...] (a conjunction) or None
    goal_text: str = ""

    @property
    def in_fragment(self) -> bool:
        """Parsed, and every relation is one over the reals (typed_ok): MiniLean reads + - * / as
        field operations, which is unsound for ℕ (truncated subtraction, floor division) and ℤ."""
        if self.goal is None or any(r is None for _, r, _ in self.hyps):
            return False
        return all(typed_ok(r, self) for r in self.goal) and all(typed_ok(r, self) for _, rels, _ in self.hyps
                                                                   for r in rels)

    def header_text(self) -> str:
        """`theorem name (binders) (hyps) :\n    goal`, tokens separated by spaces."""
        parts = [f"theorem {self.name}"]
        parts += [f"( {' '.join(names)} : {typ} )" for names, typ in self.binders]
        for hname, rels, text in self.hyps:
            body = " ∧ ".join(r.show() for r in rels) if rels else text
            parts.append(f"( {hname} : {body} )")
        goal = " ∧ ".join(r.show() for r in self.goal) if self.goal else self.goal_text
        return " ".join(parts) + " :\n    " + goal

    def lean(self, proof: str | None = None) -> str:
        body = "sorry" if proof is None else "\n  " + proof
        return HEADER + self.header_text() + " := by " + body.lstrip(" ") + "\n"

    def prompt(self) -> str:
        """What the prover reads: binders, hypotheses and goal (no name), one line of tokens."""
        text = self.header_text().split(" ", 2)[2] if " " in self.header_text() else ""
        return " ".join(lex(text)) + " := by"


REAL_FUNCTIONS = ("ℕ → ℝ", "ℝ → ℝ")   # binder types of functions whose values are real


def typed_ok(r: Rel, st: Statement) -> bool:
    """The relation is elaborated over ℝ: every variable it computes with is bound with type ℝ, every
    application is `Real.<fn> ...` or a bound function into ℝ (its arguments, e.g. the index `n : ℕ`
    of `f (n + 1)`, are opaque: the atom is compared by its text only), and it has at least one such
    atom (a relation of numerals alone is elaborated in ℕ by Lean). Anything else (ℕ, ℤ, unbound
    names) is outside the fragment."""
    types = {n: t for names, t in st.binders for n in names}

    def ok(e) -> bool:
        kind = e[0]
        if kind == "num":
            return True
        if kind == "var":
            return types.get(e[1]) == "ℝ"
        if kind == "app":
            real = e[1].startswith("Real.") or types.get(e[1]) in REAL_FUNCTIONS
            return real and all(arg_ok(a) for a in e[2])
        if kind in ("neg", "pow"):
            return ok(e[1])
        return ok(e[1]) and ok(e[2])

    def arg_ok(e) -> bool:
        if e[0] == "var":
            return e[1] in types
        if e[0] == "num":
            return True
        if e[0] == "app":
            return ok(e)
        return all(arg_ok(x) for x in e[1:] if isinstance(x, tuple))

    return ok(r.lhs) and ok(r.rhs) and bool(atoms(r.lhs) + atoms(r.rhs))


def _split_top_level(toks: list[str], sep: str) -> list[list[str]]:
    """Split a token list at `sep` outside any brackets; an empty last part is dropped."""
    parts, depth, cur = [], 0, []
    for t in toks:
        depth += t in "([{⟨"
        depth -= t in ")]}⟩"
        if t == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    return parts + [cur] if cur else parts


def _parse_rels(toks: list[str]) -> list[Rel]:
    out = []
    for part in _split_top_level(toks, "∧"):
        idx = [i for i, t in enumerate(part) if t in RELS]
        if len(idx) != 1:
            raise Unsupported("not a single relation")
        i = idx[0]
        out.append(Rel(parse_expr(part[:i]), part[i], parse_expr(part[i + 1:])))
    return out


def parse_theorem(text: str) -> Statement:
    """The first `theorem`/`lemma` of Lean 4 source: name, binders, hypotheses, goal. Expressions
    outside the fragment are kept as text (the statement is then not `in_fragment`)."""
    m = re.search(r"\b(?:theorem|lemma)\s+(\S+)", text)
    if not m:
        raise Unsupported("no theorem")
    toks = lex(text[m.end():])
    i, depth, groups, start = 0, 0, [], None
    while i < len(toks):  # binder groups until ':' at depth 0
        t = toks[i]
        if depth == 0 and t == ":":
            break
        if t in "([{⟨":
            if depth == 0:
                start = i
            depth += 1
        elif t in ")]}⟩":
            depth -= 1
            if depth == 0:
                groups.append(toks[start + 1:i])
        i += 1
    rest = toks[i + 1:]
    end = rest.index(":=") if ":=" in rest else len(rest)
    goal_toks = rest[:end]
    st = Statement(name=m.group(1), goal_text=" ".join(goal_toks))
    for g in groups:
        if ":" not in g:
            continue
        c = g.index(":")
        names, typ = g[:c], g[c + 1:]
        if any(t in RELS for t in typ):
            try:
                rels = _parse_rels(typ)
            except Unsupported:
                rels = None
            for n in names:
                st.hyps.append((n, rels, " ".join(typ)))
        else:
            st.binders.append((tuple(names), " ".join(typ)))
    try:
        st.goal = _parse_rels(goal_toks)
    except Unsupported:
        st.goal = None
    return st


def proof_of(text: str) -> str | None:
    """The tactic block after `:= by` (None if absent)."""
    m = re.search(r":=\s*by\b", text)
    return text[m.end():].strip() if m else None


# ----------------------------------------------------------------------------- kernel
def _fact(toks: list[str], st: Statement):
    """A fact term -> (Poly, kind) with kind 'ge' (p ≥ 0), 'gt' (p > 0) or 'eq' (p = 0)."""
    while toks and toks[0] == "(" and _closing(toks, 0) == len(toks) - 1:
        toks = toks[1:-1]
    if not toks:
        raise Unsupported("empty fact")
    head = toks[0]
    if head in ("sq_nonneg", "pow_two_nonneg"):
        return p_pow(poly(parse_expr(toks[1:])), 2), "ge"
    if head == "mul_nonneg":
        a_toks, b_toks = _two_args(toks[1:])
        (pa, ka), (pb, kb) = _fact(a_toks, st), _fact(b_toks, st)
        if ka == "eq" or kb == "eq":
            raise Unsupported("mul_nonneg of an equality")
        return p_mul(pa, pb), "ge"
    if "Real.exp_pos" in toks[:2]:
        m = re.fullmatch(r"\( Real\.exp_pos (.+) \) \. le|Real\.exp_pos (.+)", " ".join(toks))
        if not m:
            raise Unsupported("exp_pos form")
        arg = next(g for g in m.groups() if g)
        return poly(("app", "Real.exp", (parse_expr(arg),))), "ge"
    if len(toks) == 1:
        for hname, rels, _ in st.hyps:
            if hname == head and rels and len(rels) == 1:
                return _rel_fact(rels[0])
        raise Unsupported(f"unknown hypothesis {head}")
    raise Unsupported(f"unknown fact {head}")


def _closing(toks, i):
    depth = 0
    for j in range(i, len(toks)):
        depth += toks[j] == "("
        depth -= toks[j] == ")"
        if depth == 0:
            return j
    return -1


def _two_args(toks):
    args, i = [], 0
    while i < len(toks):
        if toks[i] == "(":
            j = _closing(toks, i)
            if j < 0:
                raise Unsupported("parentheses")
            k = j + 1
            while k + 1 < len(toks) and toks[k] == "." and _is_ident(toks[k + 1]):   # (h).le
                k += 2
            args.append(toks[i:k])
            i = k
        else:
            args.append([toks[i]])
            i += 1
    if len(args) != 2:
        raise Unsupported("mul_nonneg takes two facts")
    return args


def _rel_fact(r: Rel):
    lhs, rhs = poly(r.lhs), poly(r.rhs)
    if r.op in ("≤", "<"):
        return p_add(rhs, lhs, -1), "ge" if r.op == "≤" else "gt"
    if r.op in ("≥", ">"):
        return p_add(lhs, rhs, -1), "ge" if r.op == "≥" else "gt"
    if r.op == "=":
        return p_add(lhs, rhs, -1), "eq"
    raise Unsupported(r.op)


def _squares(e, out):
    if e[0] == "pow" and e[2] % 2 == 0:
        out.append(p_pow(poly(e[1]), e[2]))
    if e[0] in ("neg", "pow"):
        _squares(e[1], out)
    elif e[0] in ("add", "sub", "mul", "div"):
        _squares(e[1], out)
        _squares(e[2], out)
    return out


def _split_list(toks):
    if not toks or toks[0] != "[" or toks[-1] != "]":
        raise Unsupported("fact list")
    return _split_top_level(toks[1:-1], ",")


def certificate(target: Poly, facts: list[tuple[Poly, str]], strict: bool) -> bool:
    """target = c0 + sum c_i f_i (c >= 0; equalities with either sign), exactly over Q; strict
    goals need c0 > 0 or a strict fact with c_i > 0."""
    columns = [(p_const(1), "ge")] + [(f, k) for f, k in facts]
    columns += [({m: -c for m, c in f.items()}, "eq") for f, k in facts if k == "eq"]
    monos = sorted({m for f, _ in columns for m in f} | set(target), key=str)
    if not monos:
        return not strict
    index = {m: i for i, m in enumerate(monos)}
    import numpy as np  # here, not at the top: the stand-in REPL processes of the tests import this module

    A = np.zeros((len(monos), len(columns)))
    for j, (f, _) in enumerate(columns):
        for m, c in f.items():
            A[index[m], j] = float(c)
    b = np.zeros(len(monos))
    for m, c in target.items():
        b[index[m]] = float(c)
    from scipy.optimize import nnls

    x, resid = nnls(A, b)
    if resid > 1e-6:
        return False
    coeffs = [Fraction(v).limit_denominator(1000) for v in x]
    total: Poly = {}
    for c, (f, _) in zip(coeffs, columns):
        if c:
            total = p_add(total, {m: c * v for m, v in f.items()})
    if p_add(target, total, -1):
        return False
    if strict:
        return coeffs[0] > 0 or any(c > 0 and k == "gt" for c, (_, k) in zip(coeffs, columns))
    return True


def _nonneg_syntactic(e, st: Statement) -> bool:
    kind = e[0]
    if kind == "num":
        return e[1] >= 0
    if kind in ("var", "app"):
        if kind == "app" and e[1] == "Real.exp":
            return True
        key = atom_key(e)
        return any(rels and len(rels) == 1 and rels[0].op in ("≤", "<") and rels[0].lhs == ("num", 0)
                   and atom_key(rels[0].rhs) == key for _, rels, _ in st.hyps if rels)
    if kind == "pow":
        return e[2] % 2 == 0 or _nonneg_syntactic(e[1], st)
    if kind in ("add", "mul", "div"):
        return _nonneg_syntactic(e[1], st) and _nonneg_syntactic(e[2], st)
    return False


def _pos_syntactic(e, st: Statement) -> bool:
    """e > 0 syntactically: a positive numeral, Real.exp, an atom with a hypothesis `0 < atom`, a
    power of a positive base, a sum of a positive and a non-negative term, a product or quotient of
    positive terms. (A square is only non-negative; a `0 ≤ x` hypothesis gives no strictness.)"""
    kind = e[0]
    if kind == "num":
        return e[1] > 0
    if kind in ("var", "app"):
        if kind == "app" and e[1] == "Real.exp":
            return True
        key = atom_key(e)
        return any(rels and len(rels) == 1 and rels[0].op == "<" and rels[0].lhs == ("num", 0)
                   and atom_key(rels[0].rhs) == key for _, rels, _ in st.hyps if rels)
    if kind == "pow":
        return _pos_syntactic(e[1], st)
    if kind == "add":
        return (_pos_syntactic(e[1], st) and _nonneg_syntactic(e[2], st)) or \
            (_nonneg_syntactic(e[1], st) and _pos_syntactic(e[2], st))
    if kind in ("mul", "div"):
        return _pos_syntactic(e[1], st) and _pos_syntactic(e[2], st)
    return False


def run_tactic(line: str, st: Statement, goal: Rel) -> None:
    """Close `goal` with one tactic line or raise Unsupported (the tactic fails)."""
    toks = lex(line)
    if not toks:
        raise Unsupported("empty tactic")
    tac = toks[0]
    if tac in ("ring", "ring_nf"):
        if len(toks) != 1 or goal.op != "=" or p_add(poly(goal.lhs), poly(goal.rhs), -1):
            raise Unsupported("ring failed")
        return
    if tac == "positivity":
        side = goal.rhs if goal.op in ("≤", "<") else goal.lhs if goal.op in ("≥", ">") else None
        other = goal.lhs if goal.op in ("≤", "<") else goal.rhs
        if len(toks) != 1 or side is None or other != ("num", 0) or not _nonneg_syntactic(side, st):
            raise Unsupported("positivity failed")
        if goal.op in ("<", ">") and not _pos_syntactic(side, st):
            raise Unsupported("positivity failed")
        return
    if tac in ("nlinarith", "linarith"):
        target, kind = _rel_fact(goal)
        if kind == "eq":
            raise Unsupported(f"{tac} on an equality")
        hints = [_fact(item, st) for item in _split_list(toks[1:])] if len(toks) > 1 else []
        context = [_rel_fact(r) for _, rels, _ in st.hyps if rels for r in rels]
        facts = hints + context
        if tac == "nlinarith":
            ineq = [f for f in facts if f[1] != "eq"]
            facts = facts + [(p_mul(a[0], b[0]), "ge") for i, a in enumerate(ineq) for b in ineq[i:]]
            squares = _squares(goal.lhs, []) + _squares(goal.rhs, [])
            facts += [(s, "ge") for s in squares]
        if not certificate(target, facts, strict=kind == "gt"):
            raise Unsupported(f"{tac} failed")
        return
    raise Unsupported(f"unknown tactic {tac}")


def check(st: Statement, proof: str) -> bool:
    """Whole-proof check, Lean's acceptance rule: every step valid, every goal closed, no sorry."""
    if not st.in_fragment or "sorry" in proof:
        return False
    goals = list(st.goal)
    lines = [ln.strip() for ln in proof.strip().split("\n") if ln.strip()]
    if not lines:
        return False
    try:
        if len(goals) > 1:   # a conjunction: `constructor` then one tactic per goal
            if lines[0] != "constructor":
                return False
            lines = lines[1:]
        if len(lines) != len(goals):
            return False
        for line, goal in zip(lines, goals):
            run_tactic(line, st, goal)
    except (Unsupported, ZeroDivisionError, RecursionError, ValueError):
        return False
    return True


def with_goal(st: Statement, goal: list[Rel], **kw) -> Statement:
    return replace(st, goal=goal, **kw)
