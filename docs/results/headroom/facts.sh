#!/usr/bin/env bash
# Each headroom-map regime's facts on its starting model (`credo testbed facts`: start success, groups without a
# success, decision instances per type per batch, lucky share, ...) into facts/<regime>.json; a regime whose starting
# model is not built yet is built first (an SFT of about 14 minutes on one core). Regimes default to all eight.
# Usage, from the repository root: bash docs/results/headroom/facts.sh [REGIME ...]   (e.g. k100-n8-p06)
set -euo pipefail
HEADROOM=$PWD/configs/testbed/headroom
OUT=docs/results/headroom/facts
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
regimes=("$@")
[ ${#regimes[@]} -gt 0 ] || regimes=(k100-n8-p06 k100-n8-p037 k3-n8-p06 k3-n8-p037 k100-n3-p06 k100-n3-p037 k3-n3-p06 k3-n3-p037)
for regime in "${regimes[@]}"; do
  IFS=- read -r k n p <<< "$regime"
  echo "base: [$PWD/configs/testbed/grpo.yaml, $HEADROOM/regime.yaml, $HEADROOM/$k.yaml, $HEADROOM/$n.yaml, $HEADROOM/$p.yaml]" \
    > "$TMP/$regime.yaml"
  credo testbed facts "$TMP/$regime.yaml" --problems 64 --samples 8 --json "$OUT/$regime.json"
done
