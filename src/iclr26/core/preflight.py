"""Full-scale preflight: `python -m iclr26 preflight --scale full [--papers P ...]`.

Composes every job the workflow would run (core.config.workflow_jobs: every paper, dataset,
method and seed block, with each job's resources as core.config.job_resource gives them to
Slurm) and prints one line per problem, before a GPU hour is spent; exit status 1 if any:

- **pins**: a hub model (`model.source` that is a hub id) or hub dataset file (`hub_id`) without a
  40-hex commit `revision`; a `url` without a 64-hex `sha256` (or a 32-hex `md5`); a package in requirements.txt or
  envs/*.yaml without an exact pin (`==`, or `=` for conda).
- **GPUs**: a stage whose code picks a device (reaches core.runtime.pick_device, by a static scan of
  the paper's and core's modules) under `device: cuda`, or a stage in the paper's `gpu_stages`, that
  gets no GPU; a job that requests GPUs while its code never picks a device (or the config says
  `device: cpu`); a train job with several GPUs whose paper is not `data_parallel` (they would idle).
- **envs**: a third-party package the stage's modules import that the rule's conda env lacks.
- **memory**: a train job whose estimated memory per GPU exceeds the GPU's (below).
- **runtime**: a job whose estimated runtime exceeds its runtime limit; a stage that checkpoints
  (its code calls `job.units` or `job.checkpointer`) resumes on a retry, so it passes when the
  estimate fits the sum of its attempts' runtimes (each retry doubles it, capped at the partition's
  limit `cluster.max_runtime_min`; attempts = 1 + the Slurm profile's `retries`), and says so.
  A job the config shards (`shards: {<stage>: N}`, core.job) is N shard jobs with the stage's
  resources, each doing 1/N of the estimated work (ceil(units / N) units when `units` is stated;
  each with its own `overhead_s`), plus the ordinary job that gathers; each shard must fit. A
  sharded stage whose code saves no units (job.units) is a problem (every shard would redo it all).
  A job too long says how many shards would each fit its first attempt when its stage can be sharded.

Then the plan: jobs per stage (shard jobs as <stage>_shard), GPU-hours requested (GPUs x runtime
of the first attempt, every shard job counted) and estimated (GPUs x estimated runtime: the whole
work, sharded or not), bytes to download (a `bytes:` or `size:` key beside a pinned source; a hub
model's estimated from its parameter count, and said so), and the memory estimate of every train job.

Runtime schema (per paper and scale; `estimate` is excluded from every result's digest):

    estimate:
      <stage>:                 # acquire | prepare | train | evaluate
        work: <number> | [<number>, ...]   # work of one job (a list: its product), x the seeds of
                               # the job's block when per: seed
        seconds: <number>      # instead of work and rate: seconds per job
        per: job | seed        # default job
        unit: <text>           # what is counted: tokens, env steps, optimizer steps ...
        rate: <number>         # units per second, for the whole job
        overhead_s: <number>   # fixed seconds per job (loading a model ...), default 0
        basis: <text>          # where the rate comes from: measured (where, how) or assumed
        units: <number>        # resumable pieces (job.units) of a job: each must fit in one attempt
        items: {<dataset or method>: {<any key above>}}   # what differs for one dataset or method

`work` may instead come from an `estimate_work(cfg, stage, job)` function of the paper's stage
module (job: {stage, dataset | method, seeds}; returns a number or None to use the config's).

Memory schema of a train job (read from the job config):

    model.arch: {hidden_size, num_hidden_layers, intermediate_size, vocab_size,
                 num_attention_heads, num_key_value_heads, tie_word_embeddings, gated_mlp}
                (or the same keys in model.config; or model.n_params alone: no activation term)
    train.precision: bf16-mixed | bf16 | fp32            (default fp32)
    train.optimizer: adamw | sgd                         (default adamw)
    train.lora: {r, alpha, target_modules} | null        (null: full-parameter)
    train.sharding: none | zero2 | fsdp                  (default none)
    train.activation_checkpointing: bool                 (default false)
    train.micro_batch_size (or train.batch_size), train.max_length
    resources.train.gpu_mem_gb (default cluster.gpu_mem_gb); resources.train.gpus = G
    estimate.train.memory: {arch, n_params, any train.* key above, extra_gb}: for a paper whose
        model and train sections do not use these names (the train section wins where both say);
        extra_gb: what the stage keeps on the GPU besides the model (e.g. replay buffers)

Per GPU, in bytes, with P parameters, T of them trained (T = P full-parameter; LoRA: r x (d_in +
d_out) per target module and layer), e = 2 bytes per activation in 16-bit, 4 in fp32:

    P from arch   = V h (2, or 1 if tied) + L (2 h^2 + 2 h kv h/a + 3 h i + 2 h) + h  (2 h i: plain MLP)
    weights       = P x (2 for bf16 / bf16-mixed, 4 for fp32)          [/G under fsdp]
    master        = T x 4 for bf16-mixed (fp32 master weights), else 0  [/G under zero2, fsdp]
    gradients     = T x (2, or 4 for fp32)                              [/G under zero2, fsdp]
    optimizer     = T x (adamw: 2 moments, sgd: 1) x (4 for bf16-mixed/fp32, 2 for bf16)
                                                                        [/G under zero2, fsdp]
    activations   = L x b x s x h x factor, factor = (9 + 2 i / h) x e  (34 bytes for i = 4h at 16-bit:
                    Korthikanti et al. 2022 with fused attention, no s^2 term); with activation
                    checkpointing L x b x s x h x e (each layer's input) + b x s x (9 h + 2 i) x e
                    (one layer recomputed)
    logits        = b x s x V x 4 x 2  (fp32 logits and their gradient)
    overhead      = 1 GiB (CUDA context, allocator) + estimate.train.extra_gb
"""
from __future__ import annotations

