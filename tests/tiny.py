"""Tiny run settings: a testbed model of a few thousand parameters and runs of a few steps."""

TINY_TESTBED = "{steps: 2, batch_size: 8, model: {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64}}"

TINY = [
    f"model.testbed={TINY_TESTBED}",
    "train.steps=3",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.log_samples=2",
    "rollout.prompts_per_step=3",
    "rollout.group_size=2",
    "rollout.max_new_tokens=12",
    "eval.max_problems=2",
    "eval.samples=2",
    "eval.ks=[1, 2]",
]


def make_arith_verifier_flaky(monkeypatch, every: int = 3) -> dict:
    """Make the testbed task's verifier raise on every `every`-th call; returns the call counter."""
    from credo.tasks.arith import ArithTask

    original, calls = ArithTask.verify, {"n": 0}

    def flaky(self, problem, response):
        calls["n"] += 1
        if calls["n"] % every == 0:
            raise ValueError("flaky verifier")
        return original(self, problem, response)

    monkeypatch.setattr(ArithTask, "verify", flaky)
    return calls
