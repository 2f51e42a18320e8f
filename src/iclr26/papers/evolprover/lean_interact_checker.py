"""Checking whole proofs through LeanInteract (lean-interact 0.11.6, pinned in envs/lean.yaml): the
maintained client of the Lean REPL, `eval.checker: lean_interact`, the alternative to our raw REPL
client (lean_repl.py) and to `lake env lean --json` (lean_tools.py, the full scale's default).

LeanInteract's own API does the work:
    LeanREPLConfig(project=LocalProject(directory=<the benchmark's Lake project>, auto_build=False),
                   repl_git=<pinned>, repl_rev=<pinned>, cache_dir=<under lean.home>, lake_path=<elan's lake>)
        fetches the REPL at the tag `<repl_rev>_lean-toolchain-<the project's Lean version>` into
        cache_dir and builds it with `lake build` (the acquire node, `setup`, build_repl=True); on the
        evaluate nodes the same config finds the checkout and build there (build_repl=False, no
        network). The project itself was built by lean_tools.setup (Mathlib's cache).
    AutoLeanServer(config) runs `lake env <repl>/.lake/build/bin/repl` in the project, restarts it
        after a crash, a timeout or memory pressure, and replays the header from its session cache.
    server.run(Command(cmd=header), add_to_session_cache=True): the header (imports, options,
        `open`) once; each proof then runs as Command(cmd=<theorem with the proof>, env=<header env>).
    A proof passes iff the response is a CommandResponse and `lean_code_is_valid(allow_sorry=False)`
    (no error, no sorry, no "declaration uses 'sorry'" warning, LeanInteract's own rule), and its
    text has nothing of lean_tools.BANNED (no `axiom`, `#exit`, ... as in the default checker).
A request that times out or whose REPL dies counts as a failed proof.

`local_repl_path` (lean.interact) points LeanInteract at a REPL checkout of one's own instead of
fetching one (LeanInteract's own option): the offline test uses it for a stand-in process that
speaks the REPL's JSON protocol.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def repl_config(lean: dict, project: Path, build: bool):
    """LeanInteract's config for the benchmark's Lake project (see the module's docstring)."""
    from lean_interact import LeanREPLConfig, LocalProject

    it = lean["interact"]
    lake = str(Path(lean["home"]) / "bin" / "lake")
    kwargs = dict(project=LocalProject(directory=str(project), lake_path=lake, auto_build=False), lake_path=lake,
                  build_repl=build, memory_hard_limit_mb=it.get("memory_hard_limit_mb"), verbose=False)
    if it.get("local_repl_path"):
        kwargs["local_repl_path"] = str(it["local_repl_path"])
    else:
        kwargs.update(repl_git=it["repl_git"], repl_rev=it["repl_rev"], cache_dir=str(it["cache_dir"]))
    return LeanREPLConfig(**kwargs)


def setup(lean: dict, project: Path, log=print) -> dict:
    """On the acquire node (after lean_tools.setup): fetch and build the pinned REPL for the project."""
    from . import lean_tools

    saved = dict(os.environ)
    os.environ.update(lean_tools.environ(Path(lean["home"])))
    try:
        config = repl_config(lean, project, build=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    log(f"LeanInteract: REPL {lean['interact'].get('repl_rev')} built at {config.cache_repl_dir} "
        f"for Lean {config.lean_version}")
    return {"repl_dir": config.cache_repl_dir, "lean_version": config.lean_version,
            "repl_rev": lean["interact"].get("repl_rev")}


class LeanInteractChecker:
    """One AutoLeanServer in the benchmark's project; `check_proof(statement, proof) -> bool`."""

    def __init__(self, lean: dict, project: Path, header: str, timeout: float):
        from lean_interact import AutoLeanServer, Command

        from . import lean_tools

        self.Command, self.timeout = Command, float(timeout)
        self._saved = dict(os.environ)   # the REPL's restarts inherit ELAN_HOME and PATH: kept until close()
        os.environ.update(lean_tools.environ(Path(lean["home"])))
        self.server = AutoLeanServer(repl_config(lean, project, build=False),
                                     max_total_memory=float(lean["interact"].get("max_total_memory", 0.8)))
        reply = self.server.run(Command(cmd=header.strip()), timeout=self.timeout, add_to_session_cache=True)
        if not _valid(reply, allow_sorry=True):
            self.close()
            raise RuntimeError(f"the Lean header does not compile in {project}: {_first_error(reply)}")
        self.env = reply.env

    def check_proof(self, lean_statement: str, proof: str) -> bool:
        from . import lean_tools

        if lean_tools.banned(proof):
            return False
        body = lean_tools._statement(lean_statement)
        cut = body.rfind(":= by")
        if cut < 0:
            return False
        code = body[:cut] + ":= by\n  " + "\n  ".join(proof.strip().splitlines())
        try:
            reply = self.server.run(self.Command(cmd=code, env=self.env), timeout=self.timeout)
        except (TimeoutError, ConnectionAbortedError, ChildProcessError, BrokenPipeError, json.JSONDecodeError):
            return False   # LeanInteract killed the REPL; AutoLeanServer restarts it at the next request
        return _valid(reply, allow_sorry=False)

    def close(self) -> None:
        if getattr(self, "server", None) is not None:
            self.server.kill()
            self.server = None
        if getattr(self, "_saved", None) is not None:
            os.environ.clear()
            os.environ.update(self._saved)
            self._saved = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _valid(reply, allow_sorry: bool) -> bool:
    from lean_interact.interface import CommandResponse

    return isinstance(reply, CommandResponse) and reply.lean_code_is_valid(allow_sorry=allow_sorry)


def _first_error(reply) -> str:
    from lean_interact.interface import CommandResponse

    if not isinstance(reply, CommandResponse):
        return str(getattr(reply, "message", reply))
    errors = reply.get_errors()
    return errors[0].data if errors else "a sorry"
