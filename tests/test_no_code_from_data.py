"""No file the pipeline reads may run code (issue 26; audit 2026-12-02, H8 and H9).

Payloads planted where the pipeline used to unpickle them: a genuine scorer checkpoint with a
pickle in its env state (the old code pickle.loads'ed `state["env"]["pickled_env"]`), a saved
generation batch that is a pickled object (the old code torch.load'ed it with weights_only=False),
and a PANNs checkpoint and a CIFAR-10 batch whose pins match them (both were unpickled in full
once the pin matched). Each payload is an object whose `__reduce__` opens a marker file for
writing: unpickling it creates the file, so the marker says whether code from the file ran.
Then a check of the whole source tree (src/, scripts/, workflow/, Snakefile) for every call that
would run code from what it reads, and of the configs for remote model code.
"""
from __future__ import annotations

import copy
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch


class Payload:
    """Unpickled, this calls open(marker, "w"): the file appears (nothing else is done)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


# ----------------------------------------------------------------------------- scorer checkpoint
SCORER = ("data.headline.impl=sync",   # gymnasium's SyncVectorEnv: what full scale (MinAtar) checkpoints
          "train.total_steps=300", "train.checkpoint_every=50")   # 150 vector steps per env: seconds


def _scorer_records(overrides):
    from iclr26.core.job import load_records, run_paper

    return sorted(load_records(run_paper("scorer", "smoke", overrides, methods=["dqn"])),
                  key=lambda r: (r["env"], r["seed"]))


def test_a_pickle_planted_in_a_scorer_checkpoint_never_runs(tmp_path, monkeypatch, capsys):
    from iclr26.core import faults

    monkeypatch.chdir(tmp_path)
    with faults.armed("train", "checkpoint", after=1), pytest.raises(faults.InjectedFault):
        _scorer_records(SCORER)
    path = tmp_path / "runs/smoke/scorer/dqn/s0-1/checkpoint.pt"
    saved = torch.load(path, weights_only=True)
    assert saved["state"]["slot"] == "headline" and "pickled_env" not in saved["state"]["env"]
    # where the old code read the MinAtar env, a uint8 tensor of pickle bytes, as the audit planted it
    marker = tmp_path / "code-ran"
    saved["state"]["env"]["pickled_env"] = torch.frombuffer(bytearray(pickle.dumps(Payload(marker))),
                                                            dtype=torch.uint8)
    torch.save(saved, path)
    capsys.readouterr()

    resumed = _scorer_records(SCORER)
    assert not marker.exists()
    refusals = [line for line in capsys.readouterr().err.splitlines() if "refusing the checkpoint's env state" in line]
    assert len(refusals) == 1 and "pickled_env" in refusals[0], refusals
    # refused, the environment starts over: the run ends as one never interrupted (train again from
    # scratch on the same prepared data)
    shutil.rmtree(tmp_path / "runs/smoke/scorer/dqn")
    assert resumed == _scorer_records(SCORER)


@pytest.mark.parametrize("impl", ["native", "sync"])
def test_an_env_state_that_env_state_did_not_write_is_refused(impl, tmp_path):
    """At the env level, for smoke's own CartPole (native) and the SyncVectorEnv path: the old
    field, and plain-looking data that asks for an object array or another class, are refused."""
    import numpy as np

    from iclr26.papers.scorer import envs

    spec = {"env_id": "CartPole-v1", "impl": impl}
    env = envs.make_vec_env(spec, 2)
    env.reset(seed=0)
    good, marker = envs.env_state(env), tmp_path / "code-ran"
    planted = {**good, "pickled_env": np.frombuffer(pickle.dumps(Payload(marker)), dtype=np.uint8)}
    with pytest.raises(envs.EnvStateError, match="pickled_env"):
        envs.restore_env_state(envs.make_vec_env(spec, 2), planted)
    assert not marker.exists()
    if impl == "sync":   # CartPoleEnv, inside TimeLimit, OrderEnforcing and PassiveEnvChecker
        def cartpole(state):
            return state["envs"][0]["parts"]["env"]["parts"]["env"]["parts"]["env"]

        other_class, object_array = copy.deepcopy(good), copy.deepcopy(good)
        cartpole(other_class)["class"] = "os._wrap_close"
        cartpole(object_array)["attrs"]["state"]["dtype"] = "|O"
        for bad, why in ((other_class, "for 'os._wrap_close', not gymnasium"), (object_array, "dtype object")):
            with pytest.raises(envs.EnvStateError, match=why):
                envs.restore_env_state(envs.make_vec_env(spec, 2), bad)


# ----------------------------------------------------------------------------- generation batches
class TinyLM(torch.nn.Module):
    """A seeded bigram model with generate()'s call signature: the store needs a model, not a good one."""

    def __init__(self, vocab: int = 11):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)
        torch.nn.init.normal_(self.table.weight, generator=torch.Generator().manual_seed(0))
        self.device = torch.device("cpu")

    def forward(self, input_ids, cache=None, **_):
        return SimpleNamespace(logits=self.table(input_ids), cache=cache)


