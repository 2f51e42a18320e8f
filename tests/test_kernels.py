"""Same seed, same numbers on every x86 machine (issue 27): importing iclr26 pins each numeric library's
AVX2 code path (iclr26.PINNED_KERNELS) over whatever the environment says, before numpy or torch
loads. Here one torch-heavy paper's stages run at smoke scale in fresh processes whose environment
asks MKL and torch for other instruction sets; the records come out bit for bit the same, and the
provenance says which kernels ran."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SLUG = "conditioned_init"   # trains small transformers from scratch: matmuls, softmax, AdamW
RUN = ("from iclr26.core.job import run_paper; from iclr26.core.provenance import kernels; import json, sys; "
       f"files = run_paper({SLUG!r}, 'smoke'); "
       "json.dump({'kernels': kernels(), 'records': [json.load(open(f))['records'] for f in files]}, sys.stdout)")


def _run(tmp_path, name: str, env: dict) -> dict:
    folder = tmp_path / name
    folder.mkdir()
    full = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.run([sys.executable, "-c", RUN], cwd=folder, env=full, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_records_are_bit_identical_whatever_instruction_set_the_environment_asks_for(tmp_path):
    asks_avx2 = _run(tmp_path, "avx2", {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"})
    asks_sse = _run(tmp_path, "sse", {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ATEN_CPU_CAPABILITY": "default",
                                      "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Prescott"})
    assert asks_avx2["records"] and json.dumps(asks_avx2["records"]) == json.dumps(asks_sse["records"])
    for run in (asks_avx2, asks_sse):   # the environment's request was overridden, and provenance says so
        assert run["kernels"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2" and run["kernels"]["ATEN_CPU_CAPABILITY"] == "avx2"
        assert run["kernels"]["ICLR26_NATIVE_KERNELS"] is False


def test_native_kernels_keep_the_environments_choice(tmp_path):
    code = "import iclr26, os, json; print(json.dumps([os.environ['MKL_ENABLE_INSTRUCTIONS'], iclr26.NATIVE_KERNELS]))"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    pinned = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    native = subprocess.run([sys.executable, "-c", code], env={**env, "ICLR26_NATIVE_KERNELS": "1"},
                            capture_output=True, text=True, check=True)
    assert json.loads(pinned.stdout) == ["AVX2", False]
    assert json.loads(native.stdout) == ["SSE4_2", True]
