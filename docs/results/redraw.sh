#!/usr/bin/env bash
# Every committed report drawn again with the current `credo report` (estimators, rules and text), one command:
# the studies whose run records are kept from those records (the long study's reports.sh, the headroom map and its
# step-size part), every other from its own folder (`--from-json`: its per-seed values where it kept them, else
# its rows). Then the tables other pages quote are made again by the scripts that made them (map.py, reports.sh,
# the ranking study's pages.py: its results page, scope block and the README's paragraph; the agent pilot's
# pages.py: its results page and the agents guide's paragraph).
# Usage, from the repository root: bash docs/results/redraw.sh
set -euo pipefail
R=docs/results
bash $R/long-study/reports.sh
credo report $R/headroom/records/headroom-map -o $R/headroom/map
python $R/headroom/map.py > /dev/null
bash $R/headroom/step_size.sh
credo report $R/headroom/records/headroom-tuning -o $R/headroom/tuning
credo report $R/headroom/records/headroom-study -o $R/headroom/study
credo report $R/ranking/records/ranking-tuning -o $R/ranking/tuning
if [ -d $R/ranking/records/ranking-main ]; then
  credo report $R/ranking/records/ranking-main -o $R/ranking/main
fi
python $R/ranking/pages.py
credo report $R/agents/pilot/records/agent-tuning -o $R/agents/pilot/tuning
if [ -d $R/agents/pilot/records/agent-pilot ]; then
  credo report $R/agents/pilot/records/agent-pilot -o $R/agents/pilot/report
fi
python $R/agents/pilot/pages.py
for folder in credit-decisive credit-hard credit-nocancel testbed-hard testbed-hard-fixes testbed-hard-step-credit \
              testbed-hard-vine-k testbed-hard-tuning long-horizon/pilot; do
  credo report $R/$folder --from-json --html
done
for folder in long-horizon/pilot4 long-horizon/pilot4-fit; do
  credo report $R/$folder --from-json
done
