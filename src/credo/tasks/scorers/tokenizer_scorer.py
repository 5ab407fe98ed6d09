"""Model output tokenized by a tokenizer from disk, run in the sandbox worker (see `credo.tasks.bounded_tokenizer`).

A fast tokenizer's `tokenizer.json` names the regexes its normalizer and pre-tokenizer run, and the engine that runs
them (Oniguruma) backtracks: a pattern such as `(a+)+b` takes 0.2 s on 22 letters, so a response made of such runs
takes minutes, each run under the engine's own retry limit. Each answer is one call, with its own bound.
"""

from __future__ import annotations

_LOADED: dict[str, object] = {}
"""Tokenizers loaded in the worker (by `prepare`), by file path; each call's child inherits them."""

PREPARE = {"encode": 1}


def setup() -> None:
    """Import the tokenizers library once (Rust; no torch, no transformers)."""
    import tokenizers  # noqa: F401


def prepare(path: str) -> None:
    """Load the tokenizer file credo wrote (a trusted argument) once, without padding or truncation."""
    if path not in _LOADED:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(path)
        tokenizer.no_padding()
        tokenizer.no_truncation()
        _LOADED[path] = tokenizer


def encode(path: str, text: str) -> list[list[int]]:
    """`text`'s token ids and token type ids with no special tokens added, as
    `tokenizer(text, add_special_tokens=False)` gives them."""
    prepare(path)
    encoding = _LOADED[path].encode(text, add_special_tokens=False)
    return [encoding.ids, encoding.type_ids]
