"""The full-scale training recipe (core.lm.train) on the CPU: sharded over 2 gloo processes under
`accelerate launch` it gives the losses of one process; LoRA trains only the adapters, which are
saved alone and load back onto the base model; bf16-mixed keeps fp32 optimizer state."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch

from conftest import REPO, venv_env

sys.path.insert(0, str(REPO / "tests" / "core"))
import _train_worker as worker  # noqa: E402

BASE = {"steps": 4, "batch_size": 8, "micro_batch_size": 2, "lr": 3e-3, "warmup": 2, "optimizer": "adamw",
        "precision": "fp32", "max_length": 12, "activation_checkpointing": True}
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    directory = tmp_path_factory.mktemp("tiny_qwen2")
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    return directory


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    yield
    from accelerate.state import AcceleratorState

    from iclr26.core.lm import generate

    AcceleratorState._reset_state(True)
    generate.resume_in(None)      # load_model turned generation checkpoints on


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sharded_two_processes_match_one(tiny_dir, tmp_path):
    sharded = {"zero2": {**BASE, "sharding": "zero2", "lora": None},
               "fsdp": {**BASE, "sharding": "fsdp", "lora": None},
               "zero2_lora": {**BASE, "sharding": "zero2", "lora": LORA},
               # 07's full-scale recipe, scaled down: bf16 compute, fp32 adapters, dropout, linear decay
               "recipe": {**BASE, "sharding": "zero2", "precision": "bf16-mixed", "schedule": "linear", "warmup": 0,
                          "lora": {**LORA, "dropout": 0.1}}}
    out = tmp_path / "losses.json"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--main_process_port", str(_free_port()), "--mixed_precision", "no",
           "--dynamo_backend", "no", str(REPO / "tests" / "core" / "_train_worker.py"), str(tiny_dir),
           json.dumps(sharded), str(out), str(tmp_path / "saved")]
    proc = subprocess.run(cmd, env={**venv_env(), "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads(out.read_text())
    models = {}
    one = worker.run(str(tiny_dir), {"full": {**BASE, "sharding": "none", "lora": None},
                                     "lora": {**BASE, "sharding": "none", "lora": LORA}}, models=models)
    assert one["full"][-1] < one["full"][0]                    # it learns
    for name, ref in (("zero2", "full"), ("fsdp", "full"), ("zero2_lora", "lora")):
        assert two[name] == pytest.approx(one[ref], rel=1e-4, abs=1e-5), name
    assert one["lora"] != pytest.approx(one["full"], rel=1e-3)  # LoRA is a different update
    assert all(0 < loss < 10 for loss in two["recipe"]) and two["recipe"] != pytest.approx(two["zero2_lora"])

    # what the sharded job saved (gathered from the shards) is the one-process model
    from transformers import AutoModelForCausalLM

    from iclr26.core.lm.train import load_adapters

    ids = torch.tensor([worker.examples()[0][0]])
    saved_full = AutoModelForCausalLM.from_pretrained(tmp_path / "saved" / "fsdp")
    saved_lora = load_adapters(AutoModelForCausalLM.from_pretrained(tiny_dir), tmp_path / "saved" / "zero2_lora")
    for name in ("zero2_lora", "recipe"):   # adapters only
        assert {p.name for p in (tmp_path / "saved" / name).iterdir()} >= {"adapter_config.json",
                                                                            "adapter_model.safetensors"}
        assert not (tmp_path / "saved" / name / "model.safetensors").exists()
    with torch.no_grad():
        for saved, ref in ((saved_full, "full"), (saved_lora, "lora")):
            assert torch.allclose(saved(input_ids=ids).logits, models[ref](input_ids=ids).logits, atol=1e-4), ref


def test_lora_trains_adapters_only_and_saves_them(tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from iclr26.core.lm.train import load_adapters, save_trained, train_recipe

    seqs, starts = worker.examples()
    before = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    model, losses = train_recipe(AutoModelForCausalLM.from_pretrained(tiny_dir), seqs, starts, 0,
                                 {**BASE, "steps": 6, "sharding": "none", "lora": LORA}, seed=0)
    assert losses[-1] < losses[0]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    base = model.get_base_model().state_dict()
    for name, value in before.items():   # every base weight unchanged (peft names them base_layer)
        stem, _, leaf = name.rpartition(".")
        key = name if name in base else f"{stem}.base_layer.{leaf}"
        assert torch.equal(base[key], value), name
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)  # B starts at 0

    save_trained(model, tmp_path / "sft")
    files = {p.name for p in (tmp_path / "sft").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
    merged = load_adapters(AutoModelForCausalLM.from_pretrained(tiny_dir), tmp_path / "sft")
    ids = torch.tensor([seqs[0]])
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(merged(input_ids=ids).logits,
                                  AutoModelForCausalLM.from_pretrained(tiny_dir)(input_ids=ids).logits, atol=1e-4)


def test_bf16_mixed_keeps_fp32_optimizer_state(tiny_dir):
    from transformers import AutoModelForCausalLM

    from iclr26.core.lm.train import train_recipe

    seqs, starts = worker.examples()
    model, losses = train_recipe(AutoModelForCausalLM.from_pretrained(tiny_dir), seqs, starts, 0,
                                 {**BASE, "steps": 2, "precision": "bf16-mixed", "sharding": "none", "lora": LORA},
                                 seed=0)
    params = dict(model.named_parameters())
    assert all(p.dtype == torch.float32 for n, p in params.items() if p.requires_grad)   # master + moments fp32
    assert all(p.dtype == torch.bfloat16 for n, p in params.items() if not p.requires_grad)  # frozen base bf16
    assert all(torch.isfinite(torch.tensor(losses)))


def test_truncation_keeps_the_prompt():
    from iclr26.core.lm.train import truncate

    assert truncate(list(range(10)), 3, 6) == (list(range(6)), 3)
    assert truncate(list(range(10)), 8, 6) == (list(range(6)), 6)
    assert truncate(list(range(4)), 2, 6) == (list(range(4)), 2)


def test_a_lora_finetune_saves_and_loads_through_the_stage_helpers(hub_model_dir, workdir):
    """core.lm.stages: save_finetuned writes a LoRA model's adapters and tokenizer; load_model
    (finetuned=) puts them back on model.source, merged."""
    from types import SimpleNamespace

    from iclr26.core.lm.stages import load_model, save_finetuned
    from iclr26.core.lm.train import train_recipe

    job = SimpleNamespace(cfg={"model": {"source": str(hub_model_dir)}, "format": {"kind": "chat"}, "device": "cpu"},
                          out_dir=workdir / "out")
    model, fmt = load_model(job, 0)
    examples = [fmt.training_example(f"What is {a} + 2?", f"Let me compute {a} + 2 = {a + 2}.", str(a + 2))
                for a in range(6)]
    trained, _ = train_recipe(model, [e[0] for e in examples], [e[1] for e in examples], fmt.tokenizer.pad_token_id,
                              {**BASE, "max_length": 64, "sharding": "none", "lora": LORA}, seed=0)
    save_finetuned(trained, fmt.tokenizer, workdir / "sft_s0")
    assert (workdir / "sft_s0" / "adapter_config.json").exists() and (workdir / "sft_s0" / "tokenizer").is_dir()
    loaded, loaded_fmt = load_model(job, 0, finetuned=workdir / "sft_s0")
    ids = torch.tensor([examples[0][0]])
    assert not hasattr(loaded, "peft_config")                 # merged: a plain transformers model again
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, trained(input_ids=ids).logits, atol=1e-4)
    assert loaded_fmt.prompt_ids("Q") == fmt.prompt_ids("Q")
