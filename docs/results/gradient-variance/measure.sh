#!/usr/bin/env bash
# The gradient-variance measurements of the powered study (docs/results/study-plan.md, amendment 2), from the
# repository root after `credo compare configs/studies/credit_decisive.yaml` has finished GRPO's seed 0.
# Three policies (the start, GRPO after 100k rollout tokens, GRPO seed 0 after 900k), 16 draws of the whole batch at
# ratio 1 for the ten main contrasts, and 64 draws of the 4th mini-batch after 3 optimiser steps for the three
# 4-mini-batch ones. Results: docs/results/gradient-variance/decisive_*.json, read in README.md beside them.
set -euo pipefail
D=configs/testbed/decisive
O=docs/results/gradient-variance
H=runs/gradient-variance/grpo_decisive_100k
[ -f $H/summary.json ] || credo train $D/grpo.yaml train.seed=100 train.rollout_tokens=100000 train.eval_every=1000 --output $H
T=runs/studies/credit-decisive/decisive/grpo/seed0/model
ALL="$D/grpo.yaml $D/grpo_4mb.yaml $D/oracle_blame.yaml $D/srpo_oracle.yaml $D/srpo.yaml $D/rrpo.yaml $D/ibpo.yaml $D/s_trace.yaml $D/grpo_lambda.yaml $D/gtpo.yaml"
OFF="$D/grpo_4mb.yaml $D/s_trace.yaml $D/ibpo.yaml"
credo gradient-variance $ALL --json $O/decisive_start.json
credo gradient-variance $ALL --set model.path=$H/model --json $O/decisive_halfway.json
credo gradient-variance $ALL --set model.path=$T --json $O/decisive_trained.json
credo gradient-variance $OFF --after-steps 3 --draws 64 --json $O/decisive_start_off_policy.json
credo gradient-variance $OFF --after-steps 3 --draws 64 --set model.path=$H/model --json $O/decisive_halfway_off_policy.json
credo gradient-variance $OFF --after-steps 3 --draws 64 --set model.path=$T --json $O/decisive_trained_off_policy.json
# like-for-like off policy: all three at IBPO's learning rate 5e-5 (the tuned one of grpo_4mb and s_trace), since the
# steps before the measured mini-batch move the weights by about lr each
for P in start halfway trained; do
  case $P in start) SET=();; halfway) SET=(--set model.path=$H/model);; trained) SET=(--set model.path=$T);; esac
  credo gradient-variance $OFF --after-steps 3 --draws 64 --set optim.lr=5e-5 "${SET[@]}" --json $O/decisive_${P}_off_policy_lr5e-5.json
done
