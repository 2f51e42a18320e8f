"""Full-scale generation is resumable: each generation batch is a checkpoint, and a job killed
midway (its runtime limit) resumes at the first unsaved batch with the same random stream, so it
ends with the output of an uninterrupted run; load_model turns this on for pretrained models."""
import pytest
import torch

from iclr26.core.lm import generate as generation
from iclr26.core.lm.formats import make_format
from iclr26.core.lm.model import build_model
from iclr26.core.lm.tokenizer import load_tokenizer


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def lm(hub_model_dir):
    tok = load_tokenizer(hub_model_dir)
    model = build_model({"source": str(hub_model_dir)}, tok, device="cpu").eval()
    prompts = [make_format({"kind": "chat"}, tok).prompt_ids(f"What is {a} + 1?") for a in range(5)]
    return model, tok, prompts


@pytest.fixture(autouse=True)
def resume_off():
    yield
    generation.resume_in(None)


def _sample(model, tok, prompts, **kwargs):
    return generation.generate(model, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6,
                               temperature=1.0, top_p=0.95, seed=3, batch_size=2, **kwargs)


def test_a_killed_generation_resumes_at_the_next_batch_with_the_same_output(lm, tmp_path):
    model, tok, prompts = lm
    reference = _sample(model, tok, prompts)                  # no checkpoints (tiny scale)
    generation.resume_in(tmp_path / "generation")
    seen = []

    def kill_in_second_batch(rows, last, out):
        seen.append(rows[0])
        if rows[0] == 2:
            raise Killed

    with pytest.raises(Killed):
        _sample(model, tok, prompts, before_token=kill_in_second_batch)
    saved = sorted(p.name for p in (tmp_path / "generation").rglob("chunk_*.pt"))
    assert saved == ["chunk_0000000.pt"]                     # the first batch of 3 was saved, the second not
    seen.clear()
    resumed = _sample(model, tok, prompts, before_token=lambda rows, last, out: seen.append(rows[0]))
    assert 0 not in seen and {2, 4} <= set(seen)             # the saved batch was not generated again
    assert len(list((tmp_path / "generation").rglob("chunk_*.pt"))) == 3
    for name in generation.FIELDS:
        assert getattr(resumed, name) == getattr(reference, name), name


def test_other_settings_do_not_reuse_saved_batches(lm, tmp_path):
    """Another seed, other weights at the same path, or another resume_key (e.g. steering) is
    another generation."""
    model, tok, prompts = lm
    generation.resume_in(tmp_path / "generation")
    first = _sample(model, tok, prompts)
    other_seed = generation.generate(model, prompts, tok.pad_token_id, tok.eos_token_id, max_new_tokens=6,
                                     temperature=1.0, top_p=0.95, seed=4, batch_size=2)
    assert len({p.parent for p in (tmp_path / "generation").rglob("chunk_*.pt")}) == 2
    assert other_seed.tokens != first.tokens
    assert _sample(model, tok, prompts).tokens == first.tokens   # read back
    other_weights = type(model).from_pretrained(model.config._name_or_path).eval()   # same path, other weights
    with torch.no_grad():
        other_weights.lm_head.weight.mul_(1.5)
    _sample(other_weights, tok, prompts)
    assert len({p.parent for p in (tmp_path / "generation").rglob("chunk_*.pt")}) == 3
    _sample(model, tok, prompts, resume_key=["static_steering", 0.5, {"vector": torch.ones(3)}])
    _sample(model, tok, prompts, resume_key=["static_steering", 1.0, {"vector": torch.ones(3)}])
    assert len({p.parent for p in (tmp_path / "generation").rglob("chunk_*.pt")}) == 5


def test_load_model_turns_checkpoints_on_for_a_pretrained_model_only(hub_model_dir, workdir):
    from types import SimpleNamespace

    from iclr26.core.lm.stages import load_model

    job = SimpleNamespace(cfg={"model": {"source": str(hub_model_dir)}, "format": {"kind": "chat"}, "device": "cpu"},
                          out_dir=workdir / "out")
    load_model(job, 0)
    assert generation._RESUME_DIR == workdir / "out" / "generation" / "any"
    job.config_digest = "0123456789abcdef0123"
    load_model(job, 0)
    assert generation._RESUME_DIR == workdir / "out" / "generation" / "0123456789abcdef"
    job.cfg["model"]["resume_generation"] = False
    load_model(job, 0)
    assert generation._RESUME_DIR is None


def test_a_logits_wrapper_with_the_same_weights_is_another_generation(lm, tmp_path):
    """A wrapper that changes the logits (a decoding grammar) shares the model's weights; its class and
    its `resume_key` keep it from reading the plain model's saved batches, or another setting's."""
    model, tok, prompts = lm

    class Banned:
        def __init__(self, inner, token):
            self.inner, self.config, self.device, self.resume_key = inner, inner.config, inner.device, ("ban", token)
            self.token = token

        def parameters(self):
            return self.inner.parameters()

        def __call__(self, **kw):
            out = self.inner(**kw)
            out.logits[..., self.token] = -1e30
            return out

    generation.resume_in(tmp_path / "generation")
    plain = _sample(model, tok, prompts)
    favourite = max((t for row in plain.tokens for t in row), key=[t for row in plain.tokens for t in row].count)
    banned = _sample(Banned(model, favourite), tok, prompts)
    assert all(favourite not in row for row in banned.tokens)
    _sample(Banned(model, favourite + 1), tok, prompts)
    assert len({p.parent for p in (tmp_path / "generation").rglob("chunk_*.pt")}) == 3


def test_the_saved_batches_folder_is_off_again_when_the_job_ends(tmp_path):
    """A stage that turned resuming on (load_model at full scale) leaves it off for the next job run in
    the same process: core.job ends every stage with the resets registered during it."""
    from iclr26.core import job

    generation.resume_in(tmp_path / "generation")
    assert generation._RESUME_DIR == (tmp_path / "generation").resolve()
    job._end_job()
    assert generation._RESUME_DIR is None
