"""Fixtures of the rollout tests."""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_TESTBED

from credo.config import load_config
from credo.models import load_model
from credo.rollout.generate import encode_prompts


@pytest.fixture(scope="module")
def policy():
    """The tiny testbed model (eval mode), its tokenizer and three encoded prompts of 1, 3 and 5 steps."""
    config = load_config(None, [f"model.testbed={TINY_TESTBED}"])
    model, tokenizer = load_model(config.model, torch.device("cpu"))
    prompts = encode_prompts(tokenizer, ["07+5*3-4?", "1-2?", "33*4+1-9*2?"])
    return model.eval(), tokenizer, prompts