import ast
import functools
import math
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from .config import REPO_ROOT, compose_job_config, job_resource, read_yaml_file, split_overrides, workflow_jobs
from .contract import SHARD_STAGES
from .errors import ConfigError
from .job import shard_count
from .paper import Paper, all_papers, get_paper

SRC = REPO_ROOT / "src"
GB = 1e9
HEX40, HEX64 = re.compile(r"[0-9a-f]{40}"), re.compile(r"[0-9a-f]{64}")
HEX32 = re.compile(r"[0-9a-f]{32}")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
GPU_MARK = ("iclr26.core.runtime", "pick_device")  # the one place a job picks its device
# job.units / job.checkpointer / core.lm.generate.resume_in (every generation batch saved): the job resumes
CHECKPOINT_CALLS = ("units", "checkpointer", "resume_in")
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "PyYAML", "sklearn": "scikit-learn", "PIL": "pillow", "math_verify": "math-verify",
                 "hydra": "hydra-core", "minatar": "MinAtar", "ot": "POT"}


# ----------------------------------------------------------------------------- static code scan
def module_file(module: str) -> Path | None:
    where = SRC / Path(*module.split("."))
    for candidate in (where.with_suffix(".py"), where / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _base_of(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def imports(path: Path, module_level_only: bool) -> set[str]:
    """Absolute module names a file imports (relative imports resolved inside the iclr26 package)."""
    tree = _parse(path)
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(path, node)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def _module_index(module: str) -> tuple[dict, dict]:
    """(definitions, aliases) of a module: its top-level functions and classes by name, and every
    name an import anywhere in it binds -> the absolute module or module.attribute it names."""
    path = module_file(module)
    if path is None:
        return {}, {}
    tree = _parse(path)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(path, node)
            for a in node.names:
                aliases[a.asname or a.name] = f"{base}.{a.name}"
    return defs, aliases


def _resolve(target: str) -> tuple[str, str] | None:
    """'pkg.mod.func' -> ('pkg.mod', 'func') when that module defines it (iclr26 only)."""
    if not target.startswith("iclr26."):
        return None
    module, _, name = target.rpartition(".")
    if module_file(module) is not None and name in _module_index(module)[0]:
        return module, name
    return None


@functools.cache
def _reach(module: str, name: str) -> tuple[frozenset, frozenset]:
    """(every iclr26 function or class reachable from module.name, which of CHECKPOINT_CALLS they
    make: job.units, job.checkpointer, resume_in): a name-based call graph, over-approximate (a
    reference counts as a call, a class reaches all its methods, an attribute call on `self` any
    method of the module)."""
    seen, checkpoints, todo = set(), set(), [(module, name)]
    while todo:
        node_id = todo.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        mod, fn = node_id
        defs, aliases = _module_index(mod)
        if fn not in defs:
            continue
        methods = {n.name for n in ast.walk(defs[fn]) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(defs[fn]):
            if isinstance(node, ast.Name):
                if node.id in defs:
                    todo.append((mod, node.id))
                elif node.id in aliases and (hit := _resolve(aliases[node.id])):
                    todo.append(hit)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name):
                    base = node.value.id
                    if base in aliases and (hit := _resolve(f"{aliases[base]}.{node.attr}")):
                        todo.append(hit)
                    elif base in ("self", "cls"):
                        todo.extend((mod, d) for d in defs if node.attr in _methods_of(mod, d) and d not in methods)
                if node.attr in CHECKPOINT_CALLS:
                    checkpoints.add(node.attr)
    return frozenset(seen), frozenset(checkpoints)


@functools.cache
def _methods_of(module: str, name: str) -> frozenset:
    node = _module_index(module)[0].get(name)
    if not isinstance(node, ast.ClassDef):
        return frozenset()
    return frozenset(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def stage_code(paper: Paper, stage: str) -> dict:
    """What a stage's code does, by the static scan: picks a device (so runs on the GPU when the
    config says cuda) and checkpoints or saves units (so a retry resumes it)."""
    reached, checkpoints = _reach(paper.stage_module, stage)
    return {"picks_device": GPU_MARK in reached, "checkpoints": bool(checkpoints)}


def saves_units(paper: Paper, stage: str) -> bool:
    """Whether a stage's code calls job.units (what shard jobs divide among themselves)."""
    return "units" in _reach(paper.stage_module, stage)[1]


def sharded_seconds(seconds: float, spec: dict, shards: int) -> tuple[float, int | None]:
    """(estimated seconds, resumable units) of one of `shards` shard jobs of a job estimated at
    `seconds` (its `overhead_s` paid by every shard)."""
    overhead = float(spec.get("overhead_s") or 0)
    work = max(seconds - overhead, 0.0)
    if spec.get("units"):
        units = math.ceil(int(spec["units"]) / shards)
        return work * units / int(spec["units"]) + overhead, units
    return work / shards + overhead, None


def shards_that_fit(seconds: float, spec: dict, attempts: Sequence[int], checkpoints: bool,
                    most: int = 4096) -> int | None:
    """The fewest shard jobs of which each fits its attempts (None: none up to `most`, or as many as
    the units)."""
    top = min(most, int(spec["units"])) if spec.get("units") else most
    for n in range(2, top + 1):
        per, units = sharded_seconds(seconds, spec, n)
        if fits(per, attempts, checkpoints, units):
            return n
    return None


# ----------------------------------------------------------------------------- envs
def env_file(cfg: dict) -> Path:
    return REPO_ROOT / "envs" / f"{cfg.get('conda_env', 'pipeline')}.yaml"


def env_pins(path: Path) -> dict[str, str]:
    """{distribution name, lower case: its pin as written} of a conda env file (pip and conda)."""
    env = read_yaml_file(path) or {}
    pins = {}
    for dep in env.get("dependencies") or []:
        for item in (dep.get("pip") or []) if isinstance(dep, dict) else [dep]:
            name = re.split(r"[=<>!~ \[]", str(item), maxsplit=1)[0]
            pins[distribution_key(name)] = str(item)
    return pins


def distribution_key(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): torch_geometric == torch-geometric."""
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(paper: Paper) -> set[str]:
    """Top-level third-party packages a paper's jobs import: everything its own modules import
    (anywhere in them), and what the job runner and the core modules they use import at module
    level. Imports inside core's functions serve other papers (e.g. torch for checkpoints) and are
    not followed."""
    own = list(paper.folder.rglob("*.py"))
    queue = [(f, False) for f in own] + [(module_file(m), True) for m in ("iclr26.__main__", "iclr26.core.job",
                                                                        "iclr26.core.tabulate")]
    seen, found = set(), set()
    while queue:
        path, module_level_only = queue.pop()
        if path is None or path in seen:
            continue
        seen.add(path)
        for name in imports(path, module_level_only):
            if name.startswith("iclr26"):
                queue.append((module_file(name), path not in own or module_level_only))
            elif name and name.split(".")[0] not in sys.stdlib_module_names:
                found.add(name.split(".")[0])
    return found


def env_missing_imports(paper: Paper, cfg: dict) -> list[str]:
    """Packages the paper's code imports that the env its rules name does not pin."""
    path = env_file(cfg)
    if not path.exists():
        return [f"envs/{path.name} (the env itself)"]
    pins = env_pins(path)
    return sorted(m for m in third_party_imports(paper) if distribution_key(DISTRIBUTIONS.get(m, m)) not in pins)


def package_problems(root: Path = REPO_ROOT) -> list[str]:
    """Every pin of requirements.txt and envs/*.yaml is exact."""
    problems = []
    for line in (root / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-") and not re.fullmatch(r"[A-Za-z0-9_.\-\[\],]+==[^=<>~!*\s]+", line):
            problems.append(f"requirements.txt: {line!r} is not an exact pin (name==version)")
    for path in sorted((root / "envs").glob("*.yaml")):
        for pin in env_pins(path).values():
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+(==?)[^=<>~!*\s]+", pin.split("#")[0].strip()):
                problems.append(f"envs/{path.name}: {pin!r} is not an exact pin")
    return problems


# ----------------------------------------------------------------------------- sources
def _size(spec: dict):
    for key in ("bytes", "size"):
        if isinstance(spec.get(key), (int, float)):
            return int(spec[key])
    return None


def external_sources(cfg: dict) -> list[dict]:
    """Every external source a job config names: {kind, id, where, pinned, problem, bytes, estimated}."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("hub_id"):
                rev = str(node.get("revision") or "")
                file = node.get("file")
                found.append({"kind": "hub dataset", "id": f"{node['hub_id']}/{file}" if file else node["hub_id"],
                              "where": where, "bytes": _size(node), "estimated": False,
                              "problem": None if HEX40.fullmatch(rev) else f"hub dataset {node['hub_id']} has "
                              f"revision {node.get('revision')!r}, not a 40-hex commit"})
            elif node.get("url"):
                # a file's content pin: its sha256, or (a file of a git repository at a pinned commit, whose
                # bytes the stored snapshot lacked) its git blob id, which core.acquire checks just the same
                # (or, for a host that publishes md5 only, e.g. Zenodo, its md5: core.acquire.download_pinned
                # checks it and records the sha256 of what it downloaded)
                sha, blob = str(node.get("sha256") or ""), str(node.get("git_blob") or "")
                pinned = HEX64.fullmatch(sha) or HEX40.fullmatch(blob) or HEX32.fullmatch(str(node.get("md5") or ""))
                found.append({"kind": "url", "id": node["url"], "where": where, "bytes": _size(node),
                              "estimated": False,
                              "problem": None if pinned else
                              f"{node['url']} has sha256 {node.get('sha256')!r}, not a 64-hex digest"})
            for key, value in node.items():
                walk(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(cfg.get("data") or {}, "data")
    # every model the job loads: `model`, and any other mapping naming a hub id with a `revision` key
    # (an embedder, a judge, a teacher, each entry of a list of models), at any depth
    for where, model in _model_specs(cfg):
        source = model.get("source")
        if not (isinstance(source, str) and HUB_ID.fullmatch(source) and not Path(source).exists()):
            continue
        rev = str(model.get("revision") or "")
        size, estimated = _size(model), False
        # weights of a model whose own config states its size (one read for its config alone, as a
        # from-scratch model's, states none: its size stays unstated)
        if size is None and where == "model" and (model.get("arch") or model.get("n_params")) and (n := n_params(cfg)):
            size, estimated = int(n * (2 if "16" in str(model.get("dtype", "")) else 4)), True
        found.append({"kind": "hub model", "id": source, "where": where, "bytes": size, "estimated": estimated,
                      "problem": None if HEX40.fullmatch(rev) else
                      f"hub model {source} has revision {model.get('revision')!r}, not a 40-hex commit"})
    return found


def _model_specs(cfg: dict):
    """(where, spec) of `model` and of every mapping outside `data` that has a `source` and a `revision` key."""
    def walk(node, where):
        if isinstance(node, dict):
            if where == "model" or ("revision" in node and "source" in node):
                yield where, node
            for key, value in node.items():
                yield from walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}[{i}]")

    for key, value in cfg.items():
        if key != "data" and isinstance(value, dict):
            yield from walk(value, key)


# ----------------------------------------------------------------------------- memory
def _memory_inputs(cfg: dict) -> dict:
    """estimate.train.memory: what a train section that does not use the schema's names states."""
    return (((cfg.get("estimate") or {}).get("train") or {}).get("memory") or {})


def _arch(cfg: dict) -> dict | None:
    model = cfg.get("model") or {}
    need = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    for spec in (model.get("arch"), model.get("config"), _memory_inputs(cfg).get("arch")):
        if isinstance(spec, dict) and all(k in spec for k in need):
            return spec
    return None


def n_params(cfg: dict) -> float | None:
    model = cfg.get("model") or {}
    stated = model.get("n_params") or _memory_inputs(cfg).get("n_params")
    if stated:
        return float(stated)
    arch = _arch(cfg)
    if arch is None:
        return None
    h, layers, i, vocab = (int(arch[k]) for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                  "vocab_size"))
    heads = int(arch["num_attention_heads"])
    kv_dim = int(arch.get("num_key_value_heads", heads)) * h // heads
    tied = bool(arch.get("tie_word_embeddings", False))
    mlp = 3 if arch.get("gated_mlp", True) else 2
    return vocab * h * (1 if tied else 2) + layers * (2 * h * h + 2 * h * kv_dim + mlp * h * i + 2 * h) + h


def _lora_params(arch: dict, lora: dict) -> float:
    h, i = int(arch["hidden_size"]), int(arch["intermediate_size"])
    heads = int(arch["num_attention_heads"])
    kv_dim = int(arch.get("num_key_value_heads", heads)) * h // heads
    dims = {"q_proj": (h, h), "k_proj": (h, kv_dim), "v_proj": (h, kv_dim), "o_proj": (h, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    modules = lora.get("target_modules") or ["q_proj", "v_proj"]
    if modules in ("all-linear", ["all-linear"]):
        modules = list(dims)
    r = int(lora["r"])
    return int(arch["num_hidden_layers"]) * sum(r * sum(dims[m]) for m in modules if m in dims)


def train_memory(cfg: dict, gpus: int) -> dict:
    """The memory estimate of one train job per GPU (module docstring): {part: GB, ..., total}, or
    {"problem": why it cannot be estimated}."""
    memory_keys = ("precision", "optimizer", "lora", "sharding", "activation_checkpointing", "micro_batch_size",
                   "batch_size", "max_length")
    train = {**_memory_inputs(cfg), **{k: v for k, v in (cfg.get("train") or {}).items() if k in memory_keys}}
    arch = _arch(cfg)
    n = n_params(cfg)
    if n is None:
        return {"problem": "no parameter count: state model.arch (or model.n_params)"}
    precision = train.get("precision", "fp32")
    if precision not in ("bf16-mixed", "bf16", "fp32"):
        return {"problem": f"train.precision = {precision!r} is not one of bf16-mixed, bf16, fp32"}
    optimizer = train.get("optimizer", "adamw")
    sharding = train.get("sharding", "none") or "none"
    if optimizer not in ("adamw", "sgd") or sharding not in ("none", "zero2", "fsdp"):
        return {"problem": f"train.optimizer {optimizer!r} / train.sharding {sharding!r}: allowed adamw | sgd, "
                           "none | zero2 | fsdp"}
    lora = train.get("lora")
    if lora and arch is None:
        return {"problem": "train.lora needs model.arch to count the adapter's parameters"}
    trained = _lora_params(arch, lora) if lora else n
    g = max(1, int(gpus))
    w = 4 if precision == "fp32" else 2
    shard_state = g if sharding in ("zero2", "fsdp") else 1
    parts = {
        "weights": n * w / (g if sharding == "fsdp" else 1),
        "master": trained * (4 if precision == "bf16-mixed" else 0) / shard_state,
        "gradients": trained * w / shard_state,
        "optimizer": trained * (2 if optimizer == "adamw" else 1) * (2 if precision == "bf16" else 4) / shard_state,
    }
    batch = train.get("micro_batch_size") or train.get("batch_size")
    seq = train.get("max_length")
    if arch is not None:
        if not batch or not seq:
            return {"problem": "no sequence budget: state train.micro_batch_size (or batch_size) and train.max_length"}
        h, layers, i, vocab = (int(arch[k]) for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                      "vocab_size"))
        layer = batch * seq * (9 * h + 2 * i) * w
        parts["activations"] = (layers * batch * seq * h * w + layer if train.get("activation_checkpointing")
                                else layers * layer)
        parts["logits"] = batch * seq * vocab * 4 * 2
    extra = float(_memory_inputs(cfg).get("extra_gb") or 0)
    parts["overhead"] = 2**30 + extra * GB
    out = {k: v / GB for k, v in parts.items()}
    out["total"] = sum(out.values())
    out["how"] = dict(n_params=n, trained=trained, precision=precision, optimizer=optimizer, sharding=sharding,
                      lora=bool(lora), checkpointing=bool(train.get("activation_checkpointing")), gpus=g,
                      micro_batch=batch, max_length=seq if arch is not None else None)
    return out


def describe_memory(memory: dict) -> str:
    parts = " + ".join(f"{k} {memory[k]:.1f}" for k in ("weights", "master", "gradients", "optimizer", "activations",
                                                          "logits", "overhead") if k in memory and memory[k] >= 0.05)
    m = memory["how"]
    trained = f"LoRA {m['trained'] / 1e6:.1f}M trained" if m["lora"] else "full-parameter"
    how = (f"{m['n_params'] / 1e6:,.1f}M params, {trained}"
           f", {m['optimizer']}, {m['precision']}, sharding {m['sharding']} over {m['gpus']} GPU(s)"
           + (f", micro-batch {m['micro_batch']} x {m['max_length']} tokens" if m.get("max_length") else "")
           + (", activation checkpointing" if m["checkpointing"] else ""))
    return f"{memory['total']:.1f} GB per GPU = {parts} ({how})"


# ----------------------------------------------------------------------------- runtime
def _stage_estimate(cfg: dict, job: dict) -> dict | None:
    spec = ((cfg.get("estimate") or {}).get(job["stage"]))
    if not isinstance(spec, dict):
        return None
    item = (spec.get("items") or {}).get(job.get("dataset") or job.get("method")) or {}
    base = {k: v for k, v in spec.items() if k != "items" and not ("seconds" in item and k in ("work", "rate"))}
    return {**base, **item}


def job_seconds(paper: Paper, cfg: dict, job: dict) -> tuple[float, dict] | None:
    """(estimated seconds of one job, the estimate spec with the job's total `work`), or None when
    the config states none."""
    spec = _stage_estimate(cfg, job)
    if spec is None:
        return None
    work = None
    module = sys.modules.get(paper.stage_module)
    if module is None and module_file(paper.stage_module) and "estimate_work" in _module_index(paper.stage_module)[0]:
        module = paper.module()
    if module is not None and hasattr(module, "estimate_work"):
        work = module.estimate_work(cfg, job["stage"], job)
    if work is None:
        work = spec.get("work")
    if spec.get("seconds") is not None and work is None:
        return float(spec["seconds"]), {**spec, "work": float(spec["seconds"]), "rate": 1, "unit": "seconds"}
    if isinstance(work, list):
        work = math.prod(float(w) for w in work)
    if work is None or not spec.get("rate"):
        raise ConfigError(f"estimate.{job['stage']} needs work and rate, or seconds (see core/preflight.py)")
    if spec.get("per", "job") == "seed" and job.get("seeds"):
        from .config import parse_seed_block

        work = float(work) * len(parse_seed_block(job["seeds"]))
    return float(work) / float(spec["rate"]) + float(spec.get("overhead_s") or 0), {**spec, "work": float(work)}


def fits(seconds: float, attempts: Sequence[int], checkpoints: bool, units: int | None = None) -> bool:
    """Whether a job of `seconds` finishes within its attempts (minutes each). Without checkpoints
    only the first counts (a retry starts over, and is no faster); with checkpoints every attempt's
    time adds up, or, when the work comes in `units` resumable pieces (job.units), each attempt
    finishes the whole units that fit in it (a unit cut by the time limit is redone)."""
    if not checkpoints:
        return seconds <= attempts[0] * 60
    if not units:
        return seconds <= sum(attempts) * 60
    left, per_unit = int(units), seconds / int(units)
    for minutes in attempts:
        left -= int(minutes * 60 // per_unit) if per_unit > 0 else left
        if left <= 0:
            return True
    return False


def profile_retries(root: Path = REPO_ROOT) -> int:
    profile = root / "slurm" / "config.yaml"
    return int((yaml.safe_load(profile.read_text()) or {}).get("retries", 0)) if profile.exists() else 0


# ----------------------------------------------------------------------------- the check
def _who(slug: str, job: dict) -> str:
    item = job.get("dataset") or "/".join(x for x in (job.get("method"), job.get("seeds")) if x)
    return f"{slug} {job['stage']}" + (f" {item}" if item else "")


def check_paper(paper: Paper, cfg: dict, retries: int) -> tuple[list[str], dict]:
    """(problems, plan) of one paper's jobs at the config's scale."""
    problems, slug = [], paper.slug
    plan = {"jobs": {}, "gpu_hours": 0.0, "gpu_hours_estimated": 0.0, "sources": [], "memory": None, "runtime": {}}
    for source in external_sources(cfg):
        plan["sources"].append(source)
        if source["problem"]:
            problems.append(f"{slug} pin: {source['problem']} ({source['where']})")
    missing = env_missing_imports(paper, cfg)
    if missing:
        problems.append(f"{slug} env: envs/{env_file(cfg).name} lacks {', '.join(missing)}, which the paper's "
                        "modules import")
    device = str(cfg.get("device") or "cpu")
    full = cfg.get("scale") == "full"
    said = set()  # one line per (stage, problem), not one per seed block

    def once(key, line):
        if key not in said:
            said.add(key)
            problems.append(line)

    for job in workflow_jobs(paper, cfg):
        stage = job["stage"]
        shards = shard_count(cfg, stage, job.get("dataset") or job.get("method")) if stage in SHARD_STAGES else 1
        if shards > 1:  # N shard jobs with the stage's resources, then the ordinary job gathers
            plan["jobs"][f"{stage}_shard"] = plan["jobs"].get(f"{stage}_shard", 0) + shards
        plan["jobs"][stage] = plan["jobs"].get(stage, 0) + 1
        if stage == "tabulate":
            continue
        gpus = job_resource(paper, cfg, stage, "gpus")
        runtime = job_resource(paper, cfg, stage, "runtime")
        plan["gpu_hours"] += gpus * runtime / 60 * (1 + (shards if shards > 1 else 0))
        code = stage_code(paper, stage)
        if shards > 1 and not saves_units(paper, stage):
            once((stage, "shards"), f"{slug} {stage}: shards.{stage} asks for {shards} shard jobs but its code saves "
                                    "no units (job.units): each shard would redo the whole job")
        stage_device = str((cfg["resources"][stage] or {}).get("device") or device)
        who = f"{slug} {stage}"
        if code["picks_device"] and stage_device.startswith("cuda") and gpus == 0:
            once((stage, "nogpu"), f"{who}: runs with device {stage_device} (its code picks a device) but gets "
                                   f"no GPU (add it to the paper's gpu_stages and give resources.{stage}.gpus)")
        elif full and stage in paper.gpu_stages and gpus == 0:
            once((stage, "nogpu"), f"{who}: in the paper's gpu_stages but resources.{stage}.gpus is 0")
        if gpus > 0 and not code["picks_device"]:
            once((stage, "idle"), f"{who}: requests {gpus} GPU(s) but its code never picks a device: nothing "
                                  "runs on the GPU (drop it from gpu_stages)")
        elif gpus > 0 and not stage_device.startswith("cuda"):
            once((stage, "idle"), f"{who}: requests {gpus} GPU(s) but runs with device {stage_device}")
        if stage == "train" and gpus > 1 and not paper.data_parallel:
            once((stage, "dp"), f"{who}: requests {gpus} GPUs but the paper's train is not data_parallel: "
                                f"{gpus - 1} would idle")
        limit = (cfg.get("cluster") or {}).get("max_runtime_min")
        if limit and job_resource(paper, cfg, stage, "runtime") > limit:
            once((stage, "limit"), f"{who}: resources.{stage}.runtime {cfg['resources'][stage]['runtime']} min "
                                   f"exceeds the partition's limit cluster.max_runtime_min {limit}")
        try:
            estimate = job_seconds(paper, cfg, job)
        except ConfigError as err:
            once((stage, "est"), f"{who}: {err}")
            continue
        needs_estimate = stage in ("train", "evaluate") or gpus > 0
        if estimate is None:
            if full and needs_estimate:
                once((stage, "est"), f"{who}: no runtime estimate (estimate.{stage}: work, rate; see "
                                     "core/preflight.py)")
            continue
        seconds, spec = estimate
        overhead = float(spec.get("overhead_s") or 0)
        plan["gpu_hours_estimated"] += gpus * (seconds + (shards - 1) * overhead) / 3600
        attempts = [job_resource(paper, cfg, stage, "runtime", a) for a in range(1, retries + 2)]
        granted = sum(attempts) if code["checkpoints"] else attempts[0]
        units = spec.get("units")
        total = seconds
        if shards > 1:
            seconds, units = sharded_seconds(seconds, spec, shards)
        verdict = fits(seconds, attempts, code["checkpoints"], units)
        how = (f"checkpoints: {len(attempts)} attempts of {'+'.join(map(str, attempts))} min"
               + (f", {units} resumable units" if units else "") if code["checkpoints"]
               else f"no checkpoint: one attempt of {attempts[0]} min")
        if shards > 1:
            how = f"{shards} shard jobs of ~{total / 3600:.1f} h in all, then a gathering job; each shard: {how}"
        key = (stage, job.get("dataset") or job.get("method"))
        line = (stage, round(seconds), granted, how, spec.get("basis", "basis not stated"), verdict)
        if key not in plan["runtime"].setdefault(line, []):
            plan["runtime"][line].append(key[1])
        if not verdict:
            hint = ""
            if stage in SHARD_STAGES and code["checkpoints"] and saves_units(paper, stage):
                enough = shards_that_fit(total, spec, attempts[:1], code["checkpoints"])   # no retry needed
                hint = f"; shards.{stage}: {enough} would each fit one attempt" if enough else ""
            per = f" per shard ({shards} shard jobs)" if shards > 1 else ""
            once((stage, "time", key), f"{_who(slug, job)}: estimated {seconds / 3600:.1f} h{per} "
                                        f"({float(spec.get('work') or 0):.3g} {spec.get('unit', 'units')} at "
                                        f"{spec['rate']}/s; {spec.get('basis', 'basis not stated')}) exceeds "
                                        f"its runtime ({how}){hint}")
    if "train" in plan["jobs"] and job_resource(paper, cfg, "train", "gpus") > 0:
        gpus = job_resource(paper, cfg, "train", "gpus")
        memory = train_memory(cfg, gpus)
        plan["memory"] = memory
        gpu_gb = (cfg["resources"]["train"] or {}).get("gpu_mem_gb") or (cfg.get("cluster") or {}).get("gpu_mem_gb")
        if "problem" in memory:
            problems.append(f"{slug} train memory: {memory['problem']}")
        elif not gpu_gb:
            problems.append(f"{slug} train memory: no GPU memory stated (resources.train.gpu_mem_gb or "
                            "cluster.gpu_mem_gb)")
        elif memory["total"] > float(gpu_gb):
            problems.append(f"{slug} train memory: estimated {describe_memory(memory)} exceeds the "
                            f"{gpu_gb} GB of each GPU it requests")
        plan["gpu_mem_gb"] = gpu_gb
    return problems, plan


def run(scale: str = "full", papers: Sequence[str] | None = None, overrides: Iterable[str] = (),
        seeds=None, out=print) -> int:
    """Check every job of the papers at the scale; print the problems (one line each) and the plan.
    Returns the exit status: 1 if any problem, else 0."""
    slugs = list(papers or all_papers())
    retries = profile_retries()
    problems = package_problems()
    plans = {}
    overrides = list(overrides)
    for slug in slugs:
        paper = get_paper(slug)
        try:
            cfg = compose_job_config(slug, scale, tuple(split_overrides(overrides, slug)), seeds)
        except ConfigError as err:
            problems.append(f"{slug} config: {err}")
            continue
        found, plans[slug] = check_paper(paper, cfg, retries)
        problems.extend(found)
    for line in problems:
        out(f"PROBLEM {line}")
    _print_plan(plans, scale, retries, out)
    out(f"preflight ({scale}, {len(slugs)} paper(s)): "
        + (f"{len(problems)} problem(s)" if problems else "no problems"))
    return 1 if problems else 0


def _bytes(n: float) -> str:
    for unit, size in (("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _differs(runtime: dict, stage: str) -> bool:
    """Whether a stage's jobs have more than one estimate (then each line names its datasets/methods)."""
    return sum(1 for line in runtime if line[0] == stage) > 1


def _print_plan(plans: dict, scale: str, retries: int, out) -> None:
    total_jobs = sum(sum(p["jobs"].values()) for p in plans.values())
    gpu_hours = sum(p["gpu_hours"] for p in plans.values())
    estimated = sum(p.get("gpu_hours_estimated", 0.0) for p in plans.values())
    out(f"plan ({scale}): {total_jobs} jobs, {gpu_hours:,.0f} GPU-hours requested (GPUs x runtime of each "
        f"job's first attempt; retries: {retries}), ~{estimated:,.0f} GPU-hours estimated (GPUs x estimated "
        "runtime)")
    for slug, plan in plans.items():
        order = [s for stage in plan["jobs"] if not stage.endswith("_shard")
                 for s in (f"{stage}_shard", stage) if s in plan["jobs"]]
        stages = ", ".join(f"{stage} {plan['jobs'][stage]}" for stage in order)
        out(f"  {slug}: {stages}; {plan['gpu_hours']:,.0f} GPU-hours requested, "
            f"~{plan.get('gpu_hours_estimated', 0.0):,.0f} estimated")
        for (stage, seconds, granted, how, basis, ok), items in plan["runtime"].items():
            names = ", ".join(dict.fromkeys(items))
            which = f" ({names})" if len(plan["runtime"]) and _differs(plan["runtime"], stage) else ""
            per = "per shard job" if "shard jobs" in how else "per job"
            out(f"    {stage}{which}: ~{seconds / 3600:.1f} h {per}, allowed {granted / 60:.1f} h ({how})"
                f"{'' if ok else ': TOO LONG'}; {basis}")
        if plan["memory"] is not None:
            m = plan["memory"]
            out("    train memory: " + (m["problem"] if "problem" in m else
                                         f"{describe_memory(m)}; GPU {plan.get('gpu_mem_gb')} GB"))
    sources = {}
    for plan in plans.values():
        for s in plan["sources"]:
            sources.setdefault((s["kind"], s["id"]), s)
    known = sum(s["bytes"] for s in sources.values() if s["bytes"])
    estimated = [s for s in sources.values() if s["estimated"]]
    unknown = [s for s in sources.values() if not s["bytes"]]
    out(f"downloads: {len(sources)} distinct source(s), {known / GB:,.1f} GB"
        + (f" ({len(estimated)} estimated from parameter counts)" if estimated else "")
        + (f"; {len(unknown)} of unstated size (add bytes: beside them)" if unknown else ""))
    for (kind, ident), s in sources.items():
        size = (f"{_bytes(s['bytes'])}{' (estimated)' if s['estimated'] else ''}" if s["bytes"]
                else "size not stated")
        out(f"  {kind} {ident}: {size}")
