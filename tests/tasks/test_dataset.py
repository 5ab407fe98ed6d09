"""The `dataset` task: local parquet / JSON / JSON Lines / arrow files read with `datasets`, column mapping,
chat-format prompts rendered with the chat template, `system_prompt`, and custom rewards over its columns."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

datasets = pytest.importorskip("datasets")

from credo.config import ConfigError, load_config
from credo.rollout.generate import encode_prompts
from credo.tasks import build_task, verify_all
from credo.tasks.chat import ChatPrompt, system_role
from credo.tasks.dataset import read_rows
from credo.testbed import build_tokenizer

ROWS = {
    "question": [f"What is {i} + {i}?" for i in range(10)],
    "solution": [2 * i for i in range(10)],
    "level": ["easy" if i < 5 else "hard" for i in range(10)],
    "source": ["toy"] * 10,
}

SYSTEM_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                   "{% if add_generation_prompt %}<|assistant|>{% endif %}")
"""A chat template with a system role (every role rendered under its own tag)."""

NO_SYSTEM_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                      "{{ raise_exception('System role not supported') }}{% endif %}"
                      "<|user|>{{ m['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
"""A chat template that refuses system messages (as Gemma's does)."""

DROPPING_TEMPLATE = ("{% for m in messages %}{% if m['role'] != 'system' %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>"
                     "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
"""A chat template that silently drops system messages."""


def write(data: datasets.Dataset, path, kind: str) -> str:
    """`data` written to `path` as `kind` with `datasets` itself."""
    if kind == "parquet":
        data.to_parquet(str(path))
    elif kind == "json":
        data.to_json(str(path), lines=False)
    elif kind == "jsonl":
        data.to_json(str(path))
    elif kind == "arrow-dir":
        data.save_to_disk(str(path))
    elif kind == "arrow":
        data.save_to_disk(str(path.parent / "saved"))
        [arrow] = (path.parent / "saved").glob("*.arrow")
        arrow.rename(path)
    return str(path)


def task_of(options: dict, overrides: list[str] = ()):
    """The task `options` describe, loaded as a run config's task (so validated the way `credo train` does)."""
    return build_task(load_config(None, [f"task={json.dumps({'name': 'dataset', **options})}", *overrides]).task)


def encodes_as(tokenizer, prompts, texts: list[str]) -> bool:
    """Whether `encode_prompts` gives the token ids of `texts` (compared as ids: the testbed's character
    tokenizer has no token for a newline, so decoding would not give the text back)."""
    special = tokenizer.chat_template is None  # a bare tokenizer adds its special tokens itself
    return encode_prompts(tokenizer, prompts) == tokenizer(texts, add_special_tokens=special)["input_ids"]


# ------------------------------------------------------------------------------------------ formats


@pytest.mark.parametrize(("kind", "name"), [
    ("parquet", "train.parquet"),
    ("json", "train.json"),
    ("jsonl", "train.jsonl"),
    ("arrow", "train.arrow"),
    ("arrow-dir", "train_dir"),
])
def test_each_format_with_column_mapping(tmp_path, kind, name):
    path = write(datasets.Dataset.from_dict(ROWS), tmp_path / name, kind)
    task = task_of({"path": path, "prompt_column": "question", "answer_column": "solution",
                    "difficulty_column": "level", "eval_fraction": 0.2})
    problems = task.train + task.held_out
    assert len(task.held_out) == 2 and len(task.train) == 8
    assert sorted((p.prompt, p.answer, p.difficulty) for p in problems) == sorted(
        (q, str(a), d) for q, a, d in zip(ROWS["question"], ROWS["solution"], ROWS["level"]))
    first = next(p for p in problems if p.prompt == "What is 3 + 3?")
    assert type(first.prompt) is str  # a plain prompt stays a plain string
    assert first.meta == {"solution": 6, "level": "easy", "source": "toy"}  # every column but the prompt's, raw
    # graded as the jsonl task grades
    verdicts, _ = verify_all(task, [first, first], ["so \\boxed{6}", "7"], "raise")
    assert [v.correct for v in verdicts] == [True, False]


def test_format_option_overrides_the_name_and_eval_path_splits(tmp_path):
    data = datasets.Dataset.from_dict({"prompt": ["a", "b"], "answer": ["1", "2"]})
    train = write(data, tmp_path / "train.data", "parquet")
    held_out = write(data.select([0]), tmp_path / "eval.data", "jsonl")
    with pytest.raises(ConfigError, match="cannot tell the format of .*train.data from its name"):
        task_of({"path": train, "eval_path": held_out, "format": "auto"})
    with pytest.raises(ValueError, match="cannot read it as parquet"):
        task_of({"path": train, "eval_path": held_out, "format": "parquet"})  # eval.data is JSON Lines
    task = task_of({"path": train, "eval_path": write(data.select([0]), tmp_path / "eval.parquet", "parquet"),
                    "format": "parquet"})
    assert [p.prompt for p in task.train] == ["a", "b"] and [p.prompt for p in task.held_out] == ["a"]


def test_dotted_answer_column_reads_verl_layout(tmp_path):
    data = datasets.Dataset.from_dict({
        "data_source": ["gsm8k", "gsm8k"],
        "prompt": [[{"role": "user", "content": "1+1?"}], [{"role": "user", "content": "2+2?"}]],
        "reward_model": [{"style": "rule", "ground_truth": "2"}, {"style": "rule", "ground_truth": "4"}],
    })
    task = task_of({"path": write(data, tmp_path / "verl.parquet", "parquet"), "answer_column": "reward_model.ground_truth",
                    "eval_fraction": 0.5})
    assert sorted((p.prompt, p.answer) for p in task.train + task.held_out) == [("1+1?", "2"), ("2+2?", "4")]


# -------------------------------------------------------------------------------------- chat prompts


def chat_data(tmp_path, system_prompt: str | None = None, instruction: str | None = None):
    data = datasets.Dataset.from_dict({
        "messages": [
            [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "1+1?"}],
            [{"role": "user", "content": "2+2?"}],
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "3+3?"}],
        ],
        "answer": ["2", "4", "6"],
    })
    options = {"path": write(data, tmp_path / "chat.jsonl", "jsonl"), "eval_path": write(data, tmp_path / "eval.jsonl", "jsonl")}
    if system_prompt is not None:
        options["system_prompt"] = system_prompt
    if instruction is not None:
        options["instruction"] = instruction
    return task_of(options)


