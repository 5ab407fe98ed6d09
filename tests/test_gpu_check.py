"""benchmarks/gpu_check.py's arithmetic: verl's throughput and TRL's MFU from one side's probes, and its job config."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def gpu_check():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("gpu_check", BENCHMARKS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)
    sys.path.remove(str(BENCHMARKS))


def test_side_numbers_follow_verl_throughput_and_trl_mfu(gpu_check):
    """Three steps (the first a warm-up): the medians of the last two, tokens = prompt + response lengths of the
    passes with grad, MFU = TRL's FLOPs per token at the token-weighted mean length x tokens / seconds / peak."""
    from transformers import LlamaConfig
    from trl.trainer.utils import compute_flops_per_token
    from vs_trl import Probes, SideResult

    probes = Probes()
    lengths = [[10, 30], [100, 300], [100, 300]]
    for step, sampling in zip(lengths, (9.0, 1.5, 1.5)):
        probes.begin_step()
        probes.add("sampling", sampling)
        with torch.enable_grad():
            probes.count_forwarded(torch.tensor(step))
        with torch.no_grad():  # a behaviour pass without grad is not the update's work
            probes.count_forwarded(torch.tensor([1000]))
        probes.end_step()
    side = SideResult("credo", step_s=[20.0, 4.0, 4.0], tokens=[5, 200, 200], rewards=[0.0] * 3, probes=probes,
                      rollout_s=[15.0, 3.0, 3.0])
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100)
    numbers = gpu_check.side_numbers(side, config, {"peak": 1e9, "measured": None})
    assert numbers["tokens_per_step"] == 400 and numbers["step_s"] == 4.0 and numbers["update_s"] == 1.0
    assert numbers["mean_seq_len"] == pytest.approx((100**2 + 300**2) / 400)
    assert numbers["throughput"] == 100.0 and numbers["generated_per_s"] == pytest.approx(200 / 1.5)
    flops = compute_flops_per_token(config, 250)
    assert numbers["mfu_update_peak"] == pytest.approx(flops * 400 / 1.0 / 1e9)
    assert numbers["mfu_step_peak"] == pytest.approx(flops * 400 / 4.0 / 1e9)
    assert "mfu_update_measured" not in numbers


def test_the_smollm2_job_is_gpu_yaml_as_one_optimiser_step(gpu_check, tmp_path):
    gpu_check.write_problems(tmp_path, [("1 + 1 =", "2")] * 4, [("2 + 2 =", "4")])
    config = gpu_check.job_config(gpu_check.GPU_CONFIG, gpu_check.smollm2_overrides("smollm2-135m", "cuda",
                                                                                     gpu_check.SHAPE),
                                  gpu_check.jsonl_task(tmp_path))
    assert (config.rollout.prompts_per_step, config.rollout.group_size, config.rollout.max_new_tokens) == (64, 8, 256)
    assert config.optim.minibatches == 1 and config.optim.micro_batch_size == 256
    assert config.model.autocast_bf16 is True and config.train.device == "cuda"
    assert config.task["name"] == "jsonl" and config.task["match"] == "last_number"
