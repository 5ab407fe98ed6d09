"""Bring your own data: the `dataset` task, local Hugging Face `datasets` files of prompts and answers.

`path` (and `eval_path`) is a parquet file, a JSON file (a list of records) or JSON Lines file, an `.arrow`
file, or a directory written by `Dataset.save_to_disk` (for a `DatasetDict`, its split's subdirectory, e.g.
`data/train`); `format` says which, or "auto" reads it from the name (`.parquet`, `.json`, `.jsonl`,
`.arrow`, a directory). They are read with the `datasets` package (`pip install 'credo[data]'`).

Each row is a problem:

- the prompt is column `prompt_column` (default: "prompt", else "messages" when the file has no "prompt"): a
  string, the user message as the `jsonl` task has it, or a list of `{role, content}` messages ending with a
  user message (TRL's conversational format), which the model's chat template renders whole (a
  `credo.tasks.ChatPrompt`; see `credo.tasks.chat`);
- `system_prompt`, when set, is prepended as a system message, on a template without a system role
  (the testbed's) folded into the first user message, and without any chat template prepended as text (a
  blank line between); a row whose messages begin with a system message keeps its own;
- `instruction` is appended to the (last) user message after a blank line;
- the answer is column `answer_column` (default "answer"; a dotted name reaches into a struct column, e.g.
  verl's `reward_model.ground_truth`): a string or a number. With a custom `reward` the answer may be
  missing or of any type (its string form is the ground truth; reward functions get the raw value);
- the difficulty bucket is column `difficulty_column` (default: "difficulty" when the file has one): a
  string or an integer;
- every column but the prompt's is kept, raw, in the problem's `meta`: custom reward functions get them as
  keyword arguments (`credo.tasks.rewards`).

Responses are graded as by the `jsonl` task (`match`: the last `\\boxed{}`, the last number, or math-verify),
or by custom reward functions (`reward`). The held-out set is `eval_path`, or `eval_fraction` of `path` (a
fixed seeded split, as for `jsonl`). A malformed row is an error naming the file, the row (0-based) and
the column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from credo.extras import require
from credo.tasks.base import TASKS, Problem, short_repr
from credo.tasks.chat import ChatPrompt, check_messages, with_instruction, with_system
from credo.tasks.data_limits import TooLarge, check_parquet_size, check_rows, check_text_file
from credo.tasks.jsonl import JsonlConfig, JsonlTask

FORMATS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".arrow": "arrow"}
"""File name endings and the format `format: auto` reads them as (a directory: "arrow", `save_to_disk`)."""


class DatasetConfig(JsonlConfig):
    """The `jsonl` task's options (held-out split, `match`, `instruction`, `reward`) with other files and columns."""

    name: str = "dataset"
    """The task's name in `task.name`: "dataset"."""
    path: str
    """Training problems: a parquet, JSON, JSON Lines or arrow file, or a `save_to_disk` directory."""
    eval_path: str | None = None
    """Held-out problems (same format options); None: hold out `eval_fraction` of `path` (a seeded split)."""
    format: Literal["auto", "parquet", "json", "jsonl", "arrow"] = "auto"
    """How the files are read; "auto": from the name (.parquet, .json, .jsonl, .arrow, a directory: arrow)."""
    prompt_column: str | None = None
    """The prompt's column: a string or a list of {role, content} messages; None: "prompt", else "messages"."""
    answer_column: str = "answer"
    """The ground truth's column; a dotted name reaches into a struct column ("reward_model.ground_truth")."""
    difficulty_column: str | None = None
    """The eval bucket's column (a string or an integer); None: "difficulty" when the file has it, else "all"."""
    system_prompt: str | None = None
    """A system message put before every prompt (folded into the user message where the template has no system role)."""
    instruction: str | None = None
    """Text appended to every prompt's (last) user message after a blank line (None or "": the prompt alone)."""

    @model_validator(mode="after")
    def _readable(self) -> DatasetConfig:
        datasets_module()
        for path in (self.path, self.eval_path):
            if path is not None:
                file_format(path, self.format)
        return self


def datasets_module() -> Any:
    """The `datasets` package, or a `MissingExtra` that says to install credo[data]."""
    return require("datasets", "data", "the dataset task (reading parquet, JSON and arrow files)")


def file_format(path: str | Path, given: str) -> str:
    """The format `path` is read as: `given`, or with "auto" the one its name says ("jsonl" reads as "json")."""
    if given != "auto":
        return "json" if given == "jsonl" else given
    path = Path(path)
    if path.is_dir():
        return "arrow"
    suffixes = [s.lower() for s in path.suffixes]
    for suffix in reversed(suffixes):
        if suffix in FORMATS:
            return FORMATS[suffix]
    raise ValueError(f"cannot tell the format of {path} from its name; set format to parquet, json, jsonl or arrow")


