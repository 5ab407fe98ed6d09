#!/usr/bin/env bash
# The gradient-variance measurement of the long-horizon study (docs/results/long-study/plan.md, "Metrics" and
# amendment 9), IBPO's title claim, from the repository root. Two policies (the regime's starting model, GRPO seed 0's
# final one after 1.2M tokens):
#   start, trained: 16 draws of the whole batch at ratio 1, GRPO and IBPO (GRPO with 4 mini-batches has exactly
#     GRPO's gradient there);
#   start_off_policy, trained_off_policy: 64 draws of the 4th mini-batch after 3 optimiser steps, GRPO with 4
#     mini-batches at IBPO's rate 5e-5 first (the reference: the steps before the measured mini-batch move the weights
#     by about lr each, so this is IBPO's like-for-like baseline), then IBPO, then GRPO with 4 mini-batches at its
#     tuned 1e-4 (the rate's own effect, paired with the reference).
# GRPO seed 0's final weights are committed beside this script (grpo_seed0_model/, 3.4 MB: copied from
# runs/studies/long-main/default/grpo@tuned/seed0/model once that run finished), so the measurement needs no study run.
# Two commands run at a time, one thread each. Results: docs/results/long-study/gradient_variance_*.json; a command
# whose JSON exists is skipped, so a killed measurement resumes where it stopped (delete a JSON to measure it again).
# Usage: bash docs/results/long-study/gradient_variance.sh
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
L=configs/testbed/long
O=docs/results/long-study
T=$O/grpo_seed0_model
ON="$L/grpo.yaml $L/ibpo.yaml"
OFF="$L/grpo_4mb_ibpo_rate.yaml $L/ibpo.yaml $L/grpo_4mb.yaml"
measure() {  # measure JSON_NAME ARGS...: one credo gradient-variance command, unless its JSON exists
  local name=$1 out=$O/gradient_variance_$1.json
  shift
  if [ -f "$out" ]; then echo "gradient_variance.sh: $out exists, skipped"; return; fi
  local log=${out%.json}.log
  credo gradient-variance "$@" --json "$out" > "$log" 2>&1 || { echo "gradient_variance.sh: $name failed: $(tail -n 1 "$log")" >&2; return 1; }
}
pair() {  # pair NAME ARGS... -- NAME ARGS...: two measurements at once; fails if either does
  local split
  for ((split = 1; split <= $#; split++)); do [ "${!split}" = "--" ] && break; done
  measure "${@:1:split-1}" & local first=$!
  measure "${@:split+1}" & local second=$!
  local status=0
  wait $first || status=$?
  wait $second || status=$?
  return $status
}
pair start $ON -- trained $ON --set model.path=$T
pair start_off_policy $OFF --after-steps 3 --draws 64 -- trained_off_policy $OFF --after-steps 3 --draws 64 --set model.path=$T
