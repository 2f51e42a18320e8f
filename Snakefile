# iclr26: regenerate the headline tables of ICLR 2026 papers.
#   snakemake --cores 2 all                          tiny scale, CPU, no network (the default)
#   snakemake --profile slurm all --config scale=full   the papers' setting on a Slurm GPU cluster
# Five generic stages per paper (acquire, prepare, train, evaluate, tabulate); no rule names a paper.
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from iclr26.core.config import ConfigError, read_yaml_file

try:  # Snakemake's own message for a malformed or empty file names neither the file nor the key
    _config_file = Path(workflow.basedir) / "config" / "config.yaml"
    if not isinstance(read_yaml_file(_config_file), dict):
        raise ConfigError(
            f"{_config_file}: empty or not a mapping of keys; it needs at least 'scale: tiny' " "(or smoke, full)"
        )
except ConfigError as err:
    sys.exit(f"iclr26 config error: {err}")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/results.smk"


rule all:
    default_target: True
    input:
        [path for paper in PAPERS for path in result_files(paper)],
        "results/claims.md",
        "results/report.html",
