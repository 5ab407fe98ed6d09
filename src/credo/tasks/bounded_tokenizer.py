"""A tokenizer from disk applied to model output, bounded in time and memory per answer.

A reward model's tokenizer is input like its weights: its `tokenizer.json` names regexes that the Rust engine runs
with backtracking, so a hostile one turns an ordinary response into minutes of tokenizing (`(a+)+b`: 0.2 s on 22
letters, about 52 s on a 16 KB response of such runs), or into a panic (a `BaseException`). `BoundedTokenizer` writes
the loaded tokenizer's own state (`backend_tokenizer.to_str()`, so the ids are exactly the ones it gives) to a private
file and tokenizes each text in its own call of a sandbox worker (`credo.tasks.sandbox`, `scorers/tokenizer_scorer`),
bounded by `TOKENIZE_SECONDS`; the padding is done here, by the tokenizer's own `pad`, which runs no regex. A text
that overruns its bound, or on which the tokenizer panics, is a RuntimeError naming the rows; every other text keeps
its own bound.

Slow (Python) tokenizers run their library's own patterns, not the file's, and tokenize in this process, as every
tokenizer does off Linux (no worker there); a panic there is a RuntimeError too.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from credo.tasks.base import describe_error
from credo.tasks.sandbox import Sandbox

TOKENIZE_SECONDS = 2.0
"""The longest one text's tokenization may take (a real tokenizer takes about a millisecond per 10 KB)."""


class BoundedTokenizer:
    """`BoundedTokenizer(tokenizer, name)(texts)` is `tokenizer(text=texts, return_tensors="pt", padding=True,
    padding_side="right", add_special_tokens=False)`, each text tokenized within `TOKENIZE_SECONDS`."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self.sandbox: Sandbox | None = None
        if tokenizer.is_fast and sys.platform.startswith("linux"):
            folder = Path(tempfile.mkdtemp(prefix="credo-tokenizer-"))
            self.path = folder / "tokenizer.json"
            self.path.write_text(tokenizer.backend_tokenizer.to_str())
            self.sandbox = Sandbox(f"{name} tokenizer", "tokenizer_scorer", files=(self.path,))
            weakref.finalize(self, _remove, self.sandbox, folder)

    def __call__(self, texts: Sequence[str]) -> Any:
        """The texts' padded `BatchEncoding` (`input_ids`, `attention_mask`, and `token_type_ids` where the
        tokenizer's model takes them), as tensors."""
        if self.sandbox is None:
            return self._in_process(texts)
        outcomes = self.sandbox.call_many("encode", [(str(self.path), text) for text in texts], TOKENIZE_SECONDS)
        failed = [row for row, outcome in enumerate(outcomes) if outcome.failed or outcome.error is not None]
        if failed:
            rows = ", ".join(str(row + 1) for row in failed[:10]) + (", ..." if len(failed) > 10 else "")
            raise RuntimeError(f"{self.name}'s tokenizer took more than {TOKENIZE_SECONDS:g} s, or failed, on row "
                               f"{rows} of {len(texts)}; credo stops it there (check its tokenizer.json)")
        features: dict[str, list[list[int]]] = {"input_ids": [outcome.value[0] for outcome in outcomes]}
        if "token_type_ids" in self.tokenizer.model_input_names:
            features["token_type_ids"] = [outcome.value[1] for outcome in outcomes]
        return self.tokenizer.pad(features, padding=True, padding_side="right", return_tensors="pt")

    def _in_process(self, texts: Sequence[str]) -> Any:
        try:
            return self.tokenizer(text=list(texts), return_tensors="pt", padding=True, padding_side="right",
                                  add_special_tokens=False)
        except BaseException as error:
            if not is_panic(error):
                raise
            raise RuntimeError(f"{self.name}'s tokenizer panicked: {describe_error(error)}") from None


def is_panic(error: BaseException) -> bool:
    """Whether `error` is a panic of Rust code (a tokenizer's) surfaced by pyo3: a `PanicException`, a
    `BaseException` that no module exports to catch by type."""
    return type(error).__name__ == "PanicException"


def _remove(sandbox: Sandbox, folder: Path) -> None:
    sandbox.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
