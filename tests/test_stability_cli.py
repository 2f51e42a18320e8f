"""`python -m iclr26 stability`: the workflow takes its Snakemake command, and a smoke run of one paper
on a second seed set writes the comparison without touching the paper's own results."""
import json
import os
import subprocess
import sys

import pytest

from conftest import venv_env
from iclr26.core.stability import snakemake_command


def test_the_workflow_accepts_the_jobs_of_another_seed_set(tmp_path):
    targets = ["runs/smoke/icl_vs_sft/icl/s5-6/eval.json", "runs/smoke/icl_vs_sft/sft/s5-6/eval.json"]
    command = snakemake_command(tmp_path, "smoke", "icl_vs_sft", [5, 6], ["train.sft_steps=12"], ["icl", "sft"],
                                targets, 2, None)
    proc = subprocess.run([*command[:3], "-n", "--quiet", "rules", *command[3:]], cwd=tmp_path, env=venv_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "acquire" in proc.stdout and "evaluate" in proc.stdout   # its data remade for these seeds, in tmp_path


@pytest.mark.slow
def test_stability_at_smoke_scale_writes_the_comparison_and_leaves_the_results_alone(checkout):
    paper = "andor_template"
    own = checkout / "results" / paper
    own.mkdir(parents=True)
    for name in ("claims.json", "table.md"):
        (own / name).write_text(f"the paper's own {name}\n")
    env = {**venv_env(), "PYTHONPATH": str(checkout / "src")}
    command = [sys.executable, "-m", "iclr26", "stability", "--paper", paper, "--scale", "smoke", "--seeds", "7"]
    proc = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    out = own / "stability" / "seeds-7"
    payload = json.loads((out / "stability.json").read_text())
    claims = json.loads((out / "claims.json").read_text())
    assert (payload["seeds_a"], payload["seeds_b"], claims["seeds"]) == ([0, 1], [7], [7])
    assert [r["id"] for r in payload["rows"]] == [c["id"] for c in claims["claims"]
                                                  if c["kind"] == "claim"] + [c["id"] for c in claims["claims"]
                                                                              if c["kind"] == "check"]
    assert payload["provenance"]["git_commit"] and set(payload["provenance"]["config_digest"]) == {"a", "b"}
    assert "seed-set luck" in (out / "stability.md").read_text()
    assert proc.stdout.splitlines()[2].split()[:3] == ["claim", "A", "0-1"]
    assert all(r["id"] in proc.stdout for r in payload["rows"])
    for name in ("claims.json", "table.md"):   # the paper's own results: untouched
        assert (own / name).read_text() == f"the paper's own {name}\n"
    assert sorted(os.listdir(own)) == ["claims.json", "stability", "table.md"]
    for method in ("template", "mlp"):         # both sets' run folders side by side
        assert {p.name for p in (checkout / "runs" / "smoke" / paper / method).iterdir()} == {"s0-1", "s7"}
