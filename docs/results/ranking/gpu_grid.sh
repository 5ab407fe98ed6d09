#!/usr/bin/env bash
# The ranking study's cells of some seeds on a lent GPU, all at once (docs/results/ranking/plan.md, amendment 4;
# docs/results/gpu.md): `credo compare --seeds` into runs/gpu under a time limit, then every run's records packed into
# one archive for the machine's way back. The GPU machine has no package registry: the wheels it lacks travel in .whl
# (py3.12: pydantic, pydantic-core, annotated-types, typing-inspection, typer, annotated-doc, google-re2 and
# transformers 5.24; `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl`) and are installed
# there into /tmp/site. Unpack the archive here and copy each finished run (a summary.json) into the study's directory
# before the CPU grid reaches those seeds; `credo compare` then counts them as done.
# Usage, from the repository root on the GPU machine (OUT: the folder that comes back):
#   SEEDS=29 JOBS=13 LIMIT=430 OUT=$OUT bash docs/results/ranking/gpu_grid.sh
set -u
cd "$(dirname "$0")/../../.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
STUDY=${STUDY:-configs/studies/ranking_main.yaml}; SEEDS=${SEEDS:?give the seeds, e.g. SEEDS=29}
JOBS=${JOBS:-13}; LIMIT=${LIMIT:-430}; DEST=${OUT:?give OUT, the folder that comes back}
mkdir -p "$DEST"
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"
start=$(date +%s)
timeout "$LIMIT" python3 -m credo compare "$STUDY" -o runs/gpu --seeds "$SEEDS" --jobs "$JOBS" > "$DEST/compare.log" 2>&1
echo "compare rc=$? wall=$(( $(date +%s) - start )) s"
find runs/gpu \( -name summary.json -o -name metrics.jsonl -o -name config.yaml -o -name study.yaml \) |
  tar czf "$DEST/gpu-runs.tgz" -T -
echo "finished runs: $(find runs/gpu -name summary.json | wc -l)"
grep -v "Loading weights\|Writing model" "$DEST/compare.log" | tail -25
