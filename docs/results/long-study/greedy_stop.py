"""Where do the long regime's 12-step greedy answers go wrong? (docs/results/long-study/README.md, "Greedy collapses")

Counts the thoughts each greedy response writes, and reads the policy's next-token probabilities after the chain's
first n-1 and n right thoughts written in three forms (no check, every other thought checked, every thought checked):
continue with the next step's label, or box the answer. A trained run's directory and its config:

    python docs/results/long-study/greedy_stop.py RUN_DIR RUN_DIR/config.yaml
"""
import collections
import sys
from pathlib import Path

import torch

from credo.cli import evaluation_setup
from credo.config import ModelConfig, load_config
from credo.rollout.generate import encode_prompts
from credo.tasks.arith import BOXED, STEP_LABELS, trace
from credo.tasks.base import THOUGHT_END

target, config_path = Path(sys.argv[1]), sys.argv[2]
run = load_config(config_path)
torch.manual_seed(0)
backend, task, problems = evaluation_setup(run, ModelConfig(path=str(target / "model")))
tok, model = backend.tokenizer, backend.model
prompts = encode_prompts(tok, [p.prompt for p in problems])
with torch.no_grad():
    out = backend.generate(prompts, max_new_tokens=run.rollout.max_new_tokens, greedy=True)
box = tok(BOXED, add_special_tokens=False)["input_ids"][0]


@torch.no_grad()
def next_probs(prompt_ids, text):
    """P(next token) after prompt + text: of the next label's first token and of the boxed answer's."""
    ids = prompt_ids + tok(text, add_special_tokens=False)["input_ids"]
    logits = model(torch.tensor([ids])).logits[0, -1]
    return torch.softmax(logits.float(), -1)


for d in sorted({p.difficulty for p in problems}):
    idx = [i for i, p in enumerate(problems) if p.difficulty == d]
    n = len(problems[idx[0]].meta["chain"].steps)
    thoughts = collections.Counter(out.texts[i].count(THOUGHT_END) for i in idx)
    print(f"{d}: thoughts written by greedy responses {dict(sorted(thoughts.items()))}")
    # on the correct chain's own prefix (every step right; no checks, every other thought checked, or all), P(continue) after n-1 and after n thoughts
    for checks, after in [(c, a) for c in ("none", "half", "all") for a in (n - 1, n)]:
        cont, stop = [], []
        for i in idx:
            chain = problems[i].meta["chain"]
            flags = [checks == "all" or (checks == "half" and k % 2 == 1) for k in range(n)]
            prefix = trace(chain, chain.values(), flags).split(THOUGHT_END)
            text = THOUGHT_END.join(prefix[:after]) + THOUGHT_END
            p = next_probs(prompts[i], text)
            label = tok(STEP_LABELS[after], add_special_tokens=False)["input_ids"][0] if after < len(STEP_LABELS) else None
            cont.append(float(p[label]) if label is not None else float("nan"))
            stop.append(float(p[box]))
        cont.sort(), stop.sort()
        m = len(cont) // 2
        print(f"  checks {checks:4s} after {after} right thoughts ({len(tok(THOUGHT_END.join(prefix[:after]))['input_ids'])} tokens): P(next label) median {cont[m]:.3f} [min {cont[0]:.3f}, max {cont[-1]:.3f}]"
              f"  P(box) median {stop[m]:.3f}; box likelier in {sum(not s <= c for s, c in zip(stop, cont))}/{len(cont)}")
