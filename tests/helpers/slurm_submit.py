"""The sbatch and jobstep srun lines snakemake-executor-plugin-slurm builds for each GPU job of a
dry run, from the plugin's own functions (tests/workflow/test_paper_resources.py runs this as a script).

A dry run (-n) swaps in Snakemake's dry-run executor, so the plugin never sees a job. Here that
executor records each job, and each GPU job goes through the functions the plugin's `run_job` calls
to build its `sbatch` line (`get_submit_command` + `set_gres_string`, account and partition from
`Executor.get_account_arg` / `get_partition_arg`) and the `srun` prefix the jobstep plugin's
`run_job` builds inside the allocation (`get_cpu_setting`, `get_gpu_setting`, `get_node_setting`).
Not the plugin's: the job name (a run uuid), the log path and the wrapped `snakemake` command,
which carry no resources; and the srun prefix's literal `srun -n1 --cpu-bind=q`, copied from the
jobstep's `run_job`, which also starts the process.

    python tests/helpers/slurm_submit.py [--all-jobs] OUT.jsonl <snakemake arguments>

By default only GPU jobs are recorded; `--all-jobs` records every job (a CPU-only scale's).
"""
import json
import logging
import sys
from types import SimpleNamespace


def main(out: str, argv: list[str], all_jobs: bool = False) -> int:
    import snakemake.cli
    import snakemake.executors.dryrun as dry
    import snakemake_executor_plugin_slurm as plugin
    from snakemake_executor_plugin_slurm import ExecutorSettings
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting, get_node_setting

    plugin.test_account = lambda account, logger: None  # asks sacctmgr, which is not here
    plugin.get_account = lambda logger: None  # asks sacct: as a site without accounts, no -A
    plugin.get_default_partition = lambda job, logger: "cpu"  # asks sinfo: a site whose default is "cpu"
    slurm = SimpleNamespace(_fallback_account_arg=None, _fallback_partition=None, _partitions=None,
                            logger=logging.getLogger("slurm"))
    rows = []
    run_job = dry.Executor.run_job

    def record(self, job):
        run_job(self, job)
        if not all_jobs and not job.resources.get("gpu"):
            return
        params = {"run_uuid": "RUN_UUID", "slurm_logfile": f".snakemake/slurm_logs/rule_{job.name}/%j.log",
                  "comment_str": f"rule_{job.name}",
                  "account": next(plugin.Executor.get_account_arg(slurm, job)),
                  "partition": plugin.Executor.get_partition_arg(slurm, job), "workdir": "WORKDIR"}
        sbatch = get_submit_command(job, params, settings=ExecutorSettings())
        sbatch += set_gres_string(job) if job.resources.get("gpu") else ""
        srun = (f"srun -n1 --cpu-bind=q  {get_cpu_setting(job, True)}  {get_gpu_setting(job)}  "
                f"{get_node_setting(job)}")
        rows.append({"rule": job.name, "wildcards": dict(job.wildcards_dict), "sbatch": sbatch, "srun": srun})

    dry.Executor.run_job = record
    try:
        snakemake.cli.main(argv)
    except SystemExit as e:
        code = e.code or 0
    else:
        code = 0
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return int(code)


if __name__ == "__main__":
    every = sys.argv[1] == "--all-jobs"
    args = sys.argv[1 + every:]
    sys.exit(main(args[0], args[1:], all_jobs=every))
