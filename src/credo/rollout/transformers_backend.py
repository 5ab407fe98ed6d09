"""The transformers generation backend: the samplers' `generate` and `score`, and turn sessions that keep episodes'
KV caches across turns, on a transformers model the trainer trains."""

from __future__ import annotations

from credo.rollout.crn import CommonRandomNumbers
from credo.rollout.generate import Completions, end_token_ids, eval_mode, generate
from credo.rollout.score import score_continuations
from credo.rollout.turn_cache import TurnSession


class TransformersBackend:
    """The generation backend the samplers call: a transformers model and its tokenizer.

    It implements `credo.rollout.backend.TrainingBackend` and `ScoringBackend`; samplers call its `GenerationBackend`
    part (`tokenizer`, `generate`), and IGPO's its `score`, so a scripted policy (tests) or another engine
    (`credo.rollout.vllm_backend.VllmBackend`) can stand in for it. On a GPU its decoding steps replay
    CUDA graphs unless `cuda_graphs` is off (`rollout.cuda_graphs`). The model samples in eval mode
    (no dropout) and is put back in the mode it was in. Responses end at every end token `end_token_ids`
    finds (read at each call: the tokenizer's and the model's declared end-of-turn ids).
    """

    def __init__(self, model, tokenizer, *, batch_size: int = 256, stop: list[str] | None = None,
                 common_random_numbers: CommonRandomNumbers | None = None, cuda_graphs: bool = True) -> None:
        self.model, self.tokenizer, self.batch_size, self.stop = model, tokenizer, batch_size, stop
        self.common_random_numbers, self.cuda_graphs = common_random_numbers, cuda_graphs

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, greedy: bool = False, repeat: int = 1,
                 stop: list[str] | None = None) -> Completions:
        crn = self.common_random_numbers
        keys = None if crn is None or greedy else crn.keys(len(prompts) * repeat)
        with eval_mode(self.model):
            return generate(
                self.model, self.tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                top_p=top_p, greedy=greedy, stop=[*(self.stop or []), *(stop or [])], batch_size=self.batch_size,
                repeat=repeat, keys=keys,
                cuda_graphs=self.cuda_graphs,
            )

    def open_turns(self, contexts: list[list[int]], *, repeat: int = 1) -> TurnSession:
        """A session of `repeat` episodes per context whose KV caches stay across turns
        (`credo.rollout.turn_cache`), sampled as `generate` samples."""
        return TurnSession(self.model, self.tokenizer, contexts, repeat=repeat, batch_size=self.batch_size,
                           end_ids=end_token_ids(self.model, self.tokenizer), stop=list(self.stop or []),
                           common_random_numbers=self.common_random_numbers, cuda_graphs=self.cuda_graphs)

    def score(self, contexts: list[list[int]], continuations: list[list[int]]) -> list[list[float]]:
        """Each continuation's token log-probs after its context (`credo.rollout.score`), the model in eval mode."""
        with eval_mode(self.model):
            return score_continuations(self.model, contexts, continuations, pad=self.tokenizer.pad_token_id,
                                       batch_size=self.batch_size)

    def sync_weights(self) -> None:
        """Nothing to do: this backend samples from the policy itself."""
