#!/usr/bin/env bash
# The gradient-variance measurement of the long-horizon study (docs/results/long-study/plan.md, "Metrics"), IBPO's
# title claim, from the repository root after `credo compare configs/studies/long_main.yaml` has finished GRPO's
# seed 0. Two policies (the regime's starting model, GRPO seed 0's final one), 16 draws of the whole batch at ratio 1
# for GRPO, its 4-mini-batch form and IBPO, and 64 draws of the 4th mini-batch after 3 optimiser steps for the two
# 4-mini-batch ones, at the configs' learning rates and again at one common rate (IBPO's tuned one: the steps before
# the measured mini-batch move the weights by about lr each).
# Results: docs/results/long-study/gradient_variance_*.json.
# Usage: bash docs/results/long-study/gradient_variance.sh IBPO_LR   (IBPO's tuned rate, as long_main.yaml sets it)
set -euo pipefail
LR=${1:?give the tuned learning rate of ibpo, as configs/studies/long_main.yaml sets it}
L=configs/testbed/long
O=docs/results/long-study
T=runs/studies/long-main/default/grpo@tuned/seed0/model
ALL="$L/grpo.yaml $L/grpo_4mb.yaml $L/ibpo.yaml"
OFF="$L/grpo_4mb.yaml $L/ibpo.yaml"
credo gradient-variance $ALL --json $O/gradient_variance_start.json
credo gradient-variance $ALL --set model.path=$T --json $O/gradient_variance_trained.json
credo gradient-variance $OFF --after-steps 3 --draws 64 --json $O/gradient_variance_start_off_policy.json
credo gradient-variance $OFF --after-steps 3 --draws 64 --set model.path=$T \
  --json $O/gradient_variance_trained_off_policy.json
for P in start trained; do
  case $P in start) SET=();; trained) SET=(--set model.path=$T);; esac
  credo gradient-variance $OFF --after-steps 3 --draws 64 --set optim.lr=$LR "${SET[@]}" \
    --json $O/gradient_variance_${P}_off_policy_common_lr.json
done
