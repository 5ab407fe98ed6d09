"""The reset sampler of RRPO and SRPO (arXiv 2605.25507; docs/methods.md sec. 4).

For every prompt of a step, batched across prompts:
1. Draw fresh rollouts (thought MDP episodes) in a few batched rounds, at most `max_draws`; plan seeds and
   base rows with `credo.rollout.reset_plan` (a prompt without a failure becomes a plain group).
2. Localise each seed's first wrong thought `k` (`random`, `self`, `oracle` with an accuracy to dial, or
   `sampled` from Monte-Carlo values; never trained on).
3. Keep the seed's thoughts `1..k-1` as a prefix (token ids, no re-tokenisation) and sample the
   continuations of `prompt + prefix` together, the prefix's KV cache shared across its continuations.
   A continuation's reward is the reward of the whole response (prefix + continuation).
Base and suffix groups get their own group ids (normalised separately); suffix rows record the prefix
length, so the credit estimator trains them only after it. Every generated token is counted, by kind.

On a task with an environment (`Task.environment`) a rollout is a multi-turn episode (`credo.rollout.episodes`)
and its turns are the thoughts: a turn with the observation after it is one segment, a reset keeps the seed's
turns `1..k-1` with their observations and the environment's state after them, and the continuations are episodes
continued from there, all in one lockstep batch (`TurnRow`). The `oracle` localiser names the per-turn checker's
first wrong turn (a turn that decides nothing, such as a check, is never wrong), `random` a uniformly drawn turn;
`self` and `sampled` refuse turns. The episodes' batch fields (`Rollout.checks`: the policy's tokens as the loss
mask, the turns and their verdicts, anchors and rewards) come with every row, so suffix rows train on the policy's
tokens after their prefix only; counted are the policy's tokens sampled, never observations nor kept prefixes.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, get_args

import torch
from pydantic import Field

from credo.batch import RecordedField
from credo.passk import pass_at_k
from credo.rollout.backend import GenerationBackend
from credo.rollout.episodes import Episodes, Prefix, sample_episodes
from credo.rollout.generate import encode_prompts, per_token
from credo.rollout.groups import ProblemStream, Rollout
from credo.rollout.localise import LOCALISE_PROMPT, STEP_FORMAT, localisation_prompt, parse_step
from credo.rollout.reset_plan import SPLITS, draws_needed, plan
from credo.rollout.rows import SEGMENT_IDS, Row, assemble, continue_rows, make_rows
from credo.rollout.samplers.base import Sampler, registered
from credo.rollout.thoughts import Episode, ThoughtRules
from credo.rollout.values import boundary_values, first_below, largest_drop
from credo.schema import Section
from credo.tasks import Task, sandbox_failures

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


Localiser = Literal["random", "self", "oracle", "sampled"]
LOCALISERS: tuple[str, ...] = get_args(Localiser)
"""The first-wrong-thought localisers of the reset sampler (`credo.rollout.samplers.resets`)."""
TURN_REFUSALS: dict[str, str] = {
    "self": "the policy was never taught a prompt that asks it for an episode's first wrong turn",
    "sampled": "its Monte-Carlo values continue single responses, not episodes",
}
"""Why a localiser cannot find an episode's first wrong turn (the others can: `random`, `oracle`)."""


