# Stages 1-2: acquire (tiny: seeded generator; full: checksummed download) and prepare.
# The manifest.json is written last, with the sha256 of every file: its presence means done.


rule acquire:
    output:
        "data/{scale}/{paper}/raw/{dataset}/manifest.json",
    log:
        "logs/{scale}/{paper}/acquire/{dataset}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/acquire/{dataset}.tsv"
    retries: 2
    conda:
        conda_env
    threads: 1
    resources:
        **stage_resources("acquire"),
    params:
        config=lambda w: digest(w.paper, "acquire", w.dataset),
        args=lambda w: cli_args(w.paper, "acquire", w.dataset),
        source=lambda w: source_of(w.paper, w.dataset),
    message:
        "acquire {wildcards.paper}/{wildcards.dataset} ({wildcards.scale}): {params.source}"
    shell:
        "python -m iclr26 acquire --paper {wildcards.paper} --scale {wildcards.scale}"
        " --dataset {wildcards.dataset} {params.args} 2>&1 | tee {log}"


# A config with `shards: {prepare: N}` (core.job) first runs N shard jobs of a prepare job, each
# computing its share of the units of work into the folder they share; the prepare job then
# gathers them. Without it, prepare_shard never runs and prepare reads only the acquired data.
rule prepare_shard:
    input:
        rules.acquire.output,
    output:
        "data/{scale}/{paper}/prepared/{dataset}/.shard-{k}-of-{n}.json",
    log:
        "logs/{scale}/{paper}/prepare/{dataset}.shard-{k}-of-{n}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/prepare/{dataset}.shard-{k}-of-{n}.tsv"
    conda:
        conda_env
    threads: 1
    resources:
        **stage_resources("prepare"),
    params:
        config=lambda w: digest(w.paper, "prepare", w.dataset),
        args=lambda w: cli_args(w.paper, "prepare", w.dataset),
    shell:
        "python -m iclr26 prepare --paper {wildcards.paper} --scale {wildcards.scale}"
        " --dataset {wildcards.dataset} --shard {wildcards.k}/{wildcards.n} {params.args} 2>&1 | tee {log}"


rule prepare:
    input:
        rules.acquire.output,
        shard_markers("prepare"),
    output:
        "data/{scale}/{paper}/prepared/{dataset}/manifest.json",
    log:
        "logs/{scale}/{paper}/prepare/{dataset}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/prepare/{dataset}.tsv"
    conda:
        conda_env
    threads: 1
    resources:
        **stage_resources("prepare"),
    params:
        config=lambda w: digest(w.paper, "prepare", w.dataset),
        args=lambda w: cli_args(w.paper, "prepare", w.dataset),
    shell:
        "python -m iclr26 prepare --paper {wildcards.paper} --scale {wildcards.scale}"
        " --dataset {wildcards.dataset} {params.args} 2>&1 | tee {log}"
