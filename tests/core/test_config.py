import pytest

from iclr26.core.config import (
    ConfigError,
    compose_job_config,
    parse_seed_block,
    seed_blocks,
    split_overrides,
    validate_workflow_config,
)
from iclr26.core.paper import all_papers

PAPERS = list(all_papers())


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


def test_seeds_from_the_command_line_are_integers():
    """Snakemake hands `--config 'seeds=[0,1,2,3]'` over as strings; the README's example must work."""
    filled = validate_workflow_config({"scale": "tiny", "seeds": ["0", "1", "2", "3"]}, PAPERS)
    assert filled["seeds"] == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match=r"config key 'seeds.0' = '-1' is not valid; allowed: a list of distinct"):
        validate_workflow_config({"scale": "tiny", "seeds": ["-1"]}, PAPERS)


def test_an_override_for_an_unknown_paper_is_refused():
    with pytest.raises(ConfigError, match="names unknown paper 'nosuch'; implemented: "):
        validate_workflow_config({"scale": "tiny", "overrides": ["nosuch:train.total_steps=1"]}, PAPERS)


def test_an_override_of_the_wrong_type_is_refused_when_composed():
    cfg = compose_job_config(PAPERS[0], "smoke")
    key = next(k for k, v in cfg["resources"]["train"].items() if isinstance(v, int) and not isinstance(v, bool))
    with pytest.raises(ConfigError, match=rf"override 'resources.train.{key}=abc' gives a string where "
                                          rf"'resources.train.{key}' is an integer"):
        compose_job_config(PAPERS[0], "smoke", (f"resources.train.{key}=abc",))
    assert compose_job_config(PAPERS[0], "smoke", (f"resources.train.{key}=7",))["resources"]["train"][key] == 7


def test_a_claim_whose_test_is_not_valid_at_the_seed_count_is_refused_with_one_line():
    from iclr26.core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        compose_job_config("scorer", "tiny", (), [0, 1, 2])  # its claims use bootstrap_iqm: valid from 8 seeds
    message = str(err.value)
    assert "\n" not in message and message.startswith("paper scorer: claim '")
    assert "test 'bootstrap_iqm' is valid from 8 seeds, the config gives 3; allowed at 3 seeds: paired_t" in message
    assert compose_job_config("scorer", "smoke")["seeds"] == [0, 1]  # smoke is not refused: its claims are untestable


def test_a_data_stage_reading_an_undeclared_section_is_one_clear_error():
    """acquire/prepare see only `data`, the job keys and their paper's data_reads: reading another
    section would leave it out of their rerun trigger, so it is refused by name."""
    from iclr26.core.config import stage_config

    cfg = {"slug": "p", "scale": "tiny", "data": {"d": 1}, "train": {"lr": 1.0}, "model": {"w": 2}}
    view = stage_config(cfg, "prepare", data_reads=("model",))
    assert view["data"] == {"d": 1} and view["model"] == {"w": 2}
    for read in (lambda: view["train"], lambda: view.get("train"), lambda: "train" in view):
        with pytest.raises(ConfigError, match=r"stage prepare of paper p reads config key 'train', which it does "
                                              r"not declare: add it to the paper's data_reads"):
            read()
    assert stage_config(cfg, "train") is cfg


def test_a_malformed_fault_spec_is_one_clear_error():
    from iclr26.core import faults

    with pytest.raises(ValueError, match=r"ICLR26_FAULT='train:nowhere:1': expected <stage>:<unit\|checkpoint"):
        faults.parse("train:nowhere:1")