@pytest.fixture
def resume_off():
    from iclr26.core.lm import generate as generation

    yield generation
    generation.resume_in(None)


def test_a_pickled_object_planted_as_a_generation_batch_never_runs(tmp_path, resume_off, capsys):
    generation = resume_off
    model, prompts = TinyLM().eval(), [[1, 2], [3], [4, 5, 6], [7], [8, 9]]

    def sample():
        return generation.generate(model, prompts, pad_id=0, eos_id=10, max_new_tokens=5, temperature=1.0,
                                   seed=3, batch_size=2)

    reference = sample()   # no store (resume off)
    generation.resume_in(tmp_path / "generation")
    assert sample() == reference
    batches = sorted((tmp_path / "generation").rglob("chunk_*.pt"))
    assert [p.name for p in batches] == ["chunk_0000000.pt", "chunk_0000002.pt", "chunk_0000004.pt"]
    marker = tmp_path / "code-ran"
    torch.save(Payload(marker), batches[0])   # what the audit planted in the folder _ChunkStore.open computes
    capsys.readouterr()

    assert sample() == reference
    assert not marker.exists()
    refusals = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[generate] refusing")]
    assert len(refusals) == 1 and batches[0].name in refusals[0], refusals
    assert set(torch.load(batches[0], weights_only=True)) == {*generation.FIELDS, "rng"}   # written again


# ----------------------------------------------------------------------------- pinned downloads
# Both used to be unpickled in full once their pin matched; a pin says which bytes were expected,
# not that they are harmless, so here each payload comes with a pin that matches it.
def test_a_panns_checkpoint_with_an_object_is_refused_with_its_pin(tmp_path):
    import hashlib

    import numpy as np

    from iclr26.core.errors import DataError
    from iclr26.papers.dart.encoders import load_checkpoint

    path, marker = tmp_path / "ResNet38_mAP=0.434.pth", tmp_path / "code-ran"
    sampler = {"indexes_per_class": [np.arange(3)], "queue": [np.int64(2)], "pointers_of_classes": [0]}
    torch.save({"iteration": 0, "model": {"w": torch.ones(2)}, "sampler": sampler}, path)
    assert torch.equal(load_checkpoint(path, None)["w"], torch.ones(2))   # PANNs' numpy arrays still load
    torch.save({"iteration": 0, "model": {"w": torch.ones(2)}, "sampler": Payload(marker)}, path)
    with pytest.raises(DataError, match="holds objects other than tensors, numpy arrays and plain data"):
        load_checkpoint(path, hashlib.md5(path.read_bytes()).hexdigest())
    assert not marker.exists()


def test_a_cifar_batch_with_an_object_is_refused_with_its_pin(tmp_path):
    import io
    import tarfile

    from iclr26.core.errors import DataError
    from iclr26.core.io import sha256_file
    from iclr26.papers.conditioned_init import data

    archive, marker = tmp_path / "cifar-10-python.tar.gz", tmp_path / "code-ran"
    with tarfile.open(archive, "w:gz") as tar:
        blob = pickle.dumps({b"data": Payload(marker), b"labels": [0]}, protocol=4)
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(DataError, match=r"names [a-z_.]*open, which this reader does not build"):
        data.read_cifar10(archive, sha256_file(archive))
    assert not marker.exists()


# ----------------------------------------------------------------------------- the whole source tree
# Every file of the pipeline's code, checked with the ast module (comments, docstrings and strings
# never count). Snakemake files are first translated to Python by Snakemake's own parser.
REPO = Path(__file__).resolve().parents[1]

# Calls that run code from what they read, by their qualified name once imports are resolved
# (`import pickle as p; p.loads` is pickle.loads; `from pickle import load` is pickle.load).
UNPICKLERS = {f"{module}.{fn}" for module in ("pickle", "_pickle", "cPickle", "dill", "cloudpickle")
              for fn in ("load", "loads", "Unpickler")}   # an Unpickler is allowed only as a subclass with find_class
RUNS_CODE = {**{name: "unpickles (runs code from the file)" for name in UNPICKLERS},
             "joblib.load": "unpickles", "pandas.read_pickle": "unpickles", "shelve.open": "unpickles",
             "marshal.load": "loads code objects", "marshal.loads": "loads code objects",
             "torch.jit.load": "loads TorchScript code", "eval": "evaluates text as code",
             "exec": "runs text as code", "yaml.unsafe_load": "builds any Python object",
             "yaml.full_load": "builds Python objects", "yaml.unsafe_load_all": "builds any Python object",
             "yaml.full_load_all": "builds Python objects"}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
