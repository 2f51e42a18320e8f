"""Lint, run by the README's test command: ruff (the rule set in pyproject.toml), snakefmt and
`snakemake --lint` over the workflow; and an import-cycle check of the package."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO, venv_env

BIN = Path(sys.executable).parent


def _run(*cmd):
    proc = subprocess.run(cmd, cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_ruff():
    code, out = _run(str(BIN / "ruff"), "check", "src", "tests", "scripts")
    assert code == 0, out[-4000:]


def test_snakefmt():
    code, out = _run(str(BIN / "snakefmt"), "--check", "Snakefile", "workflow")
    assert code == 0, out[-4000:]


def test_snakemake_lint():
    code, out = _run(sys.executable, "-m", "snakemake", "--lint")
    assert code == 0 and "Lints for" not in out, out[-4000:]


def _imports_of(path: Path, package: str) -> set[str]:
    """Modules of `package` that `path` imports, at module level or inside functions (a lazy
    import that closes a cycle still tangles two modules)."""
    module = ".".join(path.relative_to(REPO / "src").with_suffix("").parts)
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(package))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(package):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
    return found


def test_no_import_cycles():
    files = {".".join(p.relative_to(REPO / "src").with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / "src" / "iclr26").rglob("*.py")}
    # a submodule importing its own parent package (`from . import PAPER`) is not a cycle: the
    # package is initialised before its submodules
    graph = {m: {d for d in _imports_of(p, "iclr26") if d in files and d != m and not m.startswith(d + ".")}
             for m, p in files.items()}

    def cycle_from(start, node, seen):
        for nxt in graph[node]:
            if nxt == start:
                return [node, nxt]
            if nxt not in seen:
                seen.add(nxt)
                if (rest := cycle_from(start, nxt, seen)):
                    return [node, *rest]
        return None

    for module in graph:
        found = cycle_from(module, module, set())
        assert not found, f"import cycle: {' -> '.join(found)}"
