"""Scorer modules that run inside a sandbox worker (`credo.tasks.sandbox`), loaded there by file path.

Each is a file of plain functions (an optional `setup()` runs once when a worker starts) taking and returning
picklable arguments and JSON values. They must import no credo code: the worker loads none (no torch).
"""
