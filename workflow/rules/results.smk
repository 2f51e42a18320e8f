# Stage 5: tabulate (table, claims, figures per paper), then the cross-paper claims and report.


# One tabulate rule per discovered paper: every file it writes is a declared output, the figures
# included (their names come from the paper's declaration), so a deleted one is made again.
for _paper in PAPERS:

    rule:
        name:
            f"tabulate_{_paper}"
        input:
            lambda w, paper=_paper: eval_files(paper),
        output:
            report(f"results/{_paper}/table.md", category=_paper, caption="../report/table.rst"),
            *(path for path in result_files(_paper) if Path(path).name != "table.md"),
        log:
            f"logs/{SCALE}/{_paper}/tabulate.log",
        localrule: True
        conda:
            "../../envs/pipeline.yaml"
        threads: 1
        params:
            paper=_paper,
            config=lambda w, paper=_paper: tabulate_digest(job_config(paper), PAPER_DECL[paper].source_digest()),
            args=lambda w, paper=_paper: cli_args(paper),
        shell:
            f"python -m iclr26 tabulate --paper {{params.paper}} --scale {SCALE} {{params.args}}"
            " --evals {input} --out results/{params.paper} 2>&1 | tee {log}"


rule claims:
    input:
        expand("results/{paper}/claims.json", paper=PAPERS),
    output:
        md=report("results/claims.md", category="claims", caption="../report/claims.rst"),
        metrics="metrics/claims.json",
        plot="metrics/claims.csv",
    log:
        f"logs/{SCALE}/claims.log",
    localrule: True
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "python -m iclr26 claims --inputs {input} --out {output.md} --metrics {output.metrics}"
        " --plot {output.plot} --results results 2>&1 | tee {log}"


rule report:
    input:
        "results/claims.md",
        [path for paper in PAPERS for path in result_files(paper)],
    output:
        "results/report.html",
    log:
        f"logs/{SCALE}/report.log",
    localrule: True
    conda:
        "../../envs/pipeline.yaml"
    params:
        papers=" ".join(PAPERS),
    shell:
        "python -m iclr26 report --papers {params.papers} --out {output} 2>&1 | tee {log}"