# trust_remote_code=True runs a model repository's Python: none does today, and each one added here
# must say why. (The project refuses remote code: evolprover's prover snapshot is rejected when its
# config.json has an auto_map, and Eagle2, which needs remote code, is not wired in encoder_redundancy.)
REMOTE_CODE_ALLOWED: dict[str, str] = {}   # "path/of/file.py" -> the reason


def _source_files() -> dict[str, str]:
    """path (relative to the repository) -> Python source, for src/, scripts/, workflow/ and Snakefile."""
    from snakemake.parser import parse

    files = {}
    for path in sorted([*(REPO / "src").rglob("*.py"), *(REPO / "scripts").rglob("*.py"),
                        *(REPO / "workflow").rglob("*.py")]):
        files[str(path.relative_to(REPO))] = path.read_text()
    for path in sorted([REPO / "Snakefile", *(REPO / "workflow").rglob("*.smk")]):
        where = SimpleNamespace(get_path_or_uri=lambda secret_free=True, p=path: str(p))
        workflow = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda source: open(source.get_path_or_uri())))
        files[str(path.relative_to(REPO))] = parse(where, workflow, {})[0]
    return files


def _aliases(nodes) -> dict[str, str]:
    """Local name -> what it was imported as, from every import of the file (function-level ones too)."""
    import ast

    names = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _qualified(node, aliases) -> str | None:
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _keyword(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_constant(node, value) -> bool:
    import ast

    return isinstance(node, ast.Constant) and node.value is value


def _safe_yaml_loader(node, assignments, aliases, safe=frozenset(SAFE_YAML_LOADERS)) -> bool:
    """The Loader is safe when every loader it names (attributes, names, strings such as
    getattr(yaml, "CSafeLoader", yaml.SafeLoader)) is a safe one; a name is followed to its assignment."""
    import ast

    if isinstance(node, ast.Name) and node.id in assignments:
        node = assignments[node.id]
    named = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            named.add(sub.attr)
        elif isinstance(sub, ast.Name):
            named.add(aliases.get(sub.id, sub.id).rsplit(".", 1)[-1])
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            named.add(sub.value)
    loaders = {n for n in named if n.endswith("Loader")}
    return bool(loaders) and loaders <= safe


def code_from_data(source: str) -> list[tuple[int, str]]:
    """(line, what) for each way `source` could run code from a file it reads."""
    import ast

    nodes = list(ast.walk(ast.parse(source)))   # walked once: three passes over a list are cheaper
    aliases = _aliases(nodes)
    assignments = {t.id: node.value for node in nodes if isinstance(node, ast.Assign)
                   for t in node.targets if isinstance(t, ast.Name)}
    # a loader class of the module itself that only extends safe loaders is safe (config's _UniqueKeyLoader)
    safe = set(SAFE_YAML_LOADERS) | {node.name for node in nodes if isinstance(node, ast.ClassDef) and node.bases
                                     and all(str(_qualified(b, aliases)).rsplit(".", 1)[-1] in SAFE_YAML_LOADERS
                                             for b in node.bases)}
    found = []
    for node in nodes:
        if isinstance(node, ast.ClassDef):
            unpickler = any(_qualified(base, aliases) in UNPICKLERS for base in node.bases)
            if unpickler and not any(isinstance(f, ast.FunctionDef) and f.name == "find_class" for f in node.body):
                found.append((node.lineno, f"class {node.name} is an Unpickler without find_class"))
        elif isinstance(node, ast.keyword) and node.arg == "trust_remote_code" and not _is_constant(node.value, False):
            found.append((node.value.lineno, "trust_remote_code not False"))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "trust_remote_code" \
                        and not _is_constant(value, False):
                    found.append((key.lineno, "trust_remote_code not False"))
        if not isinstance(node, ast.Call):
            continue
        name = _qualified(node.func, aliases)
        if name in RUNS_CODE:
            found.append((node.lineno, f"{name}: {RUNS_CODE[name]}"))
        elif name in ("torch.load", "torch.serialization.load") \
                and not _is_constant(_keyword(node, "weights_only"), True):
            found.append((node.lineno, f"{name} without weights_only=True"))
        elif name == "numpy.load":   # allow_pickle: the third argument, False unless given
            allow = _keyword(node, "allow_pickle") or (node.args[2] if len(node.args) > 2 else None)
            if allow is not None and not _is_constant(allow, False):
                found.append((node.lineno, "numpy.load with allow_pickle"))
        elif name in ("yaml.load", "yaml.load_all"):
            loader = _keyword(node, "Loader") or (node.args[1] if len(node.args) > 1 else None)
            if loader is None or not _safe_yaml_loader(loader, assignments, aliases, frozenset(safe)):
                found.append((node.lineno, f"{name} without a safe Loader"))
    return sorted(found)


@pytest.mark.parametrize("source, flagged", [
    ("import pickle\npickle.loads(b)", "pickle.loads"),
    ("import pickle as p\np.load(f)", "pickle.load"),
    ("from pickle import loads\nloads(b)", "pickle.loads"),
    ("import pickle\npickle.Unpickler(f).load()", "pickle.Unpickler"),
    ("import pickle\nclass U(pickle.Unpickler):\n    pass", "without find_class"),
    ("import torch\ntorch.load(p)", "weights_only"),
    ("import torch\ntorch.load(p, weights_only=False)", "weights_only"),
    ("import torch\ntorch.load(p, **kw)", "weights_only"),
    ("from torch import load\nload(p, weights_only=False)", "weights_only"),
    ("import numpy as np\nnp.load(p, allow_pickle=True)", "allow_pickle"),
    ("import numpy\nnumpy.load(p, None, True)", "allow_pickle"),
    ("import yaml\nyaml.load(s)", "safe Loader"),
    ("import yaml\nyaml.load(s, Loader=yaml.Loader)", "safe Loader"),
    ("import yaml\nL = getattr(yaml, 'CLoader', yaml.FullLoader)\nyaml.load(s, Loader=L)", "safe Loader"),
    ("import yaml\nyaml.unsafe_load(s)", "yaml.unsafe_load"),
    ("import yaml\nclass L(yaml.FullLoader):\n    pass\nyaml.load(s, Loader=L)", "safe Loader"),
    ("m.from_pretrained(p, trust_remote_code=True)", "trust_remote_code"),
    ("m.from_pretrained(p, trust_remote_code=flag)", "trust_remote_code"),
    ("m.from_pretrained(p, **{'trust_remote_code': True})", "trust_remote_code"),
    ("eval(text)", "eval"),
    # what the code does today, and text that only talks about the forbidden calls
    ("import torch\ntorch.load(p, map_location='cpu', weights_only=True)", None),
    ("import numpy as np\nnp.load(p)\nnp.load(p, allow_pickle=False)", None),
    ("import yaml\nL = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)\nyaml.load(s, Loader=L)", None),
    ("import yaml\nyaml.load(s, yaml.SafeLoader)\nyaml.safe_load(s)", None),
    ("import yaml\nclass UniqueKeyLoader(yaml.SafeLoader):\n    pass\nyaml.load(s, Loader=UniqueKeyLoader)", None),
    ("import pickle\nclass U(pickle.Unpickler):\n    def find_class(self, m, n):\n        raise KeyError", None),
    ("m.from_pretrained(p, trust_remote_code=False)\nmodel.eval()", None),
    ("# pickle.loads(b); torch.load(p, weights_only=False)\n'''yaml.load(s)'''\nx = 'eval(text)'", None),
])
def test_the_check_finds_each_way_and_only_those(source, flagged):
    found = code_from_data(source)
    if flagged is None:
        assert found == []
    else:
        assert len(found) == 1 and flagged in found[0][1], found


def test_no_file_of_the_code_reads_data_in_a_way_that_runs_code():
    files = _source_files()
    assert len(files) > 100 and "Snakefile" in files and "workflow/rules/common.smk" in files
    found = [f"{path}:{line}: {what}" for path, source in files.items() for line, what in code_from_data(source)
             if not (what.startswith("trust_remote_code") and path in REMOTE_CODE_ALLOWED)]
    assert not found, "\n".join(found)
    for path, reason in REMOTE_CODE_ALLOWED.items():   # an entry says why, and its file still needs it
        assert reason.strip() and any(w.startswith("trust_remote_code") for _, w in code_from_data(files[path]))


def test_no_config_turns_remote_code_on():
    """A config value reaches from_pretrained(**kwargs) without passing through the code above."""
    import yaml

    def walk(value, where):
        if isinstance(value, dict):
            for key, sub in value.items():
                if key == "trust_remote_code" and sub not in (False, None):
                    yield where
                yield from walk(sub, where)
        elif isinstance(value, list):
            for sub in value:
                yield from walk(sub, where)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when there: the same data, faster
    found = [hit for path in sorted((REPO / "config").rglob("*.yaml"))
             for hit in walk(yaml.load(path.read_text(), Loader=loader), str(path.relative_to(REPO)))]
    assert not found, found