def test_a_retry_doubles_runtime_up_to_the_partitions_limit():
    """Full scale: each retry doubles memory and runtime, runtime capped at cluster.max_runtime_min
    (an 8,640-minute third attempt would never be scheduled); GPU jobs go to the GPU partition."""
    from iclr26.core.config import job_resource, retry_scaled

    assert [retry_scaled(1440, a, 2880) for a in (1, 2, 3)] == [1440, 2880, 2880]
    assert [retry_scaled(1440, a) for a in (1, 2, 3)] == [1440, 2880, 5760]  # no limit (tiny, smoke)
    paper = all_papers()["scorer"]
    cfg = compose_job_config("scorer", "full")
    limit = cfg["cluster"]["max_runtime_min"]
    assert limit and cfg["resources"]["train"]["runtime"] <= limit
    runtimes = [job_resource(paper, cfg, "train", "runtime", a) for a in (1, 2, 3)]
    assert max(runtimes) == limit and runtimes == sorted(runtimes)
    assert [job_resource(paper, cfg, "train", "mem_mb", a) for a in (1, 2)] == [cfg["resources"]["train"]["mem_mb"],
                                                                               2 * cfg["resources"]["train"]["mem_mb"]]
    assert job_resource(paper, cfg, "train", "gpus") >= 1
    assert job_resource(paper, cfg, "train", "partition") == cfg["cluster"]["gpu_partition"]
    assert job_resource(paper, cfg, "acquire", "gpus") == 0
    assert job_resource(paper, cfg, "acquire", "partition") == cfg["cluster"]["cpu_partition"]
    tiny = compose_job_config("scorer", "tiny")
    assert job_resource(paper, tiny, "train", "runtime", 3) == 4 * tiny["resources"]["train"]["runtime"]


def test_a_training_free_method_has_no_train_job():
    from iclr26.core.config import workflow_jobs

    for slug, paper in all_papers().items():
        jobs = workflow_jobs(paper, compose_job_config(slug, "smoke"))
        trained = {j["method"] for j in jobs if j["stage"] == "train"}
        evaluated = {j["method"] for j in jobs if j["stage"] == "evaluate"}
        assert evaluated == set(paper.methods) and trained == evaluated - set(paper.training_free), slug
    assert "original" in all_papers()["rebalance"].training_free
    with pytest.raises(ValueError, match="training_free names unknown method"):
        from dataclasses import replace

        replace(all_papers()["rebalance"], training_free=("nosuch",))


def test_run_methods_schedules_only_those_methods_and_a_wrong_name_is_one_line():
    from iclr26.core.config import workflow_jobs

    paper = all_papers()["evolprover"]
    tiny = compose_job_config("evolprover", "tiny")
    assert {j["method"] for j in workflow_jobs(paper, tiny) if "method" in j} == set(tiny["run_methods"])
    assert set(tiny["run_methods"]) < set(paper.methods)  # a real subset: the other methods get no job
    with pytest.raises(ConfigError, match=r"config key 'run_methods' = 'nosuch' is not allowed") as err:
        compose_job_config("evolprover", "tiny", ("run_methods=[seed_only,nosuch]",))
    assert "\n" not in str(err.value)


def test_a_gate_as_a_claims_test_is_refused_when_composed():
    """`every_seed` (every seed passes) is a gate, not inference: a claim's verdict may not rest on it."""
    import copy

    from iclr26.core.contract import check_job_config
    from iclr26.core.errors import ConfigError
    from iclr26.core.paper import get_paper

    cfg = copy.deepcopy(compose_job_config("scorer", "smoke"))
    cfg["claims"][0]["test"] = "every_seed"
    cfg["claims"][0].pop("kind", None)
    with pytest.raises(ConfigError, match=r"^paper scorer: claim '\S+': test 'every_seed' is a gate"):
        check_job_config(get_paper("scorer"), cfg)
    cfg["claims"][0]["kind"] = "check"
    check_job_config(get_paper("scorer"), cfg)


def _contract_error(slug: str, edit) -> str:
    """The one-line error the contract gives a paper's tiny config after `edit(cfg)`."""
    import copy

    from iclr26.core.contract import check_job_config
    from iclr26.core.paper import get_paper

    cfg = copy.deepcopy(compose_job_config(slug, "tiny"))
    edit(cfg)
    with pytest.raises(ConfigError) as err:
        check_job_config(get_paper(slug), cfg)
    assert "\n" not in str(err.value)
    return str(err.value)


def _claim(cfg, claim_id):
    return next(c for c in cfg["claims"] if c["id"] == claim_id)