@contextmanager
def _quiet(datasets: Any) -> Iterator[None]:
    """Without `datasets`' progress bars (credo logs its own progress) and its error logs (a file it cannot read is
    logged there before it raises; credo's own error names the file once)."""
    logging = datasets.utils.logging
    enabled, verbosity = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity(logging.CRITICAL)
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if enabled:
            logging.enable_progress_bar()


def read_rows(path: str | Path, given: str = "auto") -> list[dict[str, Any]]:
    """The rows of a local dataset file (or `save_to_disk` directory) as dicts; errors name the file."""
    datasets = datasets_module()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(f"{path}: an empty file, no rows")
    kind = file_format(path, given)
    try:
        with _quiet(datasets):
            if kind == "parquet":
                if path.is_file():
                    check_parquet_size(path)
                data = datasets.Dataset.from_parquet(str(path))
            elif kind == "json":
                check_text_file(path)
                data = datasets.Dataset.from_json(str(path))
            elif path.is_dir():
                data = datasets.load_from_disk(str(path))
            else:
                data = datasets.Dataset.from_file(str(path))
    except TooLarge:
        raise
    except Exception as error:
        text = " ".join(str(error).split())[:300]
        raise ValueError(f"{path}: cannot read it as {kind}: {type(error).__name__}: {text}") from None
    if isinstance(data, datasets.DatasetDict):
        raise ValueError(f"{path} holds a DatasetDict (splits {', '.join(data)}); point path at one split's "
                         f"directory, e.g. {path / next(iter(data))}")
    check_rows(path, data.num_rows)
    rows = data.to_list()
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def lookup(row: Mapping[str, Any], column: str) -> tuple[bool, Any]:
    """(found, value) of `column` in `row`; a dotted name walks into struct (dict) columns."""
    if column in row:
        return True, row[column]
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


@TASKS.register("dataset")
class DatasetTask(JsonlTask):
    """Problems from local `datasets` files (see the module docstring); split, sampled and graded as `jsonl`."""

    name = "dataset"
    Config = DatasetConfig

    def read(self, path: str) -> list[Problem]:
        """The problems of one file: its rows with the config's column mapping, system prompt and instruction."""
        config = self.config
        rows = read_rows(path, config.format)
        columns = rows[0].keys()
        prompt_column = config.prompt_column or ("prompt" if "prompt" in columns or "messages" not in columns
                                                 else "messages")
        difficulty_column = config.difficulty_column or ("difficulty" if "difficulty" in columns else None)
        for column, what in ((prompt_column, "prompt_column"), (difficulty_column, "difficulty_column")):
            if column is not None and column not in columns:
                raise ValueError(f"{path}: no column {column!r} ({what}); columns: {', '.join(columns)}")
        if config.answer_column not in columns and not lookup(rows[0], config.answer_column)[0] and not config.reward:
            raise ValueError(f"{path}: no column {config.answer_column!r} (answer_column); columns: {', '.join(columns)}")
        return [self._problem(path, i, row, prompt_column, difficulty_column) for i, row in enumerate(rows)]

    def _problem(self, path: str, index: int, row: dict[str, Any], prompt_column: str,
                 difficulty_column: str | None) -> Problem:
        config, where = self.config, f"{path} row {index}"
        value = row[prompt_column]
        if isinstance(value, str):
            prompt: str = value
        else:
            try:
                messages = check_messages(value)
            except ValueError as error:
                raise ValueError(f"{where}: column {prompt_column!r} must be a string or a list of "
                                 f"{{role, content}} messages ending with a user message: {error}") from None
            prompt = ChatPrompt(messages)  # conversational, as TRL reads it, even a lone user message
        prompt = with_system(with_instruction(prompt, config.instruction), config.system_prompt)

        found, answer = lookup(row, config.answer_column)
        if config.reward:  # custom reward functions grade: any answer (they get the raw value)
            answer = "" if answer is None else str(answer)
        elif not found or answer is None or isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            got = "nothing" if not found else short_repr(answer)
            raise ValueError(f"{where}: column {config.answer_column!r} must be a string or a number, got {got}")
        difficulty = "all" if difficulty_column is None else row[difficulty_column]
        if isinstance(difficulty, bool) or not isinstance(difficulty, (str, int)):
            raise ValueError(f"{where}: column {difficulty_column!r} must be a string or an integer, "
                             f"got {short_repr(difficulty)}")
        meta = {key: item for key, item in row.items() if key != prompt_column}
        return Problem(prompt, str(answer), str(difficulty), meta)
