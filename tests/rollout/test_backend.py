"""Every generation backend takes the call the samplers make (`credo.rollout.backend`)."""

from __future__ import annotations

import inspect

import pytest
from scripted import ScriptedPolicy

from credo.rollout.backend import GenerationBackend, TrainingBackend
from credo.rollout.transformers_backend import TransformersBackend
from credo.rollout.vllm_backend import VllmBackend


def keywords(function) -> dict[str, object]:
    """The keyword-only parameters of `function` with their defaults."""
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize("backend", [TransformersBackend, VllmBackend, ScriptedPolicy])
def test_a_backend_takes_the_samplers_generate_call(backend):
    expected = keywords(GenerationBackend.generate)
    taken = keywords(backend.generate)
    assert {k: v for k, v in taken.items() if k in expected} == expected  # same names, same defaults
    assert all(p.default is not inspect.Parameter.empty for k, p in inspect.signature(backend.generate).parameters.items()
               if k not in expected and p.kind is inspect.Parameter.KEYWORD_ONLY)  # anything else optional


@pytest.mark.parametrize("backend", [TransformersBackend, VllmBackend])
def test_the_trainers_backends_follow_the_policy(backend):
    assert callable(getattr(backend, "sync_weights", None))
    assert not inspect.signature(backend.sync_weights).parameters.keys() - {"self"}


def test_the_protocols_recognise_a_backend_at_run_time(policy):
    model, tokenizer, _ = policy
    transformers = TransformersBackend(model, tokenizer)
    scripted = ScriptedPolicy(draw=lambda prompt: "")
    assert isinstance(transformers, TrainingBackend) and isinstance(scripted, GenerationBackend)
    assert not isinstance(scripted, TrainingBackend)  # no sync_weights: it drives samplers, not the trainer


def test_a_call_s_stop_strings_join_the_backend_s(policy, monkeypatch):
    import credo.rollout.transformers_backend as transformers_backend

    model, tokenizer, _ = policy
    seen = []
    monkeypatch.setattr(transformers_backend, "generate", lambda *args, **kwargs: seen.append(kwargs["stop"]))
    backend = TransformersBackend(model, tokenizer, stop=["</answer>"])
    backend.generate([[1, 2]], max_new_tokens=4, stop=["</call>"])
    backend.generate([[1, 2]], max_new_tokens=4)
    assert seen == [["</answer>", "</call>"], ["</answer>"]]
