#!/usr/bin/env bash
# GPU smoke check of the paper path on one GPU, within 10 minutes: vLLM rollouts, an OpenRLHF GRPO
# run with the cluster's flags (CUDA-IPC sync, sleep mode, flash-attention packing), vllm_kl, the
# V0 prior actor in its placement-group share, and V0's local parts. Each piece is reported as
# passed, failed or not installed (perf/gpu_smoke.py). Without a CUDA GPU, or with --dry, it lists
# each piece with its exact command instead. Exit 1 if a piece failed.
#   bash perf/gpu_smoke.sh [--work DIR]     # on the GPU machine, from anywhere
#   bash perf/gpu_smoke.sh --dry
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --kill-after=20 "${SPARSERL_SMOKE_TIMEOUT:-600}" python perf/gpu_smoke.py "$@"