def test_messages_column_is_a_chat_prompt_rendered_with_the_template(tmp_path):
    task = chat_data(tmp_path)
    system, plain, multi = task.train
    assert isinstance(system.prompt, ChatPrompt)
    assert system.prompt == "1+1?" and multi.prompt == "3+3?"  # as text: the last user message
    # a lone user message is conversational too (as TRL reads it: reward functions get its message list), and
    # renders as a plain prompt would
    assert isinstance(plain.prompt, ChatPrompt) and plain.prompt == "2+2?"
    tokenizer = build_tokenizer()
    tokenizer.chat_template = SYSTEM_TEMPLATE
    assert encodes_as(tokenizer, [p.prompt for p in task.train], [
        "<|system|>Be terse.<|end|><|user|>1+1?<|end|><|assistant|>",
        "<|user|>2+2?<|end|><|assistant|>",
        "<|user|>hi<|end|><|assistant|>hello<|end|><|user|>3+3?<|end|><|assistant|>",
    ])


def test_system_prompt_with_and_without_a_system_role(tmp_path):
    task = chat_data(tmp_path, system_prompt="You add numbers.", instruction="Box it.")
    prompts = [p.prompt for p in task.train]
    with_role = build_tokenizer()
    with_role.chat_template = SYSTEM_TEMPLATE
    assert system_role(with_role)
    assert encodes_as(with_role, prompts, [
        "<|system|>Be terse.<|end|><|user|>1+1?\n\nBox it.<|end|><|assistant|>",  # the row's own system message wins
        "<|system|>You add numbers.<|end|><|user|>2+2?\n\nBox it.<|end|><|assistant|>",
        "<|system|>You add numbers.<|end|><|user|>hi<|end|><|assistant|>hello<|end|><|user|>3+3?\n\nBox it.<|end|><|assistant|>",
    ])
    # the testbed's template renders a "system" message as an assistant turn: no system role, so it is folded
    testbed = build_tokenizer()
    assert not system_role(testbed)
    assert encodes_as(testbed, prompts[1:2], ["<|user|>You add numbers.\n\n2+2?\n\nBox it.<|end|><|assistant|>"])
    refusing = build_tokenizer()
    refusing.chat_template = NO_SYSTEM_TEMPLATE
    assert not system_role(refusing)
    assert encodes_as(refusing, prompts[:1], ["<|user|>Be terse.\n\n1+1?\n\nBox it.<|end|><|assistant|>"])
    dropping = build_tokenizer()
    dropping.chat_template = DROPPING_TEMPLATE
    assert not system_role(dropping)
    assert encodes_as(dropping, prompts[:1], ["<|user|>Be terse.\n\n1+1?\n\nBox it.<|end|><|assistant|>"])
    # without a chat template: the messages' contents, blank-line separated
    bare = build_tokenizer()
    bare.chat_template = None
    assert encodes_as(bare, prompts[1:2], ["You add numbers.\n\n2+2?\n\nBox it."])
    assert not encodes_as(bare, prompts[1:2], ["2+2?\n\nBox it."])


