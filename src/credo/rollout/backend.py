"""The generation backend's interface: what the samplers call, and what the trainer adds.

A sampler needs a tokenizer and one call, `generate(prompts, ...)`, that samples `repeat` responses per prompt and
returns them as `Completions` (`credo.rollout.generate`); the trainer also keeps the backend on the policy's weights
after each update (`sync_weights`). `credo.rollout.transformers_backend.TransformersBackend` and
`credo.rollout.vllm_backend.VllmBackend` implement `TrainingBackend`; a scripted stand-in (the tests') or another
engine implements `GenerationBackend` to drive the samplers. A sampler that scores text it did not sample (IGPO's
information gain) needs a `ScoringBackend`. Multi-turn episodes keep their KV caches across turns where the backend
is a `TurnBackend` (the transformers one), and re-send each episode's context at every turn otherwise.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from credo.rollout.generate import Completions
from credo.rollout.turn_cache import TurnSession


@runtime_checkable
class GenerationBackend(Protocol):
    """What the samplers call: a tokenizer (prompt encoding, response decoding, the pad token) and `generate`."""

    tokenizer: Any

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, repeat: int = 1,
                 stop: list[str] | None = None) -> Completions:
        """`repeat` responses per prompt (rows in prompt order), each at most `max_new_tokens` long, sampled at
        `temperature` from the top-p nucleus, or greedy; each ends at an end token, at the end of one of the
        backend's stop strings, or of one of `stop` (this call's: a multi-turn episode's turn marker), kept."""
        ...


@runtime_checkable
class TrainingBackend(GenerationBackend, Protocol):
    """A generation backend the trainer keeps on the policy it trains."""

    def sync_weights(self) -> None:
        """Sample from the policy's current weights from now on (a no-op where the backend is the policy)."""
        ...


@runtime_checkable
class TurnBackend(GenerationBackend, Protocol):
    """A generation backend that keeps multi-turn episodes' KV caches from one turn to the next."""

    def open_turns(self, contexts: list[list[int]], *, repeat: int = 1) -> TurnSession:
        """A session of `repeat` episodes per context (`credo.rollout.turn_cache.TurnSession`): `turn` samples the
        next turn of its running episodes as `generate` would sample it after each one's context so far, `observe`
        appends an environment's tokens."""
        ...


@runtime_checkable
class ScoringBackend(GenerationBackend, Protocol):
    """A generation backend that also scores given text under the policy (teacher forcing)."""

    def score(self, contexts: list[list[int]], continuations: list[list[int]]) -> list[list[float]]:
        """Each continuation's token log-probs under the policy's current weights at temperature 1, each token given
        its context and the continuation's tokens before it (`credo.rollout.score`)."""
        ...
