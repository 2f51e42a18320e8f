# Stages 3-4: train (checkpoints and resumes) and evaluate, one job per paper x method x seed
# block. GPUs, memory and runtime come from the job config (scale/full.yaml sets GPUs). A method the
# paper declares training_free has no train job: its evaluate reads only the prepared data.


rule train:
    input:
        prepared,
    output:
        "runs/{scale}/{paper}/{method}/{seeds}/metrics.json",
    log:
        "logs/{scale}/{paper}/train/{method}_{seeds}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/train/{method}_{seeds}.tsv"
    conda:
        conda_env
    threads: lambda w: job_config(w.paper)["resources"]["train"]["cpus"]
    resources:
        **stage_resources("train"),
    params:
        config=lambda w: digest(w.paper, "train"),
        args=lambda w: cli_args(w.paper, "train"),
        launch=launcher,
    shell:
        "{params.launch} iclr26 train --paper {wildcards.paper} --scale {wildcards.scale}"
        " --method {wildcards.method} --seeds {wildcards.seeds} {params.args} 2>&1 | tee {log}"


# With `shards: {evaluate: N}` (core.job) N shard jobs compute the units of an evaluate job first;
# it then gathers them (as prepare_shard does for prepare).
rule evaluate_shard:
    input:
        prepared,
        train_output,
    output:
        "runs/{scale}/{paper}/{method}/{seeds}/.shard-{k}-of-{n}.json",
    log:
        "logs/{scale}/{paper}/evaluate/{method}_{seeds}.shard-{k}-of-{n}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/evaluate/{method}_{seeds}.shard-{k}-of-{n}.tsv"
    conda:
        conda_env
    threads: lambda w: job_config(w.paper)["resources"]["evaluate"]["cpus"]
    resources:
        **stage_resources("evaluate"),
    params:
        config=lambda w: digest(w.paper, "evaluate"),
        args=lambda w: cli_args(w.paper, "evaluate"),
    shell:
        "python -m iclr26 evaluate --paper {wildcards.paper} --scale {wildcards.scale}"
        " --method {wildcards.method} --seeds {wildcards.seeds} --shard {wildcards.k}/{wildcards.n}"
        " {params.args} 2>&1 | tee {log}"


rule evaluate:
    input:
        prepared,
        train_output,
        shard_markers("evaluate"),
    output:
        "runs/{scale}/{paper}/{method}/{seeds}/eval.json",
    log:
        "logs/{scale}/{paper}/evaluate/{method}_{seeds}.log",
    benchmark:
        "benchmarks/{scale}/{paper}/evaluate/{method}_{seeds}.tsv"
    conda:
        conda_env
    threads: lambda w: job_config(w.paper)["resources"]["evaluate"]["cpus"]
    resources:
        **stage_resources("evaluate"),
    params:
        config=lambda w: digest(w.paper, "evaluate"),
        args=lambda w: cli_args(w.paper, "evaluate"),
    shell:
        "python -m iclr26 evaluate --paper {wildcards.paper} --scale {wildcards.scale}"
        " --method {wildcards.method} --seeds {wildcards.seeds} {params.args} 2>&1 | tee {log}"
