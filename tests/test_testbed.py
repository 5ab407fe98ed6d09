"""The testbed's SFT data: the localisation job's labels and its agreement with the sampler's prompt."""

from __future__ import annotations

import random

import pytest

from credo.rollout.localise import TESTBED_PROMPT, TESTBED_STEP_FORMAT, localisation_prompt
from credo.rollout.thoughts import ThoughtRules, episode, token_pieces
from credo.tasks.arith import ArithConfig, ArithTask
from credo.testbed import LocalisationJob, TestbedConfig, build_tokenizer, localisation_example, sft_examples


def test_localisation_labels_follow_the_configured_error_profile():
    job = LocalisationJob(p_exact=0.2, p_earlier=0.3)
    task = ArithTask(ArithConfig(min_steps=4, max_steps=6))
    rng = random.Random(0)
    counts = {"exact": 0, "earlier": 0, "later": 0}
    eligible = 0
    for _ in range(3000):
        chain = task.random_chain(rng, rng.randint(4, 6))
        prompt, answer = localisation_example(job, task, chain, rng)
        label = int(answer[len("\\boxed{"):-1])
        lines = prompt.split("\n")[1]
        n = lines.count("</thought>") + 1
        # recover the true first wrong thought from the prompt's own trace
        trace = "".join(part[1:] if part[:1].isdigit() else part for part in _thoughts(lines))
        wrong, _ = task.first_wrong_step(chain, trace)
        k = wrong + 1
        if 1 < k < n:  # both an earlier and a later thought exist
            eligible += 1
            counts["exact" if label == k else "earlier" if label < k else "later"] += 1
    for name, p in (("exact", 0.2), ("earlier", 0.3), ("later", 0.5)):
        share = counts[name] / eligible
        assert abs(share - p) < 4.5 * (p * (1 - p) / eligible) ** 0.5, (name, share)


def _thoughts(steps: str) -> list[str]:
    """'1+5=12</thought>2*3=36</thought>3\\boxed{36}' -> ['1+5=12</thought>', '2*3=36</thought>', '3\\boxed{36}']."""
    parts = steps.split("</thought>")
    return [p + "</thought>" for p in parts[:-1]] + [parts[-1]]


def test_sampler_prompt_equals_the_trained_format():
    # The reset sampler rebuilds the localiser prompt from token-level thoughts; it must match SFT's text.
    tok = build_tokenizer()
    task = ArithTask()
    rng = random.Random(3)
    chain = task.random_chain(rng, 5)
    prompt, _ = localisation_example(LocalisationJob(), task, chain, rng)
    trace = "".join(part[1:] for part in _thoughts(prompt.split("\n")[1]))
    ids = tok(trace + "<|end|>", add_special_tokens=False)["input_ids"]
    ep = episode(ids, token_pieces(tok, ids), ThoughtRules())
    thoughts = [tok.decode(ep.ids[a:b], skip_special_tokens=True) for a, b in zip([0] + ep.ends, ep.ends)]
    assert localisation_prompt(chain.prompt, thoughts, TESTBED_PROMPT, TESTBED_STEP_FORMAT) == prompt


@pytest.mark.parametrize("share", [0.0, 0.25])
def test_localisation_share(share):
    config = TestbedConfig(localisation=LocalisationJob(share=share))
    tok = build_tokenizer()
    examples = sft_examples(config, ArithTask(config.task), tok, random.Random(0), 400)
    found = sum("first wrong step?" in tok.decode(p) for p, _ in examples) / 400
    assert abs(found - share) < 4.5 * (share * (1 - share) / 400) ** 0.5 + 1e-9
