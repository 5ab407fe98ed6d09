"""The private `GRPOTrainer` hooks `credo.integrations.trl` relies on (`PRIVATE_HOOKS`), one test each, so that a
TRL release that changes one fails here with a message naming it rather than deep inside a training step.

Each test states the contract the adapter reads (the docstring of `credo.integrations.trl`): the signature,
what the hook returns and when TRL calls it, on a tiny testbed model with TRL's generation scripted."""

from __future__ import annotations

import inspect

import pytest
import torch

pytest.importorskip("trl")

from test_trl import (  # noqa: E402  (the fixtures too: pytest finds them here)
    COMPLETIONS, G, PROMPTS, grpo_config, model_and_tokenizer, score, scripted_trainer, tiny_model_config,
)

from credo.integrations.trl import PRIVATE_HOOKS, CredoGRPOTrainer, check_trl_hooks  # noqa: E402


@pytest.fixture
def trainer(model_and_tokenizer, tmp_path):
    from trl import GRPOTrainer

    model, tokenizer = model_and_tokenizer
    return scripted_trainer(GRPOTrainer, model, tokenizer, grpo_config(tmp_path))


def trl_version() -> str:
    import trl

    return trl.__version__


def contract(hook: str, what: str) -> str:
    return (f"trl {trl_version()} changed GRPOTrainer.{hook}: {what}; credo.integrations.trl relies on it "
            f"(PRIVATE_HOOKS): adapt the adapter or narrow TRL_VERSIONS")


@pytest.mark.parametrize("hook", list(PRIVATE_HOOKS))
def test_each_hook_takes_what_the_adapter_passes(hook):
    from trl import GRPOTrainer

    assert hasattr(GRPOTrainer, hook), contract(hook, "it is gone")
    found = tuple(inspect.signature(getattr(GRPOTrainer, hook)).parameters)[1:]
    assert found[:len(PRIVATE_HOOKS[hook])] == PRIVATE_HOOKS[hook], contract(hook, f"it takes {found}")


def test_a_changed_hook_is_a_one_line_error_naming_it(monkeypatch):
    from trl import GRPOTrainer

    check_trl_hooks()  # the installed TRL keeps every contract
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts, completions: None)
    with pytest.raises(RuntimeError, match=r"^trl .*: GRPOTrainer._calculate_rewards takes \(inputs, prompts, "
                                           r"completions\); credo.integrations.trl calls it with \(inputs, prompts, "
                                           r"completions, completion_ids_list\)"):
        check_trl_hooks()
    monkeypatch.undo()
    monkeypatch.delattr(GRPOTrainer, "_compute_loss")
    with pytest.raises(RuntimeError, match="GRPOTrainer._compute_loss has no such method"):
        check_trl_hooks()


def test_calculate_rewards_returns_every_rows_values_once_per_generation_batch(trainer, monkeypatch):
    """`_calculate_rewards` is called once by `_generate_and_score_completions`, and returns the gathered (B, F)
    values (NaN where a function gave None): credo's estimator reads them."""
    calls = []
    original = type(trainer)._calculate_rewards

    def spy(self, *args):
        calls.append(original(self, *args))
        return calls[-1]

    monkeypatch.setattr(type(trainer), "_calculate_rewards", spy)
    score(trainer)
    assert len(calls) == 1, contract("_calculate_rewards", f"called {len(calls)} times per generation batch")
    values = calls[0]
    assert values.shape == (len(PROMPTS) * G, 1), contract("_calculate_rewards", f"returns shape {values.shape}")
    assert torch.isnan(values[5, 0]) and values[0, 0] == 1.0, contract("_calculate_rewards", "None is not NaN")


