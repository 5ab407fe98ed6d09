#!/usr/bin/env bash
# Every report of the long-horizon study (docs/results/long-study/plan.md), tables and figures, from the committed
# run records (docs/results/long-study/records/, written by records.sh): one command, from the repository root.
#   main/, survey/: sampled pass@1 area, the plan's headline (Holm within each family);
#   main-greedy/, survey-greedy/: the same runs' greedy pass@1 verdicts (Holm within each family);
#   decisive-retune/: phase 4's tuning on the decisive regime; decisive-fragile/: its re-run (greedy area, that
#   regime's headline; sampled pass@1 at the end only);
#   tuning/: phase 1, redrawn from its report.json (its runs' records were not kept);
#   verdicts.md: every family's verdicts side by side, a column per report (examples/study_verdicts.py).
# A study whose records are not there yet is skipped with a line saying so.
# Usage: bash docs/results/long-study/reports.sh
set -euo pipefail
R=docs/results/long-study/records
O=docs/results/long-study
report() {  # report STUDY OUTPUT [ARGS...]
  local study=$1 output=$2
  shift 2
  if [ ! -f "$R/$study/study.yaml" ]; then echo "reports.sh: no records of $study yet, skipped"; return; fi
  credo report "$R/$study" -o "$O/$output" "$@"
}
report long-main main
report long-main main-greedy --metric greedy_pass@1
report long-survey survey
report long-survey survey-greedy --metric greedy_pass@1
report plan-decisive-retune decisive-retune
report decisive-fragile decisive-fragile
credo report "$O/tuning" --from-json
folders=()
for output in main main-greedy survey survey-greedy decisive-fragile; do
  [ -f "$O/$output/report.json" ] && folders+=("$O/$output")
done
if [ ${#folders[@]} -gt 0 ]; then
  python examples/study_verdicts.py "${folders[@]}" > "$O/verdicts.md.tmp" && mv "$O/verdicts.md.tmp" "$O/verdicts.md"
fi
