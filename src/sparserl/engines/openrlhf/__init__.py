"""Paper-scale RL engine: our estimators, OSLA and GPG inside OpenRLHF 0.11.2, without a fork.

Modules (importing this package imports none of OpenRLHF; the submodules do):
  experience  `SparseRLExperienceMaker(RemoteExperienceMaker)`: advantages from
              `sparserl.estimators` grouped by a stable prompt uid; the label JSON format
  samples     `OslaSamplesGenerator(SamplesGenerator)`: V0.5's OSLA rounds on vLLM, dispatches
              padded to a multiple of 32 with extra samples of the dispatched prompts
  losses      `SparseRLPolicyLoss` (PolicyLoss + "gpg"), `gpg_policy_loss`, and `reward_func`,
              the verifier-backed reward OpenRLHF loads from this file (--reward.remote_url)
  launcher    OpenRLHF's argument parser rebuilt from its own source (our estimator names
              accepted), method spec + config -> flags, the prompt dataset, the Ray
              worker_process_setup_hook that installs our classes in every worker, `train(args)`
  slurm       Ray on a SLURM allocation (head on the first node, workers via srun)
  cli         `register(subparsers, add)`: `openrlhf-args`, `openrlhf-launch`

Side data (uid, answer, BASIS phat, V0.5 prior p) travels in the dataset's label field as JSON;
see `experience`. CPU install for the tests: requirements-openrlhf-cpu.txt, then
``pip install --no-deps openrlhf==0.11.2``.
"""
from __future__ import annotations

OPENRLHF_VERSION = "0.11.2"
HOOK = "sparserl.engines.openrlhf.launcher.worker_process_setup"

__all__ = ["HOOK", "OPENRLHF_VERSION"]
