"""A testbed regime's facts, measured on its starting model: what RL starts from, and what a failure's blame is.

Where the blame of a failure lies decides which credit methods can act (docs/testbed.md, sec. 3): resets to the
first wrong thought help when that thought decides the failure, and a reward-only method is misled by *lucky
successes* (right answer, wrong steps). `regime_facts` samples the starting policy on the regime's training
problems and reads every response with the step checker:

- `greedy_pass@1` on the held-out problems (overall and per chain length) and `sampled_accuracy` on training problems;
- `lucky_share`: correct responses that hold a wrong step, over the correct responses;
- `errors_per_failure`: wrong steps per failed response (`ArithTask.wrong_steps`), and `single_error_share`,
  the failures with exactly one;
- `first_error_kinds`: what each failure's first wrong step was (a misconception's name, "slip", "format",
  "answer"), as shares of the failures.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice

from credo.evaluate import summarise
from credo.rollout.generate import encode_prompts
from credo.tasks import verify_all
from credo.tasks.arith import ArithTask


def regime_facts(task: ArithTask, backend, *, eval_problems, problems: int, samples: int, seed: int,
                 temperature: float, max_new_tokens: int) -> dict:
    """The facts above from `samples` responses to each of the first `problems` training problems of the stream
    `seed`, at `temperature`, and one greedy response per held-out problem in `eval_problems`."""
    if not isinstance(task, ArithTask):
        raise ValueError(f"regime facts read arith chains step by step; task {task.name!r} is not the testbed's arith")
    train = list(islice(task.train_problems(seed), problems))
    out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in train]),
                           max_new_tokens=max_new_tokens, temperature=temperature, repeat=samples)
    rows = [p for p in train for _ in range(samples)]
    verdicts = verify_all(task, rows, out.texts, "raise")[0]
    errors = [task.wrong_steps(p.meta["chain"], text) for p, text in zip(rows, out.texts)]
    correct = [e for v, e in zip(verdicts, errors) if v.correct]
    failed = [(v, e) for v, e in zip(verdicts, errors) if not v.correct]
    greedy_out = backend.generate(encode_prompts(backend.tokenizer, [p.prompt for p in eval_problems]),
                                  max_new_tokens=max_new_tokens, greedy=True)
    greedy = [v.correct for v in verify_all(task, eval_problems, greedy_out.texts, "raise")[0]]
    held_out = summarise([p.difficulty for p in eval_problems], greedy, None, [1])
    kinds = Counter(v.error_kind for v, _ in failed)
    return {
        "greedy_pass@1": held_out["greedy_pass@1"],
        "greedy_by_difficulty": {d: m["greedy_pass@1"] for d, m in held_out["by_difficulty"].items()},
        "sampled_accuracy": len(correct) / len(verdicts),
        "lucky_share": sum(e > 0 for e in correct) / len(correct) if correct else 0.0,
        "errors_per_failure": sum(e for _, e in failed) / len(failed) if failed else 0.0,
        "single_error_share": sum(e == 1 for _, e in failed) / len(failed) if failed else 0.0,
        "first_error_kinds": {kind: count / len(failed) for kind, count in kinds.most_common()},
        "responses": len(verdicts),
    }
