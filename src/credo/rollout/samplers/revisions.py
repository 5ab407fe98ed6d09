"""IBPO's revision sampler (arXiv 2605.16302; docs/methods.md sec. 5).

1. Sample i.i.d. groups as GRPO does (`credo.rollout.groups.sample_groups`).
2. For every failed response, choose `K-1` sibling references (correct siblings first;
   `credo.rollout.revise.choose_references`) and ask the policy for a revision given the problem, the
   failure and the reference. All revisions of a step are generated in one batch with the rollouts' engine
   and verified by the task; an empty, unparseable or over-long (truncated) revision is a failed one.
3. Per failure, `s_i` = the share of its revisions that verify correct (0 for correct responses), and the
   edited-token mask: the tokens of `y_i` that the closest successful revision (token-level Levenshtein)
   changed. The credit estimator (`credo.credit.revisions`) shapes the rewards and applies the mask.
Revisions are never trained on; their tokens are counted in the rollout's cost.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field, field_validator

from credo.batch import RecordedField, inside_response
from credo.credit.revisions import closest_revision, edit_mask
from credo.rollout.backend import GenerationBackend
from credo.rollout.generate import Completions, encode_prompts
from credo.rollout.groups import ProblemStream, Rollout, sample_groups
from credo.rollout.revise import REVISE_PROMPT, check_rewrites, check_template, choose_references, revision_prompt
from credo.rollout.samplers.base import Sampler, registered
from credo.schema import Section
from credo.tasks import Task, verify_all

if TYPE_CHECKING:
    from credo.rollout.samplers import RolloutConfig


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


@dataclass(frozen=True)
class Revision:
    """One revision of a failed row against a reference row, and whether it verified."""

    row: int
    reference: int
    ids: list[int]
    success: bool
    truncated: bool
    sandbox_failed: bool = False
    """Its verification failed in the sandbox (see `Verdict.sandbox_failed`)."""


def sample_revisions(backend: GenerationBackend, task: Task, stream: ProblemStream, config: RolloutConfig,
                     rng: random.Random | None = None) -> Rollout:
    """`prompts_per_step` groups with IBPO's revision success and edited-token masks (module docstring)."""
    rollout = sample_groups(backend, task, stream, config)
    correct = [v.correct for v in rollout.verdicts]
    requests = revision_requests(rollout.group_id.tolist(), correct, config.revisions.k - 1, rng)
    revisions, errors = revise(backend, task, rollout, requests, config)
    by_row: dict[int, list[Revision]] = defaultdict(list)
    for revision in revisions:
        by_row[revision.row].append(revision)
    c = rollout.completions
    success = torch.zeros(len(correct))
    mask = torch.zeros_like(c.response_mask)
    for row, own in by_row.items():
        success[row] = sum(r.success for r in own) / len(own)
        repaired = [r.ids for r in own if r.success]
        if repaired:
            ids = c.response_ids[row][c.response_mask[row]].tolist()
            mask[row, : len(ids)] = edit_mask(ids, repaired[closest_revision(ids, repaired)])
    rollout.records.update(revision_success=success, edit_mask=mask)
    cost = sum(len(r.ids) for r in revisions)
    rollout.metrics.update(revision_metrics(revisions, success, correct, cost, rollout.generated_tokens))
    rollout.metrics["rollout/reward_errors"] = rollout.metrics.get("rollout/reward_errors", 0) + errors
    rollout.metrics["verify/sandbox_failures"] = (rollout.metrics.get("verify/sandbox_failures", 0)
                                                  + sum(r.sandbox_failed for r in revisions))
    rollout.generated_tokens += cost
    return rollout


def revision_requests(group_id: list[int], correct: list[bool], references: int,
                      rng: random.Random | None = None) -> list[tuple[int, int]]:
    """(failed row, reference row) pairs: `references` per failed row, from its own group."""
    members: dict[int, list[int]] = defaultdict(list)
    for row, group in enumerate(group_id):
        members[group].append(row)
    requests = []
    for rows in members.values():
        flags = [correct[r] for r in rows]
        for position, row in enumerate(rows):
            if not correct[row]:
                requests += [(row, rows[j]) for j in choose_references(flags, position, references, rng)]
    return requests


