"""Checking whole proofs with the Lean REPL (leanprover-community/repl) at full scale.

The REPL's JSON protocol: one command per request, a JSON object followed by a blank line on
stdin, e.g. {"cmd": "<Lean source>", "env": 0}; one JSON object followed by a blank line on stdout:
{"env": <new env id>, "messages": [{"severity": "error"|"warning"|"info", "pos": ..., "data": ...}],
"sorries": [...]}, or {"message": "<error>"} for a malformed request. The header (imports, options,
`open`) is run once; every proof is then checked in that environment (Mathlib is not re-imported).
A proof passes, as in FormalMATH's and DeepSeek-Prover's evaluation, iff the response has no
error message, no sorry, and no "declaration uses 'sorry'" warning.

This is a minimal client of the raw protocol (what LeanInteract and the Kimina server wrap), so
that the exact bytes sent and read are tested offline against a stand-in process. It is the
alternative checker (eval.checker lean_repl: a REPL built inside the benchmark's Lake project);
the full scale checks with `lake env lean --json` (lean_tools.py), which also installs the pinned
toolchain. A REPL that dies or exceeds `timeout` is restarted; that proof counts as failed.
"""
from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import time


class ReplError(RuntimeError):
    pass


class LeanRepl:
    def __init__(self, command: list[str] | str, cwd: str | None = None, timeout: float = 60.0,
                 header: str = "import Mathlib"):
        self.command = command.split() if isinstance(command, str) else list(command)
        self.cwd, self.timeout, self.header = cwd, float(timeout), header
        self.proc = None
        self.env = None

    # -------------------------------------------------------------------------- process
    def start(self) -> None:
        self.close()
        self.proc = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.buffer = b""
        reply = self.send({"cmd": self.header.strip()})
        if _errors(reply):
            raise ReplError(f"the Lean header does not compile: {_errors(reply)[0]}")
        self.env = reply.get("env")

    def close(self, kill: bool = False) -> None:
        """End the REPL: EOF on its input (it exits), or at once with `kill` (a REPL that crashed or
        did not answer in time is not waited for)."""
        if self.proc is not None:
            try:
                if kill:
                    raise OSError("killed")
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def send(self, request: dict) -> dict:
        """One request, one response (a JSON object ended by a blank line)."""
        if self.proc is None or self.proc.poll() is not None:
            raise ReplError("the REPL is not running")
        try:
            self.proc.stdin.write((json.dumps(request, ensure_ascii=False) + "\n\n").encode())
            self.proc.stdin.flush()
        except OSError as err:
            raise ReplError(f"cannot write to the REPL: {err}") from None
        deadline = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        try:   # raw reads (os.read) into our own buffer: a buffered reader would hide bytes from select
            while True:
                text = self.buffer.lstrip(b"\r\n")
                end = text.find(b"\n\n")
                if end >= 0:
                    self.buffer = text[end + 2:]
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise ReplError(f"no answer within {self.timeout:.1f} s")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise ReplError("the REPL closed its output")
                self.buffer += chunk
        finally:
            sel.close()
        try:
            return json.loads(text[:end].decode())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ReplError(f"unreadable answer: {err}") from None

    # -------------------------------------------------------------------------- proofs
    def check_proof(self, lean_statement: str, proof: str) -> bool:
        """Does `proof` (a tactic block) prove the theorem of `lean_statement` (a file whose proof is
        `sorry`)? The header lines are dropped: they are the environment's."""
        body = strip_header(lean_statement)
        cut = body.rfind(":= by")
        if cut < 0:
            return False
        code = body[:cut] + ":= by\n  " + "\n  ".join(proof.strip().splitlines())
        for attempt in range(2):
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.start()
                reply = self.send({"cmd": code, "env": self.env})
                return passes(reply)
            except ReplError:
                self.close(kill=True)   # a crash or a timeout: restart once, then count the proof as failed
                if attempt:
                    return False
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _errors(reply: dict) -> list[str]:
    if "message" in reply and "env" not in reply:
        return [str(reply["message"])]
    return [m.get("data", "") for m in reply.get("messages", []) if m.get("severity") == "error"]


def passes(reply: dict) -> bool:
    if _errors(reply) or reply.get("sorries"):
        return False
    return not any("sorry" in m.get("data", "") for m in reply.get("messages", []) if m.get("severity") == "warning")


HEADER_LINE = re.compile(r"^\s*(import|set_option|open)\b.*$", re.M)


def strip_header(text: str) -> str:
    return HEADER_LINE.sub("", text).strip() + "\n"

