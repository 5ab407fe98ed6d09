"""One CredoGRPOTrainer run on the tiny testbed with TRL's generation scripted, for the multi-process test
(`test_trl.py::test_two_processes_over_gloo_equal_one`): run once as a plain script (one process) and once under
`accelerate launch --multi_gpu --num_processes 2` (two processes over gloo on a machine without GPUs).

Every row's completion is fixed by its global row index (the process's rows are a contiguous slice of the
generation batch), every prompt is the same and the reward is a function of the completion, so one process and
two see the same generation batch. The second optimiser step reuses the generation batch (`num_iterations=2`),
so its ratios leave 1 and its loss is not 0. Each process saves what it saw: the advantages of its rows, the loss
of each micro-batch and the weights before and after. Usage: trl_processes.py OUT_DIR METHOD"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from test_trl import COMPLETIONS, G, varied_reward  # this script's folder leads sys.path when it runs


def main(out: Path, method: str) -> None:
    from datasets import Dataset
    from tiny import TINY_TESTBED
    from trl import GRPOConfig

    from credo.config import load_config
    from credo.hf_compat import no_checkpointing
    from credo.integrations.trl import CredoGRPOTrainer
    from credo.models import load_model

    torch.manual_seed(0)
    model, tokenizer = load_model(load_config(None, [f"model.testbed={TINY_TESTBED}"]).model, torch.device("cpu"))
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "2+3"}]] * 16})
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch
    args = GRPOConfig(
        output_dir=str(out / "trainer"), use_cpu=True, bf16=False, seed=0, **no_checkpointing(),
        per_device_train_batch_size=len(COMPLETIONS) // processes, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=2, num_generations=G, max_completion_length=6, max_steps=2, learning_rate=1e-2,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )
    trainer = CredoGRPOTrainer(model=model, reward_funcs=[varied_reward], args=args, train_dataset=dataset,
                               processing_class=tokenizer, credo_method=method)

    def scripted(prompt_ids, *_, **__):
        rows = len(prompt_ids)
        return [list(c) for c in COMPLETIONS[rank * rows:(rank + 1) * rows]], None

    rank = trainer.accelerator.process_index
    assert trainer.accelerator.num_processes == processes
    trainer._generate_single_turn = scripted
    seen = {"advantages": [], "losses": []}
    credit, compute_loss = trainer._credo_credit, trainer._compute_loss

    def credit_spy(output, inputs=None):
        output = credit(output, inputs)
        seen["advantages"].append(output["advantages"].detach().clone())
        return output

    def loss_spy(model, inputs):
        loss = compute_loss(model, inputs)
        seen["losses"].append(float(loss.detach()))
        return loss

    trainer._credo_credit, trainer._compute_loss = credit_spy, loss_spy
    seen["start"] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    trainer.train()
    seen["weights"] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    seen["processes"] = processes
    torch.save(seen, out / f"rank{rank}.pt")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the tiny settings
    main(Path(sys.argv[1]), sys.argv[2])
