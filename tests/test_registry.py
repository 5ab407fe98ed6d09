"""The registry is the one place a method is defined: every consumer asks it, none keeps its own list.

- Each engine adapts every registered method or refuses it with a reason derived from the method's parts.
- `credo methods` lists every method and every switch with its default.
- A method that reads a field is refused where nothing fills it, whatever its name (a new estimator that reads
  entropies gets them from TRL, and is refused by verl, without either adapter knowing it).
"""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
from typer.testing import CliRunner

from credo import cli
from credo.cli import app
from credo.config import load_config
from credo.credit import GroupAdvantage
from credo.integrations import trl as trl_adapter
from credo.integrations import verl as verl_adapter
from credo.methods import METHODS, Method, get_method
from credo.rollout.samplers.groups import GroupSampler

ALL = list(METHODS)


@pytest.mark.parametrize("name", ALL)
def test_each_engine_adapts_the_method_or_refuses_it_with_a_reason(name):
    method = METHODS.get(name)
    for engine in (trl_adapter, verl_adapter):
        why = engine.refusal(method)
        if why is None:
            engine.check_supported(method)  # adapted: no error
        else:
            assert len(why) > 30, why
            with pytest.raises(ValueError, match=re.escape(why)):
                engine.check_supported(method)
    assert (name in trl_adapter.supported_methods()) == (trl_adapter.refusal(method) is None)
    assert (f"credo_{name}" in verl_adapter.verl_names()) == (verl_adapter.refusal(method) is None)


@pytest.mark.parametrize("name", ALL)
def test_each_part_of_a_method_lives_in_its_home(name):
    """A sampler's module holds its sampling and the fields it records; the estimator that reads them is credit math
    in `credo.credit` (SPO's and FR3E's used to live in their sampler modules)."""
    method = METHODS.get(name)
    assert type(method.sampler).__module__.startswith("credo.rollout.samplers.")
    assert type(method.estimator).__module__.startswith("credo.credit.")
    assert type(method.loss).__module__.startswith("credo.losses.")


def test_the_engines_refuse_what_their_interfaces_cannot_carry():
    # The known limits, as reasons: TRL samples i.i.d. groups and has no step checker; verl passes no entropies.
    assert "i.i.d. groups only" in trl_adapter.refusal(METHODS.get("srpo"))
    assert "i.i.d. groups only" in trl_adapter.refusal(METHODS.get("ibpo"))
    assert "step checker" in trl_adapter.refusal(METHODS.get("oracle_blame"))
    assert "entropies" in verl_adapter.refusal(METHODS.get("s_trace"))
    assert "step checker" in verl_adapter.refusal(METHODS.get("oracle_blame"))
    assert "reference policy" in verl_adapter.refusal(get_method("grpo", loss={"kl_beta": 0.1}))
    assert trl_adapter.refusal(get_method("grpo", loss={"kl_beta": 0.1})) is None  # TRL computes them (beta)
    for name in ("grpo", "p_trace", "grpo_lambda", "srpo", "ibpo"):
        assert verl_adapter.refusal(METHODS.get(name)) is None, name
    # i.i.d. rows whose sampler records more than the rows (IGPO's information gain) need credo's sampler
    for engine in (trl_adapter.refusal(METHODS.get("igpo")), trl_adapter.refusal(METHODS.get("igpo"), episodes=True),
                   verl_adapter.refusal(METHODS.get("igpo"))):
        assert "recording info_gain" in engine


@dataclasses.dataclass(frozen=True, kw_only=True)
class EntropyReader(GroupAdvantage):
    """A new estimator no adapter has heard of, reading the behaviour policy's entropies."""

    reads: typing.ClassVar[frozenset[str]] = frozenset({"entropy"})


def test_needs_follow_the_fields_a_new_estimator_declares():
    method = Method("new", "token", "0000.00000", "reads entropies", GroupSampler(), EntropyReader(),
                    METHODS.get("grpo").loss, brief="reads entropies")
    assert method.behaviour_statistics == method.needs == {"entropy"}
    assert trl_adapter.refusal(method) is None
    assert "entropies" in verl_adapter.refusal(method)


def test_credo_methods_lists_every_method_and_every_switch_with_its_default(monkeypatch):
    result = CliRunner().invoke(app, ["methods", "--markdown"])
    assert result.exit_code == 0, result.output
    rows = {line.split(" | ")[0].strip("| "): line for line in result.output.splitlines()[2:]}
    assert list(rows) == ALL
    monkeypatch.setattr(cli.console, "width", 400)  # each switch's row on one line
    for name in ALL:
        method = METHODS.get(name)
        assert f"| {method.brief} | {method.sampler.name} |" in rows[name]
        one = CliRunner().invoke(app, ["methods", name])
        assert one.exit_code == 0, one.output
        for part, switches in method.switches().items():
            for switch, default in switches.items():
                prefix = "credit" if part == "estimator" else "loss"
                assert re.search(rf"{prefix}\.{switch}\s.*{re.escape(repr(default))}", one.output), (name, switch)
    one = CliRunner().invoke(app, ["methods", "p_trace"])
    assert one.exit_code == 0 and "loss.decay" in one.output and "Trace decay lambda" in one.output


def test_a_methods_brief_fits_its_line():
    with pytest.raises(ValueError, match="brief must be 1 to 50 characters"):
        dataclasses.replace(METHODS.get("grpo"), brief="x" * 51)


def test_the_trainer_fills_ref_logp_and_a_runner_without_it_is_told_what_it_lacks(tmp_path):
    config = load_config(None, ["loss.kl_beta=0.1"])  # the trainer's reference policy fills ref_logp
    method = get_method(config.method, loss=config.loss)
    assert "ref_logp" in method.needs
    assert method.missing({"correct", "entropy"}) == ["ref_logp (a frozen reference policy's log-probs)"]
