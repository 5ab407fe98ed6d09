"""Scorer modules that run inside a sandbox worker (`credo.tasks.sandbox`), loaded there by file path.

Each is a file of plain functions (an optional `setup()` runs once when a worker starts) taking and returning
picklable arguments and JSON values. They must import no credo code: the worker loads none (no torch).
Each call runs in a fresh child of the worker, so whatever a call changes (a module-level cache included)
is gone by the next call. What a module wants kept, it builds in the worker: in `setup()`, or in
`prepare(*args[:n])`, which the worker runs before forking a call's child when the module's `PREPARE` maps
the function's name to `n`; those first `n` arguments must never come from model output.
A function listed in the module's `SHARED_CHILD` (one that reads its arguments as data, runs nothing of them and
keeps nothing) has the calls of one request share a child instead, each under its own time bound (the agent
environments' `step`); it cannot also be in `PREPARE`.
"""
