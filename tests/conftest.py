import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The golden records (tests/golden) hold float32 results to rtol 1e-5. BLAS and torch pick their kernels
# by CPU (an AVX-512 machine rounds matmuls differently from an AVX2 one): importing iclr26 pins every
# library's AVX2 code path before numpy or torch loads, in the tests as in every job.
import iclr26  # noqa: E402, F401


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run pipeline stages inside a fresh directory (they write data/, runs/, results/ there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """smoke_run(slug) -> (folder, eval files in run_paper's job order): one finished smoke run of
    the paper (data/, runs/) and its tabulated folder/results/<slug>/. Made once per session: the
    contract test checks it and the report test renders it, so no paper runs its smoke stages
    twice for the same outputs."""
    from iclr26.core.job import run_paper
    from iclr26.core.tabulate import tabulate_paper

    made: dict[str, tuple[Path, list[Path]]] = {}

    def get(slug: str) -> tuple[Path, list[Path]]:
        if slug not in made:
            folder = tmp_path_factory.mktemp(f"smoke-{slug}")
            previous = os.getcwd()
            os.chdir(folder)
            try:
                evals = [folder / e for e in run_paper(slug, "smoke")]
                tabulate_paper(slug, "smoke", (), None, evals, folder / "results" / slug)
            finally:
                os.chdir(previous)
            made[slug] = folder, evals
        return made[slug]

    return get


def project_files():
    """The project's files: tracked and new, not ignored (no data/, runs/, results/, .venv)."""
    import subprocess

    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def copy_checkout(parent: Path) -> Path:
    """A fresh clone of the working tree (tracked + new files, no data/runs/results), as its own
    git repo, so workflow tests never touch the real results nor read a developer's edits of
    untracked outputs."""
    import shutil
    import subprocess

    dest = parent / "repo"
    for rel in project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "snapshot"], cwd=dest, check=True)
    return dest


@pytest.fixture
def checkout(tmp_path):
    return copy_checkout(tmp_path)


def venv_env():
    """Environment for subprocesses: this interpreter's bin first on PATH (snakemake, dvc, python)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env["PATH"]))
    env.pop("PYTHONPATH", None)
    return env


# --------------------------------------------------------------------------- a hub-like reasoning LM
HUB_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}")
HUB_CORPUS = [
    "Let me compute 3 + 4 = 7.\n\nWait, check again: 3 + 4 = 7.\n\nSo the answer is \\boxed{7}.",
    "We need x such that 2x = 1.\n\nHmm, x = \\frac{1}{2}.\n\nAlternatively, x = 0.5.\n\n\\boxed{\\frac{1}{2}}",
    "The final answer is $\\boxed{12}$. Please reason step by step.\n\nFirst, 5 + 7 = 12.\n\n",
]


@pytest.fixture(scope="session")
def hub_model_dir(tmp_path_factory):
    """A directory laid out like a hub reasoning model (DeepSeek-R1-Distill-style byte-level BPE
    tokenizer with a chat template that opens <think>, and a Qwen2 model), written with
    save_pretrained: the full-scale code path loads it exactly as it would load a hub id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    special = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
               "<think>", "</think>", "<pad>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(HUB_CORPUS * 20, trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=special[0], eos_token=special[1],
                                  pad_token="<pad>", additional_special_tokens=special[2:6])
    tok.chat_template = HUB_CHAT_TEMPLATE
    directory = tmp_path_factory.mktemp("hub_model")
    tok.save_pretrained(directory)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    import torch

    from iclr26.core.lm.formats import make_format
    from iclr26.core.lm.model import train_lm

    # a few hundred steps on formatted traces, so that it writes blank-line steps, closes </think>
    # and boxes an answer: every part of the full-scale path then sees realistic output
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    system = "Please reason step by step, and put your final answer within \\boxed{}."   # ReBalance's prompt
    examples = [fmt.training_example(f"What is {a} + {b}?", f"Let me compute {a} + {b} = {a + b}.\n\n"
                                     f"Wait, check again: {a} + {b} = {a + b}.\n\nSo the answer is {a + b}.",
                                     str(a + b))
                for fmt in (make_format({"kind": "chat"}, tok), make_format({"kind": "chat", "system": system}, tok))
                for a in range(4) for b in range(4)]
    train_lm(model, [e[0] for e in examples], [e[1] for e in examples], tok.pad_token_id, steps=150,
             batch_size=16, lr=1e-2, seed=0)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def hub_dataset_dir(tmp_path_factory):
    """Benchmark files in the hub datasets' layouts: MATH-500's test.jsonl and DeepScaleR's json."""
    import json

    directory = tmp_path_factory.mktemp("hub_data")
    math500 = [{"problem": f"What is {a} + {b}?", "solution": f"{a} + {b} = {a + b}", "answer": str(a + b),
                "subject": "Algebra", "level": 1, "unique_id": f"test/{a}{b}.json"} for a in range(3) for b in range(3)]
    (directory / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math500))
    deepscaler = [{"problem": f"Compute {a} times 2.", "answer": str(2 * a), "solution": "..."} for a in range(12)]
    (directory / "deepscaler.json").write_text(json.dumps(deepscaler))
    return directory


