"""Each paper's config schema (papers/<slug>/config.schema.yaml, core/schema.py): a typo in a paper's
yaml or an override, a missing key or a value out of range stops the composition with one line naming
the paper, the key and what is allowed, before any job runs (audit 2026-12-02: I27, I29, I36, I49-I51)."""
from __future__ import annotations

import importlib.util
import shutil

import pytest

from iclr26.core import config as config_module
from iclr26.core.config import SCALES, ConfigError, compose_job_config
from iclr26.core.paper import all_papers

PAPERS = list(all_papers())
REPO = config_module.REPO_ROOT


def _one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("slug", PAPERS)
def test_every_paper_composes_at_every_scale_within_its_schema(slug):
    import jsonschema

    from iclr26.core.schema import paper_validator

    jsonschema.Draft202012Validator.check_schema(paper_validator(slug).schema)  # the schema itself is valid
    for scale in SCALES:
        compose_job_config(slug, scale)  # raises ConfigError on the first key its schema refuses


@pytest.fixture
def hydra_copy(tmp_path, monkeypatch):
    """A copy of config/hydra that a test may edit, composed instead of the real one. The in-process
    composition cache is keyed by (paper, scale, overrides) only, so it is emptied on both sides."""
    tree = tmp_path / "hydra"
    shutil.copytree(config_module.HYDRA_DIR, tree)
    monkeypatch.setattr(config_module, "HYDRA_DIR", tree)
    monkeypatch.setattr(config_module, "COMPOSE_CACHE", tmp_path / "compose")
    config_module._compose.cache_clear()
    yield tree
    config_module._compose.cache_clear()


@pytest.mark.parametrize("old,new,message", [
    # a renamed key: unknown, and the key the code reads is missing (was: KeyError in train after prepare ran)
    ("  newton_iters:", "  newton_iter:",
     r"config key 'train.newton_iter' is not a key of this paper \(did you mean 'train.newton_iters'\?\); "
     r"'train.newton_iters' is missing"),
    # a misspelled shared key (was: silently ignored, 3 jobs per method instead of 1)
    ("seed_batch: 3", "seed_bacth: 3",
     r"config key 'seed_bacth' is not a key of this paper \(did you mean 'seed_batch'\?\)"),
    # a value outside its choices (was: a traceback in acquire, which removed the good raw manifest)
    ("kind: mixture", "kind: mixtrue",
     r"config key 'data.atoms_1d.kind' = 'mixtrue' is not allowed: one of mixture, triangle"),
])
def test_a_typo_in_a_paper_yaml_is_one_line_when_composed(hydra_copy, old, new, message):
    path = hydra_copy / "paper" / "diffusion_convergence.yaml"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    with pytest.raises(ConfigError) as err:
        compose_job_config("diffusion_convergence", "smoke")
    assert _one_line(err).startswith("paper diffusion_convergence (smoke): ")
    assert err.match(message)


@pytest.mark.parametrize("slug,override,message", [
    # was: zero-width error bars labelled "n/-3", rc 0
    ("diffusion_convergence", "train.refine=-3", r"config key 'train.refine' = -3 is not allowed: minimum 1"),
    # was: an all-n/a table, rc 0
    ("scorer", "train.total_steps=0", r"config key 'train.total_steps' = 0 is not allowed: minimum 1"),
    # was: accepted, every job's digest changed, no effect
    ("diffusion_convergence", "+train.refnie=2",
     r"config key 'train.refnie' is not a key of this paper \(did you mean 'train.refine'\?\)"),
    # a probability above 1, a selector outside its choices (another paper's name and a repeated seed are
    # refused before the schema, by core.config: tests/test_reliability.py)
    ("scorer", "train.gamma=1.5", r"config key 'train.gamma' = 1.5 is not allowed: maximum 1"),
    ("scorer", "data.third.impl=batchd", r"config key 'data.third.impl' = 'batchd' is not allowed: one of native"),
])
def test_an_override_outside_the_schema_is_one_line_when_composed(slug, override, message):
    with pytest.raises(ConfigError) as err:
        compose_job_config(slug, "smoke", (override,))
    assert _one_line(err).startswith(f"paper {slug} (smoke): ")
    assert err.match(message)


def test_the_range_boundaries_are_allowed():
    assert compose_job_config("diffusion_convergence", "smoke", ("train.refine=1",))["train"]["refine"] == 1
    assert compose_job_config("scorer", "smoke", ("train.total_steps=1",))["train"]["total_steps"] == 1


def _generator():
    spec = importlib.util.spec_from_file_location("paper_schemas", REPO / "scripts" / "paper_schemas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_schemas_are_in_step_with_the_configs(capsys):
    assert _generator().main(["--check"]) == 0, capsys.readouterr().out


def test_a_redraft_keeps_what_was_written_by_hand_and_follows_the_configs():
    gen = _generator()
    old = {"type": "object", "required": ["steps", "gone", "lr"], "additionalProperties": False, "properties": {
        "steps": {"type": "integer", "minimum": 1, "description": "optimiser steps"},
        "lr": {"type": ["number", "null"], "exclusiveMinimum": 0},     # widened by hand: kept
        "warmup": {"type": "integer", "minimum": 0},                     # optional by hand: stays optional
        "gone": {"type": "integer"},                                      # no scale has it: dropped
        "endpoint": {"x-optional": True, "type": "string"},              # read when given: kept
        "lora": {"type": ["object", "null"], "required": ["r"], "properties": {"r": {"type": "integer"}}},
    }}
    values = [{"steps": 4, "lr": 0.1, "warmup": 2, "lora": None, "new_key": "x"},
              {"steps": 40, "lr": 1, "warmup": 3, "lora": None, "new_key": "y"}]
    new = gen.draft(values, old)
    props = new["properties"]
    assert props["steps"] == {"type": "integer", "minimum": 1, "description": "optimiser steps"}
    assert props["lr"]["type"] == ["number", "null"] and props["lr"]["exclusiveMinimum"] == 0
    assert "gone" not in props and props["endpoint"]["x-optional"] is True
    assert props["lora"]["properties"] == {"r": {"type": "integer"}}  # no scale gives its keys: as written
    assert props["new_key"] == {"type": "string"}
    assert new["required"] == ["steps", "lr", "new_key"]              # warmup stays optional; new_key is required
    assert gen._differences(old, new)                                 # what --check reports
    assert gen.draft([1, 2.5], {"type": "integer", "minimum": 0})["type"] == "number"  # a float now: redrafted
