"""A sequence-classification reward model in `task.reward` (`{model: path}`, `credo.tasks.reward_model`): scored as
TRL's GRPOTrainer scores one, weighted and logged like a function, and a bad path a one-line config error."""

from __future__ import annotations

import json
import time

import pytest
import torch

from credo.config import ConfigError, load_config
from credo.tasks import build_task, verify_all
from credo.tasks.base import Problem
from credo.tasks.chat import ChatPrompt
from credo.testbed import build_tokenizer


def save_reward_model(directory, labels: int = 1):
    """A tiny Llama sequence classifier (random head) with the testbed's tokenizer and chat template."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=32, pad_token_id=tokenizer.pad_token_id,
                         num_labels=labels)
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.normal_(0, 1.0)  # rewards that differ visibly between texts
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def trl_scores(directory, prompts, completions) -> list[float]:
    """TRL 1.16's `_calculate_rewards` for a reward model, with TRL's own `apply_chat_template` where it is
    installed: the conversation (or prompt + completion) tokenized padding right, `logits[:, 0]`."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    if isinstance(prompts[0], list):
        from trl.data_utils import apply_chat_template

        texts = [apply_chat_template({"messages": p + c}, tokenizer)["text"] for p, c in zip(prompts, completions)]
    else:
        texts = [p + c for p, c in zip(prompts, completions)]
    inputs = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return model(**inputs).logits[:, 0].tolist()


def reward_task(tmp_path, reward):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) + "\n" for i in range(1, 4)))
    options = {"name": "jsonl", "path": str(path), "eval_path": str(path), "reward": reward}
    return build_task(load_config(None, [f"task={json.dumps(options)}"]).task)


RESPONSES = ["The answer is 1.", "2", "I think it is \\boxed{3} but maybe not"]


def test_plain_rows_score_as_trl_scores_them(tmp_path):
    directory = save_reward_model(tmp_path / "rm")
    task = reward_task(tmp_path, [{"model": str(directory), "weight": 2.0}])
    rows = task.eval_problems()
    verdicts, errors = verify_all(task, rows, RESPONSES, "raise")
    expected = trl_scores(directory, [p.prompt for p in rows], RESPONSES)
    assert errors == 0 and len(set(expected)) == 3
    assert [v.reward for v in verdicts] == pytest.approx([2 * e for e in expected], abs=1e-5)
    assert [v.terms[0][0] for v in verdicts] == ["rm"] * 3  # TRL's name: the path's last part
    assert [v.terms[0][1] for v in verdicts] == pytest.approx(expected, abs=1e-5)


def test_conversational_rows_render_with_the_reward_models_template(tmp_path):
    pytest.importorskip("trl")
    directory = save_reward_model(tmp_path / "rm")
    task = reward_task(tmp_path, [{"model": str(directory)}, {"function": "trl.rewards:think_format_reward"}])
    conversations = [[{"role": "user", "content": f"What is {i} + 0?"}] for i in range(3)]
    rows = [Problem(ChatPrompt(c), str(i)) for i, c in enumerate(conversations)]
    verdicts, _ = verify_all(task, rows, RESPONSES, "raise")
    expected = trl_scores(directory, conversations, [[{"role": "assistant", "content": r}] for r in RESPONSES])
    plain = trl_scores(directory, [p.prompt for p in rows], RESPONSES)
    assert [v.terms[0][1] for v in verdicts] == pytest.approx(expected, abs=1e-5)
    assert max(abs(a - b) for a, b in zip(expected, plain)) > 1e-3  # the template made a difference
    assert [v.terms[1] for v in verdicts] == [("think_format_reward", 0.0)] * 3


@pytest.mark.parametrize("entry, message", [
    ({"model": "no/such/dir"}, r"reward model 'no/such/dir': not a Hugging Face model directory \(no config.json"),
    ({"model": "x", "function": "m:f"}, "names either a function or a model: not both"),
    ({"weight": 2.0}, "names either a function or a model: give one"),
    ({"model": "x", "style": "verl"}, "style applies to functions only"),
])
def test_a_bad_reward_model_entry_is_a_config_error(tmp_path, entry, message):
    options = {"name": "jsonl", "path": "d.jsonl", "reward": [entry]}
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"task={json.dumps(options)}"])


def test_a_config_loaded_without_rewards_checks_only_the_form(tmp_path):
    options = {"name": "jsonl", "path": "d.jsonl", "reward": [{"model": "not/yet/there", "weight": 0.5}]}
    config = load_config(None, [f"task={json.dumps(options)}"], load_rewards=False)
    assert config.task["reward"][0]["model"] == "not/yet/there"
    options["reward"] = [{"model": "x", "function": "m:f"}]
    with pytest.raises(ConfigError, match="not both"):
        load_config(None, [f"task={json.dumps(options)}"], load_rewards=False)


def test_a_head_of_another_size_is_a_one_line_error(tmp_path):
    directory = save_reward_model(tmp_path / "rm2", labels=2)
    with pytest.raises(ValueError, match=r"reward model .*rm2' does not load as a sequence-classification model with "
                                         r"one label: RuntimeError"):
        reward_task(tmp_path, [{"model": str(directory)}])


def hostile_reward_model(directory):
    """A reward model whose `tokenizer.json` first splits on `(a+)+b`, which the regex engine backtracks on: 0.2 s
    on 22 letters `a`, and a panic (past the engine's retry limit) on 30."""
    save_reward_model(directory)
    state = json.loads((directory / "tokenizer.json").read_text())
    hostile = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False}
    state["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [hostile, state["pre_tokenizer"]]}
    (directory / "tokenizer.json").write_text(json.dumps(state))
    return directory


SLOW = ("a" * 22 + "c ") * 40
"""A response the hostile tokenizer takes about 8 s on, each run of letters under the engine's limit."""
PANIC = "a" * 30 + "c"


@pytest.mark.parametrize("hostile", [SLOW, PANIC], ids=["slow", "panic"])
def test_a_hostile_tokenizer_costs_one_bound_per_row_and_the_other_rows_score(tmp_path, monkeypatch, hostile):
    """Each row is tokenized in its own sandboxed call: the hostile row overruns its bound (or panics there), is a
    reward error ("zero": scored 0, counted), and the other rows score as TRL scores them with that tokenizer."""
    import credo.tasks.bounded_tokenizer as bounded

    monkeypatch.setattr(bounded, "TOKENIZE_SECONDS", 0.5)
    directory = hostile_reward_model(tmp_path / "rm")
    task = reward_task(tmp_path, [{"model": str(directory)}])
    rows = task.eval_problems()
    responses = [RESPONSES[0], hostile, RESPONSES[2]]
    started = time.perf_counter()
    verdicts, errors = verify_all(task, rows, responses, "zero")
    assert time.perf_counter() - started < 6  # the batch's try and the row's own, each stopped at 0.5 s
    expected = trl_scores(directory, [rows[0].prompt, rows[2].prompt], [RESPONSES[0], RESPONSES[2]])
    assert errors == 1 and verdicts[1].reward == 0.0
    assert [verdicts[0].reward, verdicts[2].reward] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(RuntimeError, match=r"rm's tokenizer took more than 0.5 s, or failed, on row 1 of 1; .* on "
                                           r"prompt 'q2'"):  # the batch failed, then that row alone
        verify_all(task, rows, responses, "raise")
