import pytest

from iclr26.core.config import (SCALES, ConfigError, compose_job_config, parse_seed_block, seed_blocks,
                                split_overrides, validate_workflow_config)
from iclr26.core.paper import all_papers

PAPERS = list(all_papers())


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("slug", PAPERS)
def test_every_paper_composes_at_every_scale(slug, scale):
    cfg = compose_job_config(slug, scale)
    assert cfg["slug"] == slug and cfg["scale"] == scale
    assert cfg["seeds"] and cfg["claims"], "a paper must list its seeds and claims"
    assert all(stage in cfg["resources"] for stage in ("acquire", "prepare", "train", "evaluate", "tabulate"))
    methods = all_papers()[slug].methods
    for claim in cfg["claims"]:
        assert claim["method"] in methods and claim.get("baseline", methods[0]) in methods, claim["id"]


def test_overrides_and_seeds_reach_the_job_config():
    slug = PAPERS[0]
    cfg = compose_job_config(slug, "smoke", ("threads=3",), seeds=[7, 8])
    assert cfg["threads"] == 3 and cfg["seeds"] == [7, 8]


def test_a_bad_override_is_one_clear_error():
    with pytest.raises(ConfigError, match="bad override"):
        compose_job_config(PAPERS[0], "smoke", ("no_such_section.key=1",))


@pytest.mark.parametrize("config,message", [
    ({}, "config key 'scale' is missing"),
    ({"scale": "huge"}, "'scale' = 'huge' is not allowed; allowed: smoke, tiny, full"),
    ({"scale": "tiny", "seeds": "three"}, "config key 'seeds'"),
    ({"scale": "tiny", "papers": ["nonesuch"]}, "unknown paper 'nonesuch'"),
    ({"scale": "tiny", "colour": "blue"}, "unknown key"),
    ({"scale": "tiny", "overrides": ["not an override"]}, "config key 'overrides.0'"),
])
def test_workflow_config_errors_name_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        validate_workflow_config(config, PAPERS)


def test_workflow_config_defaults_fill_in():
    filled = validate_workflow_config({"scale": "tiny"}, PAPERS)
    assert filled["papers"] == PAPERS and filled["seeds"] is None and filled["overrides"] == []


def test_overrides_per_paper():
    assert split_overrides(["a=1", "p1:b=2", "p2:c=3", "d.e=x:y"], "p1") == ["a=1", "b=2", "d.e=x:y"]


def test_seed_blocks_round_trip():
    assert seed_blocks([0, 1, 2], 1) == ["s0", "s1", "s2"]
    assert seed_blocks(range(8), 8) == ["s0-7"]
    assert seed_blocks([1, 4, 9], 3) == ["s1_4_9"]
    for block in seed_blocks([0, 1, 2, 3, 5], 2):
        assert seed_blocks(parse_seed_block(block), 99) == [block]