def revise(backend: GenerationBackend, task: Task, rollout: Rollout, requests: list[tuple[int, int]],
           config: RolloutConfig) -> tuple[list[Revision], int]:
    """Generate and verify one revision per request, in one batch; also the verifier errors scored 0."""
    if not requests:
        return [], 0
    options: RevisionConfig = config.revisions
    texts = rollout.completions.texts
    problems = [rollout.problems[row] for row, _ in requests]
    prompts = [revision_prompt(p.prompt, texts[row], texts[ref], options.prompt, options.rewrite)
               for p, (row, ref) in zip(problems, requests)]
    temperature = config.temperature if options.temperature is None else options.temperature
    out: Completions = backend.generate(
        encode_prompts(backend.tokenizer, prompts), max_new_tokens=options.max_new_tokens or config.max_new_tokens,
        temperature=max(temperature, 1e-5), top_p=config.top_p, greedy=temperature == 0.0,
    )
    ids = out.id_lists()
    verdicts, errors = verify_all(task, problems, out.texts, config.reward_errors, ids)
    revisions = [
        Revision(row, ref, ids[n], verdict.correct and not bool(out.truncated[n]), bool(out.truncated[n]),
                 verdict.sandbox_failed)
        for n, ((row, ref), verdict) in enumerate(zip(requests, verdicts))
    ]
    return revisions, errors


def revision_metrics(revisions: list[Revision], success, correct: list[bool], cost: int,
                     rollout_tokens: int) -> dict[str, float]:
    """Revision success (overall and by the reference's verdict), repairable failures, truncation, cost."""
    failures = [row for row, ok in enumerate(correct) if not ok]
    metrics = {
        "revisions/count": float(len(revisions)),
        "revisions/tokens": float(cost),
        "revisions/extra_cost": cost / max(1, rollout_tokens),
        "revisions/repairable_share": sum(float(success[r]) > 0 for r in failures) / len(failures) if failures else 0.0,
    }
    if not revisions:
        return metrics
    metrics["revisions/success_rate"] = sum(r.success for r in revisions) / len(revisions)
    metrics["revisions/truncated_share"] = sum(r.truncated for r in revisions) / len(revisions)
    for name, kind in (("correct_ref", True), ("failed_ref", False)):
        chosen = [r for r in revisions if correct[r.reference] == kind]
        if chosen:
            metrics[f"revisions/success_rate_{name}"] = sum(r.success for r in chosen) / len(chosen)
    return metrics


def _toy_edits() -> torch.Tensor:
    """The demo's edits: tokens 4-5 of row 1 are what its closest successful revision changed."""
    edit = torch.zeros(4, 6, dtype=torch.bool)
    edit[1, 3:5] = True
    return edit


@registered
@dataclass(frozen=True)
class RevisionSampler(Sampler):
    name: ClassVar[str] = "revisions"
    draws: ClassVar[str] = "i.i.d. groups plus the policy's revisions of every failure (never trained on)"
    records: ClassVar[Mapping[str, RecordedField]] = {
        "revision_success": RecordedField(
            "row", "float", "share of a failure's revisions that verified correct (0 for correct rows)",
            lambda s, response: ((s < 0) | (s > 1), "must lie in [0, 1]"),
            lambda: torch.tensor([0.0, 2.0 / 3.0, 0.0, 0.0])),  # the demo: two of three revisions of row 1 verify
        "edit_mask": RecordedField(
            "token", "bool", "tokens the closest successful revision changed (rows without one: none)",
            inside_response,
            _toy_edits),
    }
    iid: ClassVar[bool] = False
    verl_agent_loop: ClassVar[str | None] = "RevisionAgentLoop"
    options: ClassVar[type[Section] | None] = RevisionConfig

    def sample(self, backend: GenerationBackend, task: Task, stream: ProblemStream, options: RolloutConfig) -> Rollout:
        return sample_revisions(backend, task, stream, options)
