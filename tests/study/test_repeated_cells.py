"""`credo compare` refuses, before any run, a cell that would only repeat another's runs: the same resolved run
config under another name, or a method that differs from another cell's only by what cannot act under its settings
(a clip or a ratio on one on-policy update, as each loss declares in `PolicyLoss.on_policy`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from batches import random_batch
from typer.testing import CliRunner

from credo.cli import app
from credo.config import ConfigError
from credo.methods import METHODS, get_method
from credo.study import grid
from credo.study.grid import Study, StudyConfig, load_study, repeated_cells, run_study

ROOT = Path(__file__).parents[2]
STUDIES = ROOT / "configs" / "studies"
TESTBED = ROOT / "configs" / "testbed"
RECORD = ROOT / "docs" / "results" / "credit-decisive"

SRPO_CLIP = ("cell 'srpo_clip' trains on policy (1 mini-batch, 1 epoch): its PPOClipLoss has a ratio of 1 and a "
             "clip that never binds (REINFORCE's gradient), so it equals 'srpo'; give it optim.minibatches > 1 or "
             "drop it")
REINFORCE = ("cell 'reinforce' trains on policy (1 mini-batch, 1 epoch): the 'grpo' cell's PPOClipLoss has a ratio "
             "of 1 and a clip that never binds (REINFORCE's gradient), so it equals 'grpo'; give it "
             "optim.minibatches > 1 or drop it")


def recorded_study(folder: Path) -> Study:
    """A committed study record (`<report folder>/study.yaml`, what `credo compare` wrote) as the grid it ran; its
    method configs are relative to configs/studies, where the study file was."""
    data = yaml.safe_load((folder / "study.yaml").read_text())
    data.pop("command", None)
    return Study(StudyConfig(**data), STUDIES, folder / "runs", folder / "study.yaml")


def study_of(tmp_path: Path, methods: dict) -> Study:
    data = {"name": "twins", "seeds": [0], "methods": methods, "output": str(tmp_path / "out"),
            "report": {"baseline": next(iter(methods)), "oracle": None}}
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_study(path)


def test_the_committed_decisive_study_would_be_refused_for_srpo_clip_and_reinforce():
    study = recorded_study(RECORD)
    assert repeated_cells(study) == [REINFORCE, SRPO_CLIP]


def test_the_committed_decisive_record_still_loads_for_its_report():
    from credo.study.results import results_from_json

    study = yaml.safe_load((RECORD / "study.yaml").read_text())
    result = results_from_json(RECORD, study)["decisive"].result
    assert {"srpo_clip", "reinforce"} <= {row.method for row in result.rows}


def test_the_decisive_study_file_runs_without_its_duplicate_cells():
    study = load_study(STUDIES / "credit_decisive.yaml")
    assert "srpo_clip" not in study.config.methods and "reinforce" not in study.config.methods
    assert repeated_cells(study) == []


def test_srpo_clip_with_four_mini_batches_is_another_method(tmp_path):
    srpo = str(TESTBED / "srpo.yaml")
    clip = {"config": srpo, "set": {"method": "srpo_clip", "optim": {"minibatches": 4}}}
    assert repeated_cells(study_of(tmp_path, {"srpo": srpo, "srpo_clip": clip})) == []
    srpo_4mb = {"config": srpo, "set": {"optim": {"minibatches": 4}}}  # both off policy: the clip binds
    assert repeated_cells(study_of(tmp_path, {"srpo_4mb": srpo_4mb, "srpo_clip": clip})) == []
    on_policy = {"config": srpo, "set": {"method": "srpo_clip"}}
    assert repeated_cells(study_of(tmp_path, {"srpo": srpo, "srpo_clip": on_policy})) == [SRPO_CLIP]


def test_a_clip_setting_alone_is_refused_on_policy_and_a_trace_that_acts_there_is_not(tmp_path):
    grpo = str(TESTBED / "grpo.yaml")
    wide = {"config": grpo, "set": {"loss": {"clip_high": 0.28, "dual_clip": 3.0}}}
    assert repeated_cells(study_of(tmp_path, {"grpo": grpo, "grpo@clip_high": wide})) == [(
        "cell 'grpo@clip_high' trains on policy (1 mini-batch, 1 epoch): its PPOClipLoss has a ratio of 1 and a clip "
        "that never binds (REINFORCE's gradient); the 'grpo' cell's PPOClipLoss has a ratio of 1 and a clip that never "
        "binds (REINFORCE's gradient), so it equals 'grpo'; give it optim.minibatches > 1 or drop it")]
    p_trace = {"config": grpo, "set": {"method": "p_trace"}}  # P-trace's trace needs a moved policy
    assert repeated_cells(study_of(tmp_path, {"grpo": grpo, "p_trace": p_trace})) == [(
        "cell 'p_trace' trains on policy (1 mini-batch, 1 epoch): its TraceLoss has a traced ratio of 1, whose trace "
        "and clip never act (REINFORCE's gradient); the 'grpo' cell's PPOClipLoss has a ratio of 1 and a clip that "
        "never binds (REINFORCE's gradient), so it equals 'grpo'; give it optim.minibatches > 1 or drop it")]
    lambda_ = str(TESTBED / "grpo_lambda.yaml")  # GRPO-lambda's trace acts on policy, its clip does not
    assert repeated_cells(study_of(tmp_path, {"grpo": grpo, "grpo_lambda": lambda_})) == []
    wide_lambda = {"config": lambda_, "set": {"loss": {"clip_low": 0.1}}}
    assert repeated_cells(study_of(tmp_path, {"grpo_lambda": lambda_, "wide": wide_lambda})) == [(
        "cell 'wide' trains on policy (1 mini-batch, 1 epoch): its LambdaLoss has a ratio of 1 and a clip that never "
        "binds, so it equals 'grpo_lambda'; give it optim.minibatches > 1 or drop it")]


def test_two_cells_with_one_resolved_config_are_refused_before_any_run(tmp_path, monkeypatch):
    grpo = str(TESTBED / "grpo.yaml")
    same_seedless = {"config": grpo, "seeds": [3]}  # another seed of the same run config is still a repeat
    by_hand = {"method": "dr_grpo", "credit": {"scale": "std"}, "loss": {"agg": "seq_mean_token_mean"}}  # = GRPO
    study = study_of(tmp_path, {"grpo": grpo, "grpo_again": grpo, "grpo_later": same_seedless,
                                "dr_grpo_by_hand": {"config": grpo, "set": by_hand}})
    same = ("cell '{}' has the same resolved run config as 'grpo' (the seed aside, with the method as its sampler, "
            "credit and loss): it would repeat its runs; drop it")
    lines = [same.format(name) for name in ("grpo_again", "grpo_later", "dr_grpo_by_hand")]
    assert repeated_cells(study) == lines
    other_lr = {"config": grpo, "set": {"optim": {"lr": 5.0e-5}}}  # the same method at another setting is another run
    assert repeated_cells(study_of(tmp_path / "lr", {"grpo": grpo, "grpo@lr=5e-5": other_lr})) == []
    monkeypatch.setattr(grid, "run_cell", lambda cell, **_: pytest.fail(f"{cell.label} ran"))
    with pytest.raises(ConfigError) as error:
        run_study(study, log=lambda _: None)
    assert str(error.value) == f"{tmp_path / 'study.yaml'}: " + "\n".join(lines)
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "study.yaml")])
    assert result.exit_code == 2
    assert "cell 'grpo_again' has the same resolved run config as 'grpo'" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_cells_of_different_difficulties_are_not_compared(tmp_path):
    grpo = str(TESTBED / "grpo.yaml")
    methods = {"grpo": grpo, "reinforce": {"config": grpo, "set": {"method": "reinforce"}}}
    difficulties = {"easy": {}, "long": {"task": {"min_steps": 5}}}
    data = {"name": "d", "seeds": [0], "methods": methods, "difficulties": difficulties, "report": {"oracle": None}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lines = repeated_cells(load_study(path))
    assert [line.split(" trains")[0] for line in lines] == ["cell 'reinforce' (difficulty 'easy')",
                                                           "cell 'reinforce' (difficulty 'long')"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", list(METHODS))
def test_each_losss_on_policy_form_has_its_gradient_where_every_ratio_is_1(name, seed):
    """The declaration the grid trusts: with `logp = old_logp` (one update per rollout batch) a loss and its
    `on_policy()` form give the same gradient, clip switches far from their defaults included; a loss whose
    on-policy form is another class differs from it off policy (so the equality is the on-policy one)."""
    batch = random_batch(seed, dtype=torch.float64)
    loss = {"clip_low": 3e-3, "clip_high": 4e-3} if "clip_low" in METHODS.get(name).switches()["loss"] else {}
    for method in (get_method(name), get_method(name, loss=loss)):
        credited, _ = method.credit(batch)
        gradients = []
        for policy_loss in (method.loss, method.loss.on_policy()):
            logp = credited.old_logp.clone().requires_grad_()
            (grad,) = torch.autograd.grad(policy_loss(logp, credited).loss, logp, allow_unused=True,
                                          materialize_grads=True)
            gradients.append(grad)
        torch.testing.assert_close(gradients[0], gradients[1], rtol=1e-12, atol=1e-14)
        if type(method.loss.on_policy()) is not type(method.loss) and gradients[0].any():
            gen = torch.Generator().manual_seed(seed)
            moved = (credited.old_logp + 0.5 * torch.randn(credited.old_logp.shape, generator=gen,
                                                           dtype=torch.float64)).requires_grad_()
            off = [torch.autograd.grad(f(moved, credited).loss, moved, allow_unused=True, materialize_grads=True)[0]
                   for f in (method.loss, method.loss.on_policy())]
            assert not torch.allclose(off[0], off[1])


def test_credo_methods_says_what_cannot_act_on_policy():
    clip = CliRunner().invoke(app, ["methods", "srpo_clip"])
    assert clip.exit_code == 0 and ("on policy (optim.minibatches = epochs = 1): its PPOClipLoss has a ratio of 1 and "
                                    "a clip that never binds (REINFORCE's gradient)") in " ".join(clip.output.split())
    assert "on policy" not in CliRunner().invoke(app, ["methods", "srpo"]).output
