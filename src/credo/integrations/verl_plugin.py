"""Importing this module registers credo's methods and agent loops with verl (`credo.integrations.verl.register`)
and makes verl's config check run credo's (`credo.integrations.verl.hook_validate_config`).

credo declares it as a `verl.plugins` entry point (pyproject.toml), which verl loads in every process that
imports verl (its trainer and its Ray workers), so `credo_*` names resolve wherever verl looks them up once
credo is installed. Where verl's plugin discovery is turned off, `VERL_USE_EXTERNAL_MODULES=
credo.integrations.verl_plugin` does the same. Without verl installed, importing it does nothing.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("verl") is not None:
    from credo.integrations.verl import hook_validate_config, register

    register()
    hook_validate_config()
