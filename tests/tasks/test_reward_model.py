"""A sequence-classification reward model in `task.reward` (`{model: path}`, `credo.tasks.reward_model`): scored as
TRL's GRPOTrainer scores one, weighted and logged like a function, and a bad path a one-line config error."""

from __future__ import annotations

import json

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


class PanicException(BaseException):
    """As pyo3 names the panic a Rust tokenizer raises (a hostile `tokenizer.json`'s regex): not an Exception."""


def test_a_tokenizer_panic_is_a_reward_error_like_any_other(tmp_path, monkeypatch):
    from credo.tasks.reward_model import RewardModel

    def panic(self, prompts, completions):
        raise PanicException("regex engine: stack overflow")

    task = reward_task(tmp_path, [{"model": str(save_reward_model(tmp_path / "rm"))}])
    monkeypatch.setattr(RewardModel, "texts", panic)
    rows = task.eval_problems()
    verdicts, errors = verify_all(task, rows, RESPONSES, "zero")
    assert errors == 3 and [v.reward for v in verdicts] == [0.0] * 3  # training goes on
    with pytest.raises(RuntimeError, match="the reward model's tokenizer panicked: .*stack overflow"):
        verify_all(task, rows, RESPONSES, "raise")
