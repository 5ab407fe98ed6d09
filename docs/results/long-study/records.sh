#!/usr/bin/env bash
# The long-horizon study's run records, committed so that the study spans sittings on machines that keep nothing
# but the repository, and so that every report can be recomputed from the runs' own logs.
# For each finished run (a `summary.json`) of `runs/studies/NAME`, `save` copies its `metrics.jsonl` (every step's
# and every evaluation's record), `summary.json` and `config.yaml`, and the resolved `study.yaml`, to
# `docs/results/long-study/records/NAME/`, and of each seed-0 run the samples logged at step 1 (`samples.jsonl`,
# about 85 kB: what the report's credit heatmaps show); the weights, checkpoints and other samples stay behind
# (3.4 MB and more per run). `restore` copies them back, so that `credo compare` counts those runs as done and runs only the rest.
# `credo report docs/results/long-study/records/NAME -o DIR` reads the records as it reads the study directory.
# Usage, from the repository root: bash docs/results/long-study/records.sh save|restore NAME [ROOT]
# (ROOT: the folder that holds the records, docs/results/long-study/records by default; the headroom map keeps its
# own, docs/results/headroom/records.)
set -euo pipefail
ACTION=${1:?give save or restore}
NAME=${2:?give the study name, e.g. long-main}
RUNS=runs/studies/$NAME
RECORDS=${3:-docs/results/long-study/records}/$NAME
case $ACTION in
  save) FROM=$RUNS; TO=$RECORDS;;
  restore) FROM=$RECORDS; TO=$RUNS;;
  *) echo "records.sh: unknown action '$ACTION' (save or restore)" >&2; exit 2;;
esac
[ -f "$FROM/study.yaml" ] || { echo "records.sh: $FROM holds no study.yaml; nothing to $ACTION" >&2; exit 1; }
mkdir -p "$TO"
cp "$FROM/study.yaml" "$TO/study.yaml"
count=0
while IFS= read -r summary; do
  run=$(dirname "${summary#"$FROM"/}")
  [ "$ACTION" = restore ] && [ -f "$TO/$run/summary.json" ] && continue
  mkdir -p "$TO/$run"
  # summary.json last: a run counts as finished only once its log and config are in place.
  if [ "$ACTION" = save ] && [ "${run##*/}" = seed0 ]; then
    python - "$FROM/$run/samples.jsonl" "$TO/$run/samples.jsonl.tmp" <<'PY'
import json, sys
with open(sys.argv[1]) as source, open(sys.argv[2], "w") as target:
    target.writelines(line for line in source if line.strip() and json.loads(line).get("step") == 1)
PY
    mv "$TO/$run/samples.jsonl.tmp" "$TO/$run/samples.jsonl"
  elif [ -f "$FROM/$run/samples.jsonl" ] && [ "$ACTION" = restore ]; then
    cp "$FROM/$run/samples.jsonl" "$TO/$run/samples.jsonl"
  fi
  for file in config.yaml metrics.jsonl summary.json; do
    cp "$FROM/$run/$file" "$TO/$run/$file.tmp" && mv "$TO/$run/$file.tmp" "$TO/$run/$file"
  done
  count=$((count + 1))
done < <(find "$FROM" -name summary.json | sort)
echo "records.sh: $ACTION $NAME: $count finished runs $FROM -> $TO"
