"""The sampling options of a run (`rollout:` in a config): generation, the group sampler's DAPO options,
and the sections the reset, revision and vine samplers own (`rollout.resets`, `rollout.revisions`,
`rollout.vine`).

They live with the samplers that read them, so the rollout layer needs nothing from `credo.config`, which
only assembles the sections into a `RunConfig`.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from credo.rollout.localise import LOCALISE_PROMPT, STEP_FORMAT
from credo.rollout.revise import REVISE_PROMPT, check_rewrites, check_template
from credo.rollout.thoughts import ThoughtRules
from credo.schema import Section

Localiser = Literal["random", "self", "oracle", "sampled"]
LOCALISERS: tuple[str, ...] = get_args(Localiser)
"""The first-wrong-thought localisers of the reset sampler (`credo.rollout.resets`)."""


class ResetConfig(Section):
    """Options of the reset sampler of RRPO/SRPO (`rollout.resets`)."""

    split: Literal["1x4", "2x4", "1x8", "nomask"] = "1x4"
    """How a prompt's trained rows are made: "1x4", "2x4" or "1x8" (seeds x continuations), or "nomask".

    "1x4": one failed seed with 4 continuations and a base group of 4 fresh rollouts (8 trained rows); "2x4":
    two seeds with 4 continuations each, no base group; "1x8": one seed with 8 continuations; "nomask": "1x4"
    whose suffix rows also train on their prefix (`credo.rollout.reset_plan`)."""
    max_draws: int = Field(12, ge=1)
    """Most fresh rollouts drawn per prompt to find its seeds; a prompt with too few failures becomes a plain group."""
    localiser: Localiser | None = None
    """Who finds a seed's first wrong thought: "random", "self", "oracle" or "sampled"; None: the method's own.

    The method's own is "random" for RRPO and "self" for SRPO; "oracle" needs a task with a step checker;
    "sampled" reads Monte-Carlo values of the states between the seed's thoughts (`localiser_samples`)."""
    oracle_accuracy: float = Field(1.0, ge=0.0, le=1.0)
    """Share of seeds the oracle localiser names exactly (1: perfect); the others get a wrong thought.

    A study can dial localiser accuracy from the policy's own (about 0.2 on the testbed) to perfect; the
    errors follow `oracle_earlier` (`credo.rollout.resets.noisy_oracle`)."""
    oracle_earlier: float = Field(38 / 88, ge=0.0, le=1.0)
    """Share of the noisy oracle's errors placed before the first wrong thought; the rest after it.

    The default is the SRPO paper's measured localiser profile (12% exact, 38% earlier, 50% later: 38/88 of
    its errors earlier)."""
    localiser_samples: int = Field(4, ge=1)
    """Continuations per state of the sampled localiser (its K); each of a seed's n thoughts costs K of them.

    The seed's first wrong thought is the one after which the mean reward of the continuations falls the most
    (`credo.rollout.values.largest_drop`); every continuation token counts as localisation cost."""
    localiser_threshold: float | None = Field(None, ge=0.0)
    """The sampled localiser picks the first thought after which the estimate falls below this, where one does.

    None: always the largest fall; where no estimate falls below it, the largest fall too."""
    localiser_temperature: float | None = Field(None, ge=0.0)
    """Sampling temperature of the self-localiser; None: 0.3, and 0 (greedy) for the 1x8 split."""
    localiser_max_tokens: int = Field(64, ge=1)
    """Reply budget of the self-localiser (the paper: 4096 for real models)."""
    localiser_prompt: str = LOCALISE_PROMPT
    """The self-localiser's prompt, with `{problem}` and `{steps}` (the testbed: `TESTBED_PROMPT`)."""
    localiser_step_format: str = STEP_FORMAT
    """How each thought appears in `{steps}`, with `{i}` and `{thought}`."""
    thoughts: ThoughtRules = ThoughtRules()
    """The thought MDP: how a response is cut into thoughts and when its episode ends."""


