#!/usr/bin/env bash
# The gradient-variance measurement of the long-horizon study (docs/results/long-study/plan.md, "Metrics"), IBPO's
# title claim, from the repository root after `credo compare configs/studies/long_main.yaml` has finished GRPO's
# seed 0. Two policies (the regime's starting model, GRPO seed 0's final one), 16 draws of the whole batch at ratio 1
# for GRPO, its 4-mini-batch form and IBPO, and 64 draws of the 4th mini-batch after 3 optimiser steps for the two
# 4-mini-batch ones, at the configs' learning rates and again at one common rate (IBPO's tuned one: the steps before
# the measured mini-batch move the weights by about lr each).
# GRPO seed 0's final weights are committed beside this script (grpo_seed0_model/, 3.4 MB: copied from
# runs/studies/long-main/default/grpo@tuned/seed0/model once that run finished), so the measurement needs no study run.
# Results: docs/results/long-study/gradient_variance_*.json; a command whose JSON exists is skipped, so a killed
# measurement resumes where it stopped (delete a JSON to measure it again).
# Usage: bash docs/results/long-study/gradient_variance.sh IBPO_LR   (IBPO's tuned rate, as long_main.yaml sets it)
set -euo pipefail
LR=${1:?give the tuned learning rate of ibpo, as configs/studies/long_main.yaml sets it}
L=configs/testbed/long
O=docs/results/long-study
T=$O/grpo_seed0_model
ALL="$L/grpo.yaml $L/grpo_4mb.yaml $L/ibpo.yaml"
OFF="$L/grpo_4mb.yaml $L/ibpo.yaml"
measure() {  # measure JSON_NAME ARGS...: one credo gradient-variance command, unless its JSON exists
  local out=$O/gradient_variance_$1.json
  shift
  if [ -f "$out" ]; then echo "gradient_variance.sh: $out exists, skipped"; return; fi
  credo gradient-variance "$@" --json "$out"
}
measure start $ALL
measure trained $ALL --set model.path=$T
measure start_off_policy $OFF --after-steps 3 --draws 64
measure trained_off_policy $OFF --after-steps 3 --draws 64 --set model.path=$T
measure start_off_policy_common_lr $OFF --after-steps 3 --draws 64 --set optim.lr=$LR
measure trained_off_policy_common_lr $OFF --after-steps 3 --draws 64 --set optim.lr=$LR --set model.path=$T