def test_generate_and_score_completions_returns_the_keys_the_adapter_reads(trainer):
    output = score(trainer)
    wanted = {"prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"}
    assert wanted <= set(output), contract("_generate_and_score_completions", f"no {sorted(wanted - set(output))}")
    rows = len(PROMPTS) * G
    assert output["completion_ids"].shape[0] == rows and output["completion_mask"].shape == output["completion_ids"].shape
    assert output["completion_ids"][0, :4].tolist() == COMPLETIONS[0], contract(
        "_generate_and_score_completions", "completion rows are not in generation order")
    assert isinstance(trainer._metrics["train"], dict) and "advantages" in trainer._logs, contract(
        "_generate_and_score_completions", "its metrics and logs (`_metrics[mode]`, `_logs['advantages']`) moved")
    trainer._metrics["train"]["credo/probe"].append(1.0)  # a defaultdict(list), as the adapter writes into it


def test_get_per_token_logps_and_entropies_returns_logps_entropies_and_aux_loss(trainer):
    output = score(trainer)
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    width = output["completion_ids"].shape[1]
    with torch.no_grad():
        result = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, width, batch_size=4,
                                                              compute_entropy=True, compute_aux_loss=False)
    assert isinstance(result, tuple) and len(result) == 3, contract(
        "_get_per_token_logps_and_entropies", "it no longer returns (logps, entropies, aux_loss)")
    logps, entropies, _ = result
    assert logps.shape == entropies.shape == (ids.shape[0], width)
    assert (logps <= 0).all() and (entropies >= 0).all()


def test_compute_loss_is_what_trainings_compute_loss_calls_scaled_for_accumulation(model_and_tokenizer, tmp_path,
                                                                                    monkeypatch):
    """`compute_loss` delegates to `_compute_loss(model, inputs)`, whose loss TRL takes as already scaled for
    gradient accumulation (`loss_is_scaled_for_ga`): credo's replacement returns its loss the same way."""
    model, tokenizer = model_and_tokenizer
    trainer = scripted_trainer(CredoGRPOTrainer, model, tokenizer, grpo_config(tmp_path), credo_method="grpo")
    output = score(trainer)
    calls = []
    original = CredoGRPOTrainer._compute_loss

    def spy(self, model, inputs):
        calls.append(inputs)
        return original(self, model, inputs)

    monkeypatch.setattr(CredoGRPOTrainer, "_compute_loss", spy)
    trainer.compute_loss(trainer.model, output)
    assert len(calls) == 1, contract("compute_loss", "it no longer calls _compute_loss(model, inputs)")
    # transformers' `training_step` divides the loss by the accumulation steps unless the trainer says it is scaled
    # (`loss_is_scaled_for_ga`, TRL 1.16) or has a `compute_loss_func` (TRL 1.7 sets a placeholder one)
    flag = getattr(trainer, "loss_is_scaled_for_ga", None)
    scaled = flag if flag is not None else trainer.compute_loss_func is not None
    assert scaled, contract("_compute_loss", "its loss is no longer taken as scaled for gradient accumulation")


def test_the_attributes_the_adapter_reads_exist(model_and_tokenizer, tmp_path):
    from trl.models.utils import disable_gradient_checkpointing  # noqa: F401  (the entropy pass uses it)

    model, tokenizer = model_and_tokenizer
    trainer = scripted_trainer(CredoGRPOTrainer, model, tokenizer, grpo_config(tmp_path), credo_method="s_trace")
    for name in ("reward_weights", "num_generations", "num_generations_eval", "aux_loss_enabled", "accelerator"):
        assert hasattr(trainer, name), contract("__init__", f"no attribute {name}")
    assert trainer.reward_weights.shape == (1,) and trainer.num_generations == G
    assert hasattr(trainer.args, "steps_per_generation"), contract("args", "GRPOConfig has no steps_per_generation")


def test_the_adapters_range_is_the_extras():
    """`.ci/trl-range` tests the ends of the `trl` extra; the adapter refuses and warns by TRL_VERSIONS."""
    import tomllib
    from pathlib import Path

    from credo.integrations.trl import TRL_VERSIONS

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["trl"] == [f"trl{TRL_VERSIONS}"]
