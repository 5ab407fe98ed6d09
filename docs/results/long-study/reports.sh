#!/usr/bin/env bash
# Every report of the long-horizon study (docs/results/long-study/plan.md), tables and figures, from the committed
# run records (docs/results/long-study/records/, written by records.sh): one command, from the repository root.
#   main/, survey/: sampled pass@1 area, the plan's headline, with greedy pass@1 area as a secondary endpoint in the
#   same Holm family (the protocol issue; before 2026-12-02 greedy had reports and families of its own);
#   decisive-retune/: phase 4's tuning on the decisive regime; decisive-fragile/: its re-run (greedy area, that
#   regime's headline; sampled pass@1 at the end only);
#   tuning/: phase 1, redrawn from its report.json (its runs' records were not kept);
#   checkpoints-main.md, checkpoints-survey.md: each cell's mean curves at the token checkpoints, its token entropy,
#   gradient norm and wall time per run (checkpoints.py; without the runs amendment 10 of the plan leaves untimed);
#   rate-contrasts.md: the main family's three 2e-4 cells against their 1e-4 controls (examples/contrast.py);
#   verdicts.md: every family's verdicts side by side, a column per report (examples/study_verdicts.py);
#   gradient-variance.md: the tables of gradient_variance.sh's measurements (examples/gradient_variance_table.py).
# A study with no finished run recorded yet is skipped with a line saying so.
# Usage: bash docs/results/long-study/reports.sh
set -euo pipefail
R=docs/results/long-study/records
O=docs/results/long-study
finished() {  # finished STUDY: whether any run of STUDY has finished and been recorded
  [ -n "$(find "$R/$1" -name summary.json -print -quit 2>/dev/null)" ]
}
report() {  # report STUDY OUTPUT [ARGS...]
  local study=$1 output=$2
  shift 2
  if ! finished "$study"; then echo "reports.sh: no finished run of $study recorded yet, skipped"; return; fi
  credo report "$R/$study" -o "$O/$output" "$@"
}
report long-main main
report long-survey survey
report plan-decisive-retune decisive-retune
report decisive-fragile decisive-fragile
credo report "$O/tuning" --from-json
# the main family's runs that shared the machine with other work (plan.md, amendment 10): their wall time is left out
UNTIMED_MAIN=(grpo@tuned/seed6 srpo_oracle@grpo_rate/seed5)
for cell in oracle_blame@tuned grpo_lambda@tuned s_trace@tuned grpo_4mb@tuned srpo_oracle@tuned srpo@tuned ibpo@tuned \
            spo_tree@tuned oracle_blame@grpo_rate grpo_lambda@grpo_rate; do
  UNTIMED_MAIN+=("$cell/seed5")
done
for family in main survey; do
  if finished "long-$family"; then
    untimed=()
    if [ "$family" = main ]; then for run in "${UNTIMED_MAIN[@]}"; do untimed+=(--untimed "$run"); done; fi
    python "$O/checkpoints.py" "$R/long-$family" "${untimed[@]}" > "$O/checkpoints-$family.md.tmp"
    mv "$O/checkpoints-$family.md.tmp" "$O/checkpoints-$family.md"
  fi
done
# amendments 7-8's exploratory controls against their own cells: the learning rate's effect (1e-4 minus 2e-4)
if [ -f "$O/main/report.json" ]; then
  {
  printf '# The learning rate against the credit: the 2e-4 cells at 1e-4\n\n'
  printf 'Made by `reports.sh`: `python examples/contrast.py` on the main family reports, each cell at 1e-4 minus the\n'
  printf 'same cell at 2e-4.\n\n'
  for cell in oracle_blame grpo_lambda srpo_oracle; do
    for metric in pass@1 greedy_pass@1; do
      python examples/contrast.py "$O/main" "$cell@grpo_rate" "$cell@tuned" --metric "$metric"
      printf '\n'
    done
  done
  } > "$O/rate-contrasts.md.tmp"
  mv "$O/rate-contrasts.md.tmp" "$O/rate-contrasts.md"
fi
folders=()
for output in main survey decisive-fragile; do
  [ -f "$O/$output/report.json" ] && folders+=("$O/$output")
done
if [ ${#folders[@]} -gt 0 ]; then
  python examples/study_verdicts.py "${folders[@]}" > "$O/verdicts.md.tmp" && mv "$O/verdicts.md.tmp" "$O/verdicts.md"
fi
gradient_variance_table() {  # gradient_variance_table TITLE SUFFIX: the start and trained JSONs measured so far
  local columns=() policy
  for policy in start trained; do
    [ -f "$O/gradient_variance_$policy$2.json" ] && columns+=("$policy=$O/gradient_variance_$policy$2.json")
  done
  [ ${#columns[@]} -gt 0 ] || return 0
  printf '## %s\n\n' "$1"
  python examples/gradient_variance_table.py "${columns[@]}"
  printf '\n'
}
tables=$(
  gradient_variance_table "At the sampling policy: the whole batch, ratio 1" ""
  gradient_variance_table "Off policy: the 4th mini-batch after 3 optimiser steps" "_off_policy"
)
if [ -n "$tables" ]; then
  {
  printf '# The gradient variance of IBPO in the long regime\n\n'
  printf 'Made by `reports.sh` (`python examples/gradient_variance_table.py`) from the measurements of\n'
  printf '`gradient_variance.sh`; what they say: [the results page](README.md#gradient-variance-ibpos-claim-in-the-long-regime).\n\n'
  printf '%s\n' "$tables"
  } > "$O/gradient-variance.md.tmp"
  mv "$O/gradient-variance.md.tmp" "$O/gradient-variance.md"
else echo "reports.sh: no gradient-variance measurements yet, skipped"; fi