def check_turn_localiser(localiser: str) -> None:
    """A `ValueError` if `localiser` cannot find the first wrong turn of a multi-turn episode (`TURN_REFUSALS`)."""
    if localiser in TURN_REFUSALS:
        raise ValueError(f"rollout.resets.localiser = {localiser!r} cannot localise a wrong turn of a multi-turn "
                         f"episode: {TURN_REFUSALS[localiser]} (use 'oracle' or 'random')")


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
    "sampled" reads Monte-Carlo values of the states between the seed's thoughts (`localiser_samples`). On a task
    with an environment, whose episodes reset at turn boundaries, only "random" and "oracle" apply."""
    oracle_accuracy: float = Field(1.0, ge=0.0, le=1.0)
    """Share of seeds the oracle localiser names exactly (1: perfect); the others get a wrong thought.

    A study can dial localiser accuracy from the policy's own (about 0.2 on the testbed) to perfect; the
    errors follow `oracle_earlier` (`credo.rollout.samplers.resets.noisy_oracle`)."""
    oracle_earlier: float = Field(38 / 88, ge=0.0, le=1.0)
    """Share of the noisy oracle's errors placed before the first wrong thought; the rest after it.

    The default is the SRPO paper's measured localiser profile (exact 12%, earlier 38%, later 51%, as rounded
    there): 38/88 of the errors earlier, the other 50/88 later (50% of all seeds at `oracle_accuracy` 0.12)."""
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


@dataclass
class Seed:
    prompt_index: int
    row: Row
    k: int = 1
    """Localised first wrong thought (1-based)."""
    oracle_k: int | None = None
    how: str = ""
    continuations: list[Row] = field(default_factory=list)


@dataclass
class TurnRow(Row):
    """A row of a task with an environment: one episode (`credo.rollout.episodes`) whose turns are the row's
    thoughts (`episode.ends`: each turn's end, its observation included), kept in the batch it was sampled in."""

    source: Episodes | None = None
    index: int = 0

    def prefix(self, turns: int) -> Prefix:
        """The episode's first `turns` turns with their observations and the environment's state after them."""
        return self.source.prefix(self.index, turns)


def episode_rows(backend: GenerationBackend, task, problems, prompts, repeat: int, config,
                 starts: list[Prefix] | None = None) -> list[TurnRow]:
    """`repeat` episodes per problem, continuing `starts[i]` where given (one lockstep batch), as rows: verdicts
    the environment's, `prefix_len` the kept prefix's tokens, `tokens` the policy's tokens sampled here."""
    out = sample_episodes(backend, task.environment, problems, prompts, repeat=repeat,
                          budget_tokens=config.max_new_tokens, temperature=config.temperature, top_p=config.top_p,
                          starts=starts)
    rows = []
    for r, verdict in enumerate(out.verdicts()):
        reason = ("answer" if not out.truncated[r] else
                  "max_thoughts" if len(out.outcomes[r]) >= task.environment.max_turns else "budget")
        rows.append(TurnRow(problems[r // repeat], out.prompts[r], Episode(out.tokens[r], out.turn_ends(r), reason),
                            "".join(out.texts[r]), verdict, out.truncated[r], prefix_len=out.prefix_len[r],
                            tokens=out.generated(r), source=out, index=r))
    return rows


def sample_resets(backend: GenerationBackend, task: Task, stream: ProblemStream, config, localiser: str) -> Rollout:
    """`config.prompts_per_step` prompts' reset groups as one rollout (see the module docstring)."""
    resets: ResetConfig = config.resets
    split = SPLITS[resets.split]
    if task.environment is not None:
        check_turn_localiser(localiser)
    problems = stream.take(config.prompts_per_step)
    prompts = encode_prompts(backend.tokenizer, [p.prompt for p in problems])
    cost = Counter()
    draws = draw_rounds(backend, task, problems, prompts, config, resets, split)
    plans = [plan([r.verdict.correct for r in d], split, resets.max_draws) for d in draws]
    seeds = [Seed(i, draws[i][s]) for i, p in enumerate(plans) for s in p.seeds]
    localise(backend, task, seeds, config, localiser, cost)
    continue_seeds(backend, task, seeds, config, split, cost)
    groups: list[list[Row]] = []  # per prompt: its base (or plain) group, then its suffix groups
    for i, p in enumerate(plans):
        if p.base:
            groups.append([draws[i][j] for j in p.base])
        groups += [s.continuations for s in seeds if s.prompt_index == i]
        cost["base"] += sum(draws[i][j].tokens for j in p.base)
        cost["seed"] += sum(r.tokens for j, r in enumerate(draws[i]) if j not in p.base)
    rollout = reset_rollout(groups, backend.tokenizer.pad_token_id, sum(cost.values()))
    rollout.metrics = reset_metrics(plans, seeds, cost, task.checks_steps)
    verified = [r for d in draws for r in d] + [r for s in seeds for r in s.continuations]
    rollout.metrics["verify/sandbox_failures"] = sandbox_failures([r.verdict for r in verified])
    return rollout


def draw_rounds(backend: GenerationBackend, task, problems, prompts, config, resets, split) -> list[list[Row]]:
    """Fresh draws per prompt, in batched rounds, until every prompt's plan is complete."""
    draws: list[list[Row]] = [[] for _ in problems]
    while True:
        needed = [draws_needed([r.verdict.correct for r in d], split, resets.max_draws) for d in draws]
        if not any(needed):
            return draws
        for count in sorted(set(needed) - {0}):
            chosen = [i for i, n in enumerate(needed) if n == count]
            rows = draw_rows(backend, task, [problems[i] for i in chosen], [prompts[i] for i in chosen], count, config)
            for slot, row in enumerate(rows):
                draws[chosen[slot // count]].append(row)


def draw_rows(backend: GenerationBackend, task, problems, prompts, repeat: int, config) -> list[Row]:
    """`repeat` fresh rows per problem: responses cut into thoughts, or where the task has an environment, episodes
    (`episode_rows`)."""
    if task.environment is not None:
        return episode_rows(backend, task, problems, prompts, repeat, config)
    out = backend.generate(prompts, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                           top_p=config.top_p, repeat=repeat)
    return make_rows(backend.tokenizer, task, [p for p in problems for _ in range(repeat)], out,
                     config.resets.thoughts, config.reward_errors)


def localise(backend: GenerationBackend, task, seeds: list[Seed], config, localiser: str, cost) -> None:
    """Set each seed's `k` (and `oracle_k` where the task checks steps). The random and noisy-oracle localisers
    draw from Python's global RNG, which the trainer seeds and checkpoints."""
    resets: ResetConfig = config.resets
    for seed in seeds:
        n = max(1, seed.row.episode.num_thoughts)  # an empty response is one empty thought
        if task.checks_steps:
            seed.oracle_k = seed.row.first_wrong_thought() or n
        if localiser == "random":
            seed.k, seed.how = random.randint(1, n), "random"
        elif localiser == "oracle":
            if seed.oracle_k is None:
                raise ValueError(f"the oracle localiser needs a task with a step checker; {task.name} has none")
            seed.k = noisy_oracle(seed.oracle_k, n, resets.oracle_accuracy, resets.oracle_earlier, random)
            seed.how = "oracle"
    if localiser == "sampled":
        localise_by_values(backend, task, seeds, config, cost)
    elif localiser == "self" and seeds:
        localise_by_asking(backend, seeds, resets, cost)


def localise_by_values(backend: GenerationBackend, task, seeds: list[Seed], config, cost) -> None:
    """The `sampled` localiser: Monte-Carlo values (`credo.rollout.values`) of the states before each of a seed's
    thoughts, from `localiser_samples` continuations each; the seed's first wrong thought is the first whose
    value falls below `localiser_threshold` (if set and reached), else the one after which it falls the most
    (the seed's own reward standing for the value after its last thought). Its continuations are never trained
    on; their tokens count as localisation."""
    resets: ResetConfig = config.resets
    requests = [(s.row, range(max(1, s.row.episode.num_thoughts))) for s in seeds]
    values, tokens = boundary_values(backend, task, requests, resets.localiser_samples, config, resets.thoughts)
    cost["localisation"] += tokens
    for seed, estimates in zip(seeds, values):
        final = seed.row.verdict.reward
        below = first_below(estimates, final, resets.localiser_threshold) if resets.localiser_threshold is not None else None
        seed.k, seed.how = (below, "threshold") if below is not None else (largest_drop(estimates, final), "drop")


def localise_by_asking(backend: GenerationBackend, seeds: list[Seed], resets: ResetConfig, cost) -> None:
    """The `self` localiser: the policy is asked for each seed's first wrong thought (`credo.rollout.localise`)."""
    tokenizer = backend.tokenizer
    texts = []
    for seed in seeds:
        ep = seed.row.episode
        thoughts = [tokenizer.decode(ep.ids[a:b], skip_special_tokens=True) for a, b in zip([0] + ep.ends, ep.ends)]
        texts.append(localisation_prompt(seed.row.problem.prompt, thoughts, resets.localiser_prompt,
                                         resets.localiser_step_format))
    temperature = resets.localiser_temperature
    if temperature is None:
        temperature = 0.0 if resets.split == "1x8" else 0.3
    out = backend.generate(encode_prompts(tokenizer, texts), max_new_tokens=resets.localiser_max_tokens,
                           temperature=max(temperature, 1e-5), greedy=temperature == 0.0)
    cost["localisation"] += out.tokens
    for seed, reply in zip(seeds, out.texts):
        seed.k, seed.how = parse_step(reply, max(1, seed.row.episode.num_thoughts))


def noisy_oracle(first_wrong: int, thoughts: int, accuracy: float, earlier: float, rng) -> int:
    """The oracle localiser's answer (1-based thought) for a seed whose first wrong thought is `first_wrong` of
    `thoughts`: exact with probability `accuracy`; otherwise a uniformly drawn earlier thought with probability
    `earlier`, else a later one (the side that has no thought gives way to the other; a one-thought response
    is always exact). `rng` is a `random.Random`-like source (the trainer's seeded, checkpointed stream).

    >>> import random
    >>> noisy_oracle(3, 5, 1.0, 0.5, random.Random(0)), noisy_oracle(1, 1, 0.0, 0.5, random.Random(0))
    (3, 1)
    """
    if accuracy >= 1.0 or rng.random() < accuracy:
        return first_wrong
    before, after = first_wrong - 1, thoughts - first_wrong
    if not before and not after:
        return first_wrong
    go_earlier = (rng.random() < earlier and before > 0) or after == 0
    return rng.randint(1, first_wrong - 1) if go_earlier else rng.randint(first_wrong + 1, thoughts)


def continue_seeds(backend: GenerationBackend, task, seeds: list[Seed], config, split, cost) -> None:
    """Sample every seed's continuations from `prompt + prefix`, batched (shared prefix caches), each within what
    its response's token budget leaves after the prefix (`credo.rollout.rows.continue_rows`); where the task has an
    environment, episodes continued from each seed's first `k - 1` turns, in one lockstep batch."""
    c = split.continuations
    if task.environment is not None:
        rows = episode_rows(backend, task, [s.row.problem for s in seeds], [s.row.prompt for s in seeds], c, config,
                            starts=[s.row.prefix(s.k - 1) for s in seeds]) if seeds else []
    else:
        starts = [(s.row, s.row.episode.prefix(s.k - 1)) for s in seeds]
        rows = continue_rows(backend, task, starts, c, config, config.resets.thoughts)
    for i, seed in enumerate(seeds):
        seed.continuations = rows[i * c : (i + 1) * c]
    cost["suffix"] += sum(r.tokens for r in rows)


def reset_rollout(groups: list[list[Row]], pad: int, tokens: int) -> Rollout:
    """The groups' rows as one rollout, with each row's kept prefix length and the thought of every token; episodes
    (`TurnRow`) with their behaviour statistics and batch fields (`Episodes.token_fields`) as one batch's."""
    rollout = assemble(groups, pad, tokens)
    rows = [r for g in groups for r in g]
    width = rollout.completions.response_ids.shape[1]
    rollout.records = {"prefix_len": torch.tensor([r.prefix_len for r in rows], dtype=torch.long),
                       "segment_ids": per_token([r.episode.segment_ids() for r in rows], width, -1, torch.long)}
    if rows and all(isinstance(r, TurnRow) for r in rows):
        episodes = Episodes.gather([(r.source, r.index) for r in rows])
        rollout.completions = episodes.completions(pad)
        rollout.checks = episodes.token_fields(width)
    return rollout


def reset_metrics(plans, seeds: list[Seed], cost: Counter, checks_steps: bool) -> dict[str, float]:
    metrics: dict[str, float] = {
        "resets/seed_share": sum(not p.fallback for p in plans) / len(plans),
        "resets/fallbacks": float(sum(p.fallback for p in plans)),
    }
    for kind in ("base", "seed", "localisation", "suffix"):
        metrics[f"resets/tokens_{kind}"] = float(cost[kind])
    if not seeds:
        return metrics
    metrics["resets/position_mean"] = sum(s.k - 1 for s in seeds) / len(seeds)
    metrics["resets/position_rel_mean"] = sum((s.k - 1) / s.row.episode.num_thoughts for s in seeds) / len(seeds)
    metrics["resets/parse_fallback_share"] = sum(s.how == "fallback" for s in seeds) / len(seeds)
    if checks_steps:
        by_error: dict[str, list[Seed]] = {"exact": [], "earlier": [], "later": []}
        for s in seeds:
            by_error["exact" if s.k == s.oracle_k else "earlier" if s.k < s.oracle_k else "later"].append(s)
        for name, group in by_error.items():
            metrics[f"resets/localiser_{name}"] = len(group) / len(seeds)
            rows = [r for s in group for r in s.continuations]
            if rows:
                metrics[f"resets/correction_rate_{name}"] = sum(r.verdict.correct for r in rows) / len(rows)
        for name, clean in (("clean", True), ("wrong", False)):
            group = [s for s in seeds if (s.k <= s.oracle_k) == clean]
            passes = [pass_at_k(len(s.continuations), sum(r.verdict.correct for r in s.continuations),
                                min(4, len(s.continuations))) for s in group]
            if passes:
                metrics[f"resets/suffix_pass@4_{name}_prefix"] = sum(passes) / len(passes)
    return metrics


@registered
@dataclass(frozen=True)
class ResetSampler(Sampler):
    name: ClassVar[str] = "resets"
    draws: ClassVar[str] = ("groups built from resets of failed rollouts to a localised first wrong thought "
                            "(base and suffix groups, continuations of a kept prefix)")
    records: ClassVar[Mapping[str, RecordedField]] = {
        "prefix_len": RecordedField(
            "row", "int", "kept prefixes: the leading response tokens a continuation continues (0 for fresh rows)",
            lambda p, response: ((p < 0) | (p > response.sum(dim=1)), "must lie in [0, response length]"),
            lambda: torch.full((4,), 2)),  # the demo: four continuations of a failed seed's first two tokens
        "segment_ids": SEGMENT_IDS,
    }
    iid: ClassVar[bool] = False
    verl_agent_loop: ClassVar[str | None] = "ResetAgentLoop"
    options: ClassVar[type[Section] | None] = ResetConfig
    dapo_options: ClassVar[bool] = False
    episodes: ClassVar[bool] = True

    localiser: str = "random"
    """The first-wrong-thought localiser (random | self | oracle | sampled); `rollout.resets.localiser` overrides it."""

    def __post_init__(self) -> None:
        if self.localiser not in LOCALISERS:
            raise ValueError(f"ResetSampler.localiser must be one of {', '.join(LOCALISERS)}, got {self.localiser!r}")

    def localiser_for(self, options: RolloutConfig) -> str:
        """The localiser a run uses: `rollout.resets.localiser`, else the method's own."""
        return options.resets.localiser or self.localiser

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_resets(backend, task, stream, options, self.localiser_for(options))

    def check(self, options: RolloutConfig, checks_steps: bool, multi_turn: bool = False) -> None:
        super().check(options, checks_steps, multi_turn)
        localiser = self.localiser_for(options)
        if multi_turn:
            check_turn_localiser(localiser)
        oracle = localiser == "oracle"
        if oracle and not checks_steps:
            raise ValueError("rollout.resets.localiser = 'oracle' needs a task with a step checker")
        if not oracle and options.resets.oracle_accuracy < 1.0:
            raise ValueError(f"rollout.resets.oracle_accuracy = {options.resets.oracle_accuracy} applies to the oracle "
                             f"localiser only; this run localises with {localiser!r}")
        if localiser != "sampled" and options.resets.localiser_threshold is not None:
            raise ValueError(f"rollout.resets.localiser_threshold = {options.resets.localiser_threshold} applies to the "
                             f"sampled localiser only; this run localises with {localiser!r}")

    def estimator_switches(self, options: RolloutConfig) -> dict[str, object]:
        """The `nomask` split trains suffix rows on their prefix too (`ResetAdvantage.train_prefix`)."""
        return {"train_prefix": True} if SPLITS[options.resets.split].train_prefix else {}