@pytest.fixture
def static_server(tmp_path):
    """A loopback HTTP server over a fresh folder: (folder, base URL)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    root = tmp_path / "served"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def tiny_qwen25_vl(folder, text: str, max_positions: int = 4096):
    """A Qwen2.5-VL (real classes, a few thousand parameters) with a byte-level BPE tokenizer trained on
    `text` and carrying Qwen's special tokens, written with save_pretrained: a full-scale code path loads
    it exactly as it would load the hub snapshot (the VLM papers' offline tests)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
               "<|image_pad|>", "<|video_pad|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator([text] * 20,
                             trainers.BpeTrainer(vocab_size=300, special_tokens=special,
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=special[1:])
    proc = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                               video_processor=Qwen2VLVideoProcessor())
    ids = {k: tok.convert_tokens_to_ids(k) for k in special}
    cfg = Qwen2_5_VLConfig(
        text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "vocab_size": len(tok), "max_position_embeddings": max_positions,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 32,
                       "fullatt_block_indexes": [1], "window_size": 56},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(cfg).save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


# Tests run stages in temporary folders (the workdir / smoke_run fixtures); one that forgets (or state
# that outlives its test) would write into the checkout's data/ or runs/, where a later run of the
# pipeline could read it. The session fails then, naming the files.
_SMOKE_OUTPUTS = [REPO / "data", REPO / "runs", REPO / "results" / "smoke"]


def _smoke_files() -> set[Path]:
    return {p for root in _SMOKE_OUTPUTS if root.exists() for p in root.rglob("*")}


def pytest_sessionstart(session):
    session.config._smoke_files_before = _smoke_files()


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_smoke_files_before", set())
    new = sorted(_smoke_files() - before)
    if new:
        print(f"\nA test wrote pipeline outputs into the checkout (run it in the workdir fixture): "
              f"{', '.join(str(p.relative_to(REPO)) for p in new[:5])}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Each paper may add at most 20 s to the suite (issue rules): the summary sums, per paper, its own
# test file and every parametrized test run for it ([slug] in the test id), setup and teardown included.
PAPER_BUDGET_S = 20.0
_paper_seconds: dict[str, float] = {}


# platform tests that run some paper as their vehicle: their time is the platform's, not the paper's
PLATFORM_TESTS = {"test_distributed", "test_faults", "test_shards", "test_sigterm", "test_slurm", "test_workflow"}


def _paper_of(nodeid: str, slugs: set[str]) -> str | None:
    stem = Path(nodeid.split("::")[0]).stem.removeprefix("test_")
    if "test_" + stem in PLATFORM_TESTS:
        return None
    if nodeid.startswith("tests/papers/") and stem in slugs:
        return stem
    params = nodeid.partition("[")[2].rstrip("]")
    return next((s for s in slugs if params == s or params.startswith(s + "-") or params.endswith("-" + s)), None)


def pytest_runtest_logreport(report):
    from iclr26.core.paper import all_papers

    paper = _paper_of(report.nodeid, set(all_papers()))
    if paper:
        _paper_seconds[paper] = _paper_seconds.get(paper, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _paper_seconds:
        return
    over = {p: s for p, s in _paper_seconds.items() if s > PAPER_BUDGET_S}
    terminalreporter.section(f"seconds per paper (budget {PAPER_BUDGET_S:.0f} s; over: {len(over)})")
    for paper, seconds in sorted(_paper_seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:7.1f}  {paper}{'  OVER' if paper in over else ''}")


# pytest-xdist runs the suite on two workers (pyproject: -n 2 --dist loadgroup). Tests that share a
# session fixture or one external resource stay on one worker: the contract and report tests share
# the 19 smoke runs (smoke_run, made once per worker), the Slurm tests the one local cluster.
GROUPS = {"test_contract.py": "smoke_runs", "test_report.py": "smoke_runs", "test_slurm.py": "slurm"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = GROUPS.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
