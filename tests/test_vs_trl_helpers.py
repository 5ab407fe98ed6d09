"""The pure helpers of benchmarks/vs_trl.py: medians, the breakdown, the two job configs, the step baton."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

from credo.config import load_config
from credo.hf_compat import no_checkpointing

PATH = Path(__file__).parents[1] / "benchmarks" / "vs_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_trl", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_trl"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("vs_trl", None)


def test_median_after_warmup_drops_the_first_step(bench):
    assert bench.median_after_warmup([9.0, 1.0, 3.0, 2.0]) == 2.0
    assert bench.median_after_warmup([5.0]) == 5.0
    with pytest.raises(ValueError):
        bench.median_after_warmup([])


def test_section_medians_put_the_unmeasured_rest_in_other(bench):
    steps = [{"sampling": 5.0}, {"sampling": 1.0, "backward": 0.5}, {"sampling": 2.0, "backward": 0.5}]
    medians = bench.section_medians(steps, [9.0, 2.0, 3.0])
    assert medians["sampling"] == pytest.approx(1.5)
    assert medians["backward"] == pytest.approx(0.5)
    assert medians["forward"] == 0.0
    assert medians["other"] == pytest.approx(0.5)  # (2 - 1.5, 3 - 2.5), the warm-up step left out
    assert set(medians) == set(bench.SECTIONS)


def test_breakdown_medians_and_spread(bench):
    parts = [{"a": 1.0}, {"a": 2.0}, {"a": 4.0}, {"a": 3.0}]
    medians = bench.breakdown_medians(parts, [10.0, 3.0, 6.0, 4.0], ("a", "rest"))
    assert medians == {"a": 3.0, "rest": 1.0}
    assert bench.spread([100.0, 2.0, 3.0, 4.0]) == 2.0


def test_credo_overrides_give_the_job_shape(bench):
    config = load_config(bench.CONFIG, bench.credo_overrides("testbed", 5, 4, 3, 20, 1e-5))
    assert config.method == "grpo"
    assert (config.rollout.prompts_per_step, config.rollout.group_size, config.rollout.max_new_tokens) == (4, 3, 20)
    assert (config.rollout.temperature, config.rollout.top_p) == (1.0, 1.0)
    assert config.optim.lr == 1e-5 and config.optim.minibatches == 1 and config.optim.epochs == 1
    assert config.train.steps == 5 and config.train.eval_every >= 5 and config.train.checkpoint_every >= 5
    assert config.train.device == "cpu" and config.model.dtype == "float32"


def test_trl_config_is_one_optimiser_step_per_rollout_batch(bench, tmp_path):
    config = load_config(bench.CONFIG, bench.credo_overrides("testbed", 5, 4, 3, 20, 1e-5))
    kwargs = bench.trl_config_kwargs(config, str(tmp_path))
    assert kwargs["per_device_train_batch_size"] == 12 and kwargs["num_generations"] == 3
    assert kwargs["gradient_accumulation_steps"] == 1 and kwargs["steps_per_generation"] == 1
    assert kwargs["num_iterations"] == 1 and kwargs["beta"] == 0.0 and kwargs["max_completion_length"] == 20
    assert kwargs["learning_rate"] == 1e-5 and kwargs["max_grad_norm"] == config.optim.grad_clip
    assert kwargs["report_to"] == "none" and no_checkpointing().items() <= kwargs.items()
    trl = pytest.importorskip("trl")
    args = trl.GRPOConfig(**kwargs)
    assert args.generation_batch_size == 12 and args.steps_per_generation == 1


def test_micro_batches_become_gradient_accumulation_of_one_generation_batch(bench, tmp_path):
    """credo's micro-batches of 6 rows: TRL takes 6 rows per pass, two passes per optimiser step, and generates
    the whole batch once per step (so no separate old-log-prob pass), with bf16 autocast as credo on CUDA."""
    overrides = bench.credo_overrides("testbed", 5, 4, 3, 20, 1e-5, device="cuda", micro_batch_size=6)
    config = load_config(bench.CONFIG, overrides)
    assert config.optim.micro_batch_size == 6 and config.optim.micro_batch_tokens is None
    assert config.model.autocast_bf16 is True and config.model.dtype == "float32"
    kwargs = bench.trl_config_kwargs(config, str(tmp_path))
    assert kwargs["per_device_train_batch_size"] == 6
    assert kwargs["gradient_accumulation_steps"] == kwargs["steps_per_generation"] == 2
    assert kwargs["bf16"] is True and kwargs["use_cpu"] is False
    bad = load_config(bench.CONFIG, [*overrides, "optim.micro_batch_size=5"])
    with pytest.raises(ValueError, match="must divide"):
        bench.trl_config_kwargs(bad, str(tmp_path))


def test_trl_config_refuses_jobs_with_several_optimiser_steps(bench, tmp_path):
    config = load_config(bench.CONFIG, [*bench.credo_overrides("testbed", 5, 4, 3, 20, 1e-5), "optim.minibatches=2"])
    with pytest.raises(ValueError, match="one optimiser step"):
        bench.trl_config_kwargs(config, str(tmp_path))


@pytest.mark.parametrize("interleave, expected", [(True, "ABABAB"), (False, "AAABBB")])
def test_baton_alternates_the_steps_of_two_threads(bench, interleave, expected):
    baton = bench.Baton(["A", "B"], interleave)
    trace = []

    def side(name):
        baton.wait(name)
        try:
            for _ in range(3):
                baton.step(name)
                trace.append(name)
        finally:
            baton.done(name)

    threads = [threading.Thread(target=side, args=(name,)) for name in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert "".join(trace) == expected


def test_baton_lets_the_survivor_finish_alone(bench):
    baton = bench.Baton(["A", "B"], True)
    trace = []

    def side(name, steps):
        baton.wait(name)
        try:
            for _ in range(steps):
                baton.step(name)
                trace.append(name)
        finally:
            baton.done(name)

    threads = [threading.Thread(target=side, args=args) for args in (("A", 1), ("B", 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert "".join(trace) == "ABBB"
