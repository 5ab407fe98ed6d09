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
