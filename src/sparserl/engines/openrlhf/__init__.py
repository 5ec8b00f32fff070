"""Paper-scale RL engine: our estimators, OSLA and GPG inside OpenRLHF 0.11.2, without a fork.

Modules, one concern each (importing this package imports none of OpenRLHF; the submodules do):
  experience  `SparseRLExperienceMaker(RemoteExperienceMaker)`: advantages from the methods layer
              (`sparserl.methods.sidedata`) grouped by a stable prompt uid; the label JSON format;
              the live prior (a non-static prior queried each step with the support buffer)
  samples     `OslaSamplesGenerator(SamplesGenerator)`: V0.5's OSLA rounds on vLLM, dispatches
              padded to a multiple of 32 with extra samples of the dispatched prompts
  losses      `SparseRLPolicyLoss` (PolicyLoss + "gpg"), `gpg_policy_loss`, and `reward_func`,
              the verifier-backed reward OpenRLHF loads from this file (--reward.remote_url)
  parser      OpenRLHF's argument parser rebuilt from its own source (our estimator names accepted)
  flags       method spec + config -> OpenRLHF flags and argv
  dataset     the run's prompt dataset (labels carry uid, answer and static side data)
  patches     the Ray worker_process_setup_hook that installs our classes in every worker
  slurm       Ray on a SLURM allocation (head on the first node, workers via srun)
  metrics     TensorBoard scalars -> metrics.parquet; harvested rollouts -> rollouts.parquet
  launcher    `run`: dataset, argv, Ray, OpenRLHF's own `train(args)`, metrics
  envs        Le Critique's experiments: env datasets, the env reward function and multi-turn
              agent OpenRLHF loads from that file, a run's argv, `run_critique`

CPU install for the tests: the `test` extra (it includes `openrlhf-cpu`), then ``pip install --no-deps openrlhf==0.11.2``.
"""
from __future__ import annotations

OPENRLHF_VERSION = "0.11.2"
HOOK = "sparserl.engines.openrlhf.patches.worker_process_setup"

__all__ = ["HOOK", "OPENRLHF_VERSION"]
