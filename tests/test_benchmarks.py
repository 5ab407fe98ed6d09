"""Every script in benchmarks/ still runs: each in its `--quick` mode, as a user runs it, printing its result.

Benchmarks run by hand and rarely, so nothing else notices when a change to the library breaks one. Each
script (found by a glob: a new one is covered without listing it; `_*.py` are helper modules) runs in a fresh
Python process with `--quick` (tiny sizes and models, seconds) and must exit 0 and print a line
`RESULT name=value`. Timings are never checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_"))
RESULT_LINE = re.compile(r"^RESULT \w+=\S", re.MULTILINE)
TIMEOUT_S = 180
"""Per script; quick modes take seconds, and a script that builds the real testbed model (minutes) fails."""


def test_the_glob_finds_the_benchmarks():
    assert {"credit_overhead.py", "vs_trl.py"} <= {path.name for path in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_benchmark_runs_quick_and_prints_its_result(script: Path, tmp_path: Path):
    # One torch thread: on a CPU shared with other jobs, torch's thread pool makes small ops up to 100x slower.
    # The working directory is a temporary one, so that a benchmark can leave no files in the repository.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), "--quick"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S, check=False,
    )
    output = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, output
    assert RESULT_LINE.search(proc.stdout), output