def test_plain_prompts_encode_as_before():
    tokenizer = build_tokenizer()
    assert [tokenizer.decode(ids) for ids in encode_prompts(tokenizer, ["07+5?"])] == ["<|user|>07+5?<|end|><|assistant|>"]


def test_system_prompt_on_plain_prompts_reaches_the_sampler(tmp_path):
    from scripted import ScriptedPolicy

    from credo.rollout.groups import sample_round
    from credo.rollout.samplers import RolloutConfig

    data = datasets.Dataset.from_dict({"prompt": ["1+1?", "2+2?"], "answer": ["2", "4"]})
    path = write(data, tmp_path / "d.parquet", "parquet")
    task = task_of({"path": path, "eval_path": path, "system_prompt": "Add."})
    seen = []
    policy = ScriptedPolicy(lambda user: seen.append(user) or "\\boxed{4}")
    rollout = sample_round(policy, task, task.held_out, RolloutConfig(group_size=2))
    # folded into the user message: the testbed template has no system role (and its tokenizer no newline)
    assert [(u[:4], u[-4:]) for u in seen] == [("Add.", "1+1?")] * 2 + [("Add.", "2+2?")] * 2
    assert rollout.rewards.tolist() == [0.0, 0.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------------ rewards


def test_custom_reward_gets_the_rows_columns(tmp_path, monkeypatch):
    (tmp_path / "ds_rewards.py").write_text(textwrap.dedent('''
        def by_column(prompts, completions, solution, level, **kw):
            return [float(c.strip() == str(s)) + (0.5 if l == "hard" else 0.0)
                    for c, s, l in zip(completions, solution, level)]
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "ds_rewards", raising=False)
    data = datasets.Dataset.from_dict(ROWS)
    path = write(data, tmp_path / "d.parquet", "parquet")
    task = task_of({"path": path, "eval_path": path, "prompt_column": "question", "reward": "ds_rewards:by_column"})
    verdicts, _ = verify_all(task, task.held_out[4:6], ["8", "10"], "raise")
    assert [v.reward for v in verdicts] == [1.0, 1.5]  # solution is the raw int column; level picks the bonus
    sys.modules.pop("ds_rewards")


def test_with_a_custom_reward_the_answer_column_may_be_missing(tmp_path, monkeypatch):
    (tmp_path / "fmt_rewards.py").write_text("def fmt(completions, **kw):\n    return [1.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "fmt_rewards", raising=False)
    path = write(datasets.Dataset.from_dict({"prompt": ["a", "b"]}), tmp_path / "p.parquet", "parquet")
    with pytest.raises(ValueError, match=r"no column 'answer' \(answer_column\)"):
        task_of({"path": path, "eval_path": path})
    task = task_of({"path": path, "eval_path": path, "reward": "fmt_rewards:fmt"})
    assert [p.answer for p in task.train] == ["", ""]
    sys.modules.pop("fmt_rewards")


# ------------------------------------------------------------------------------------------- errors


def test_malformed_rows_name_file_row_and_column(tmp_path):
    bad_prompt = write(datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]],
                                                   "answer": ["1"]}), tmp_path / "bad.jsonl", "jsonl")
    with pytest.raises(ValueError, match=r"bad.jsonl row 0: column 'prompt' must be a string or a list of .*must end with a user message"):
        task_of({"path": bad_prompt, "eval_path": bad_prompt})
    bad_answer = write(datasets.Dataset.from_dict({"prompt": ["q", "r"], "answer": [None, "2"]}), tmp_path / "a.parquet", "parquet")
    with pytest.raises(ValueError, match=r"a.parquet row 0: column 'answer' must be a string or a number, got None"):
        task_of({"path": bad_answer, "eval_path": bad_answer})
    with pytest.raises(ValueError, match=r"no column 'query' \(prompt_column\); columns: prompt, answer"):
        task_of({"path": bad_answer, "eval_path": bad_answer, "prompt_column": "query"})
    with pytest.raises(FileNotFoundError, match="missing.parquet does not exist"):
        task_of({"path": str(tmp_path / "missing.parquet"), "eval_path": bad_answer})


def test_dataset_dict_directory_points_at_a_split(tmp_path):
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"prompt": ["q"], "answer": ["1"]})})
    splits.save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(ValueError, match=r"holds a DatasetDict \(splits train\); point path at one split's directory"):
        task_of({"path": str(tmp_path / "splits"), "eval_path": str(tmp_path / "splits" / "train")})
    task = task_of({"path": str(tmp_path / "splits" / "train"), "eval_path": str(tmp_path / "splits" / "train")})
    assert task.train[0].prompt == "q"


def test_missing_datasets_package_says_which_extra(monkeypatch):
    from credo.extras import MissingExtra
    from credo.tasks import dataset

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(MissingExtra, match=r"install it with: pip install 'credo\[data\]'"):
        dataset.datasets_module()


def test_an_unreadable_or_empty_file_is_named_once(tmp_path, capfd):
    """`datasets` logs a parquet file it cannot read before it raises: credo's one error names the file, and
    nothing else is printed; an empty file says so."""
    fake = tmp_path / "fake.parquet"
    fake.write_text("not parquet")
    with pytest.raises(ValueError, match=r"fake.parquet: cannot read it as parquet: "):
        read_rows(fake)
    assert "Failed to read schema" not in "".join(capfd.readouterr())
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty.jsonl: an empty file, no rows$"):
        read_rows(empty)


def test_a_parquet_file_of_millions_of_rows_in_kilobytes_is_refused_before_it_inflates(tmp_path):
    """5M repeated rows compress to tens of kilobytes; their dicts would take gigabytes. The footer's row count
    refuses the file before any column is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from credo.tasks.data_limits import MAX_ROWS
    from credo.tasks.dataset import read_rows

    path = tmp_path / "bomb.parquet"
    rows = MAX_ROWS * 5 // 2
    table = pa.table({"prompt": pa.array(["q"] * rows), "answer": pa.array(["1"] * rows)})
    pq.write_table(table, path, compression="zstd")
    assert path.stat().st_size < 2**20
    with pytest.raises(ValueError, match=r"bomb.parquet: 5,000,000 rows, .* above the 2,000,000 rows"):
        read_rows(path)


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("reader", ["jsonl", "json"])
def test_a_json_lines_path_that_is_a_fifo_or_dev_zero_is_refused_at_once(tmp_path, kind, reader):
    """A FIFO would block the read forever and `/dev/zero` never end it: both are refused before the read (the
    read runs in a thread so that a regression fails the test instead of hanging it)."""
    import os
    import threading

    from credo.tasks.dataset import read_rows
    from credo.tasks.jsonl import read_problems

    path = tmp_path / "data.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    errors: list[BaseException] = []

    def read() -> None:
        try:
            (read_problems if reader == "jsonl" else read_rows)(path)
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            errors.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and errors and "not a regular file" in str(errors[0])


def test_json_lines_larger_or_longer_than_credo_reads_are_refused(tmp_path, monkeypatch):
    import credo.tasks.data_limits as limits
    from credo.tasks.dataset import read_rows
    from credo.tasks.jsonl import read_problems

    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) + "\n" for i in range(50)))
    monkeypatch.setattr(limits, "MAX_ROWS", 20)
    for read in (read_problems, read_rows):
        with pytest.raises(limits.TooLarge, match=r"data.jsonl: (21|50) rows, above the 20"):
            read(path)
    monkeypatch.setattr(limits, "MAX_TEXT_BYTES", 1000)
    for read in (read_problems, read_rows):
        with pytest.raises(ValueError, match=r"data.jsonl: 1,[0-9]{3} bytes, above the 1,000 bytes"):
            read(path)
