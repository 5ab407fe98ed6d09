"""`python -m credo` is the `credo` command."""

from credo.cli import app

app()