def test_a_precondition_on_the_claims_own_method_is_refused():
    """Issue 27: a gate on the method's own outcome censors its verdict in one direction."""
    def gate_on_own(cfg):
        claim = _claim(cfg, "terrafm_beats_random")
        claim["precondition"] = {"metric": "oa", "where": {"modality": "s2", "labels": "full"}, "method": "dual_center",
                                 "value": 0.5, "direction": "higher", "test": "paired_t"}
    assert _contract_error("terrafm", gate_on_own) == (
        "paper terrafm: claim 'terrafm_beats_random': its precondition reads the claim's own method 'dual_center'; "
        "a precondition tests the setup (a baseline, a control, the base model or the data), never the method "
        "under test (a fact of the setup that the records file under that method, e.g. the test set's make-up, "
        "says so in precondition.setup)")

    def empty_setup(cfg):
        _claim(cfg, "rebalance_improves_accuracy")["precondition"]["setup"] = " "
    assert "precondition.setup' must say in words" in _contract_error("rebalance", empty_setup)


def test_a_t_test_on_an_indicator_and_an_undeclared_tolerance_range_are_refused():
    def t_on_indicator(cfg):
        _claim(cfg, "dual_center_trains")["test"] = "t"
    assert "'trained', a 0/1 indicator per seed" in _contract_error("terrafm", t_on_indicator)

    def no_range(cfg):
        cfg["metric_range"].pop("accuracy")
    assert "add metric_range: {accuracy: [floor, ceiling]}" in _contract_error("step_entropy", no_range)

    def bad_range(cfg):
        cfg["metric_range"]["accuracy"] = [1, 0]
    assert "'metric_range.accuracy' = [1, 0] is not allowed" in _contract_error("step_entropy", bad_range)


@pytest.mark.parametrize("margin,message", [
    ({"value": 0.02}, "is not allowed; allowed: {value: <a positive number"),
    ({"value": -0.1, "why": "x"}, "is not allowed"),
    ({"value": 0.1, "why": ""}, "is not allowed"),
])
def test_a_margin_is_a_positive_number_with_its_reason(margin, message):
    def edit(cfg):
        _claim(cfg, "low_entropy_beats_random_at_0.8")["margin"] = margin
    assert message in _contract_error("step_entropy", edit)


def test_no_margin_is_a_reason_and_never_beside_a_margin():
    def empty(cfg):
        _claim(cfg, "low_entropy_beats_random_at_0.8")["no_margin"] = " "
    assert "no_margin' = ' ' is not allowed; allowed: a sentence" in _contract_error("step_entropy", empty)

    def both(cfg):
        _claim(cfg, "low_entropy_beats_random_at_0.8")["margin"] = {"value": 0.02, "why": "x"}
    assert "the claim also says it has none (no_margin:" in _contract_error("step_entropy", both)


def test_a_margin_on_a_tolerance_claim_is_refused():
    def edit(cfg):
        _claim(cfg, "sft_low_entropy_keeps_accuracy")["margin"] = {"value": 0.02, "why": "x"}
    assert "a tolerance claim already says what difference matters" in _contract_error("step_entropy", edit)


def test_a_presentation_change_reruns_tabulate_and_nothing_upstream():
    """A changed table title or claim changes tabulate's digest (its Snakemake params) but no job's
    view: the audit's K16 found a presentation edit rerunning nothing at all."""
    import copy

    from iclr26.core.config import tabulate_digest, view_digest

    cfg = compose_job_config("scorer", "smoke")
    edited = copy.deepcopy(cfg)
    edited["table"]["title"] += " (edited)"
    judged = copy.deepcopy(cfg)
    judged["claims"][0]["margin"] = {"value": 1.0, "why": "x"}
    scheduled = copy.deepcopy(cfg)
    scheduled["resources"] = {"train": {"cpus": 7}}
    assert view_digest(edited, "code") == view_digest(cfg, "code") == view_digest(judged, "code")
    assert len({tabulate_digest(c, "code") for c in (cfg, edited, judged)}) == 3
    assert tabulate_digest(scheduled, "code") == tabulate_digest(cfg, "code")
    assert tabulate_digest(cfg, "other code") != tabulate_digest(cfg, "code")
