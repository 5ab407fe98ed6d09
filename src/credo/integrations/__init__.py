"""Adapters that run credo's credit estimators and losses inside other engines: TRL (`trl`) and verl (`verl`).

Each module imports its engine lazily (optional extras `credo[trl]`, `credo[verl]`) and holds adapters only:
the math stays in `credo.credit` and `credo.losses`.
"""