class RevisionConfig(Section):
    """Options of IBPO's revision sampler (`rollout.revisions`)."""

    k: int = Field(4, ge=2)
    """IBPO's K: each failed response gets K-1 revisions, one per sibling reference (correct ones first)."""
    prompt: str = REVISE_PROMPT
    """The revision prompt, with `{problem}`, `{attempt}` and `{reference}` (the testbed: `TESTBED_REVISE_PROMPT`)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Length budget of a revision (None: `rollout.max_new_tokens`); a truncated revision counts as failed."""
    temperature: float | None = Field(None, ge=0.0)
    """Sampling temperature of the revisions (None: `rollout.temperature`; 0: greedy)."""
    rewrite: list[tuple[str, str]] = Field(default_factory=list)
    """Regex `[pattern, replacement]` pairs applied to attempts and references before they enter the prompt.

    The testbed's is `TESTBED_REVISE_REWRITE`, which shows an attempt by its written values only."""

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, template: str) -> str:
        return check_template(template)

    @field_validator("rewrite")
    @classmethod
    def _rewrite(cls, rewrites: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return check_rewrites(rewrites)


class VineConfig(Section):
    """Options of the vine sampler (`rollout.vine`): Monte-Carlo step values (VinePPO, arXiv 2410.01679)."""

    k: int = Field(9, ge=1)
    """Continuations sampled from each state between two thoughts to estimate its value (the paper's K = 9)."""
    failures_only: bool = False
    """Estimate step values for failed responses only; a correct response is one step from the prompt."""
    max_boundaries: int | None = Field(None, ge=1)
    """Estimate at most this many states per response, drawn at random among its thought boundaries (None: all).

    The thoughts between two estimated states form one step and share its advantage; this bounds the cost
    (`k` continuations per state) on long responses."""
    thoughts: ThoughtRules = ThoughtRules()
    """How a response is cut into thoughts (its steps) and when its episode ends, as for resets."""


class VllmConfig(Section):
    """Options of the vLLM generation backend (`rollout.backend: vllm`; CUDA only, `pip install 'credo[vllm]'`).

    vLLM runs in the trainer's process on the same GPU (TRL's "colocate" mode) and receives the policy's
    weights after every optimiser step.
    """

    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    """Share of the GPU's memory vLLM may take for its weights and KV cache (the trainer needs the rest)."""
    max_model_len: int | None = Field(None, ge=1)
    """Longest prompt + response (None: the model's own limit)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    """Dtype of vLLM's copy of the weights ("auto": vLLM picks it from the model's own dtype)."""
    enable_sleep_mode: bool = False
    """Free vLLM's memory during the update (its weights and KV cache are offloaded and restored)."""


class RolloutConfig(Section):
    backend: Literal["transformers", "vllm"] = "transformers"
    """Generation engine: transformers' `generate` (everywhere) or vLLM (CUDA only, optional extra)."""
    vllm: VllmConfig = VllmConfig()
    """Options of the vLLM backend (read only when `backend` is "vllm")."""
    prompts_per_step: int = Field(16, ge=1)
    """Prompts per rollout batch (groups per optimiser step)."""
    group_size: int = Field(8, ge=2)
    """Responses sampled per prompt."""
    max_new_tokens: int = Field(48, ge=1)
    """Most tokens generated per response, in training and evaluation; a longer response is cut (truncated)."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature of the rollouts; the update's log-probs use the same (logits / temperature)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: draw from the smallest set of tokens whose probability reaches top_p (1.0: off)."""
    common_random_numbers: bool = False
    """Key every sampling draw by (seed, step, call, row, token), so paired runs share their sampling noise.

    Common random numbers (`credo.rollout.crn`): two methods' runs on one seed draw the same uniforms for the same
    rows, a variance reduction for paired comparisons. Transformers backend only."""
    stop: list[str] = Field(default_factory=list)
    """Extra stop strings (the tokenizer's end-of-sequence token always stops)."""
    generation_batch_size: int = Field(256, ge=1)
    """Rows generated together (memory bound)."""
    cuda_graphs: bool = True
    """On a GPU, replay each decoding step from a CUDA graph; ignored on CPU.

    Decoding a small model on a GPU is bound by kernel launches; a graph replays a step's kernels with one launch
    (`credo.rollout.decode_step`). Off: a forward pass per step. Transformers backend."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and refill with new prompts."""
    max_refills: int = Field(3, ge=0)
    """Extra sampling rounds dynamic sampling may spend to fill the batch."""
    overlong_buffer: int | None = Field(None, ge=1)
    """DAPO's soft overlong penalty: the last `overlong_buffer` tokens before max_new_tokens cost up to -1."""
    reward_errors: Literal["raise", "zero"] = "raise"
    """A verifier that raises: stop the step showing the prompt ("raise"), or reward 0 with a warning."""
    resets: ResetConfig = ResetConfig()
    """Options of the reset sampler (`credo.rollout.samplers.ResetSampler`: RRPO, SRPO)."""
    revisions: RevisionConfig = RevisionConfig()
    """Options of the revision sampler (`credo.rollout.samplers.RevisionSampler`: IBPO)."""
    vine: VineConfig = VineConfig()
    """Options of the vine sampler (`credo.rollout.samplers.VineSampler`: Monte-Carlo step values)."""

    @model_validator(mode="after")
    def _keyed_sampling_needs_transformers(self) -> RolloutConfig:
        if self.common_random_numbers and self.backend != "transformers":
            raise ValueError(f"rollout.common_random_numbers needs the transformers backend (rollout.backend is "
                             f"{self.backend!r}, which samples with its own generator)")
        return self
