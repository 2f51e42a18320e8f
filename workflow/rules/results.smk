# Stage 5: tabulate (table, claims, figures per paper), then the cross-paper claims and report.


rule tabulate:
    input:
        eval_files,
    output:
        report("results/{paper}/table.md", category="{paper}", caption="../report/table.rst"),
        "results/{paper}/table.csv",
        "results/{paper}/table.tex",
        "results/{paper}/claims.json",
    log:
        "logs/" + SCALE + "/{paper}/tabulate.log",
    localrule: True
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    params:
        config=lambda w: config_digest(job_config(w.paper)),
        args=lambda w: cli_args(w.paper),
    shell:
        "python -m iclr26 tabulate --paper {wildcards.paper} --scale " + SCALE + " {params.args}"
        " --evals {input} --out results/{wildcards.paper} 2>&1 | tee {log}"


rule claims:
    input:
        expand("results/{paper}/claims.json", paper=PAPERS),
    output:
        report("results/claims.md", category="claims", caption="../report/claims.rst"),
    localrule: True
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "python -m iclr26 claims --inputs {input} --out {output}"


rule report:
    input:
        "results/claims.md",
        expand("results/{paper}/table.md", paper=PAPERS),
    output:
        "results/report.html",
    localrule: True
    conda:
        "../../envs/pipeline.yaml"
    params:
        papers=" ".join(PAPERS),
    shell:
        "python -m iclr26 report --papers {params.papers} --out {output}"
