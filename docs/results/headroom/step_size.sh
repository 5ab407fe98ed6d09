#!/usr/bin/env bash
# Part B of the headroom map (plan.md): assembles GRPO's learning rates and the first-error oracle in the long regime
# on seeds 4-7 from the run records (long-main's grpo@tuned and oracle_blame@grpo_rate, long-step-size's three rates;
# docs/results/long-study/records/) into one study folder, and writes its report (sampled pass@1 area, greedy as a
# secondary endpoint in the same Holm family).
# Usage, from the repository root: bash docs/results/headroom/step_size.sh
set -euo pipefail
HERE=docs/results/headroom
RECORDS=docs/results/long-study/records
OUT=$HERE/step-size-records
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp/default"
cp "$HERE/step_size_study.yaml" "$OUT.tmp/study.yaml"
for seed in 4 5 6 7; do
  for pair in "long-main/default/grpo@tuned:grpo@1.0e-4" "long-main/default/oracle_blame@grpo_rate:oracle_blame@1.0e-4" \
              "long-step-size/default/grpo@1.25e-4:grpo@1.25e-4" "long-step-size/default/grpo@1.5e-4:grpo@1.5e-4" \
              "long-step-size/default/grpo@2.0e-4:grpo@2.0e-4"; do
    from=$RECORDS/${pair%%:*}/seed$seed
    to=$OUT.tmp/default/${pair##*:}/seed$seed
    [ -f "$from/summary.json" ] || continue
    mkdir -p "$to"
    cp "$from/config.yaml" "$from/metrics.jsonl" "$from/summary.json" "$to/"
  done
done
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
credo report "$OUT" -o "$HERE/step-size"
