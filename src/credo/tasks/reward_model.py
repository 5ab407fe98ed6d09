"""A sequence-classification reward model in `task.reward` (`{model: path/to/reward_model}`), as TRL allows one.

TRL's `GRPOTrainer` accepts a model id among its `reward_funcs` and scores with it so (TRL 1.16,
`GRPOTrainer.__init__` and `_calculate_rewards`):

- loading: `AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)` and its own tokenizer, whose
  pad token is its end-of-sequence token where it has none (also set as the model's `pad_token_id`);
- the text of a row: on a conversational dataset the prompt's messages and the completion's assistant message
  rendered with the reward tokenizer's chat template (`apply_chat_template(prompt + completion, tokenize=False)`,
  no generation prompt); on a plain-text dataset `prompt + completion`;
- scoring: the batch's texts tokenized (padding on the right, no special tokens added) and one forward pass
  without gradients; the reward is `logits[:, 0]`;
- its name in the logs (`rewards/<name>/mean`) the last part of the model's path.

`RewardModel` does exactly that as a trl-style reward function (`fn(prompts, completions) -> list[float]`), so
`credo.tasks.rewards` weights, logs and checks it like any other. Unlike TRL it reads only a local directory
(nothing is downloaded at run time) and never runs code the directory names (`trust_remote_code=False`);
torch-pickled weights (`*.bin`) load only if they cannot inflate (`credo.io.check_torch_archive`). The chat
template renders through `credo.tasks.chat.render_chats` (bounded in time and memory, as the policy's), the texts
are tokenized one per sandboxed call, each bounded in time (`credo.tasks.bounded_tokenizer`: a tokenizer's regexes
come from its directory), and the responses reach the model only as token ids, so no model output is parsed by
code. The model sits on the GPU when there is one (in the dtype it was saved in), else on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from credo.io import check_torch_archive
from credo.tasks.base import describe_error
from credo.tasks.bounded_tokenizer import BoundedTokenizer, is_panic
from credo.tasks.chat import render_chats


def reward_model_directory(path: str) -> Path:
    """The model directory `path` names; a ValueError in one line unless it holds a Hugging Face config that loads
    without running the directory's own code."""
    from transformers import AutoConfig

    directory = Path(path).expanduser()
    if not (directory / "config.json").is_file():
        raise ValueError(f"reward model {path!r}: not a Hugging Face model directory (no config.json there); "
                         "give a sequence-classification model saved with save_pretrained")
    try:
        AutoConfig.from_pretrained(directory, trust_remote_code=False)
    except Exception as error:  # transformers raises many kinds for a config it cannot read
        raise ValueError(f"reward model {path!r}: its config.json does not load: {describe_error(error)}") from None
    return directory


class RewardModel:
    """A sequence-classification model scoring responses as a trl-style reward function (see the module
    docstring): `RewardModel(path)(prompts, completions)` is one `logits[:, 0]` value per row."""

    def __init__(self, path: str) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        directory = reward_model_directory(path)
        for weights in sorted(directory.glob("*.bin")):
            check_torch_archive(weights)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                directory, num_labels=1, dtype="auto", trust_remote_code=False)
            tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
        except BaseException as error:  # a head of another size, missing files, a tokenizer's panic, ...
            if not isinstance(error, Exception) and not is_panic(error):
                raise
            raise ValueError(f"reward model {path!r} does not load as a sequence-classification model with one "
                             f"label: {describe_error(error)}") from None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.__name__ = directory.resolve().name
        """The name TRL logs it under: the last part of its path."""
        self.tokenize = BoundedTokenizer(tokenizer, f"the reward model {self.__name__}")
        """The tokenizer on the rows' texts, each in its own call bounded in time (`credo.tasks.bounded_tokenizer`)."""

    def texts(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[str]:
        """Each row's text as TRL builds it: the conversation rendered with the reward model's chat template when
        the prompts are message lists, else prompt + completion."""
        if prompts and isinstance(prompts[0], list):
            conversations = [[*prompt, *completion] for prompt, completion in zip(prompts, completions)]
            return render_chats(self.tokenizer, conversations, add_generation_prompt=False)
        return [prompt + completion for prompt, completion in zip(prompts, completions)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        """The model's scores; a row the tokenizer takes too long on or panics on (a hostile `tokenizer.json`'s regex)
        is a RuntimeError, so `rollout.reward_errors` treats it as any reward error (row by row, the others scored)."""
        inputs = self.tokenize(self.texts(prompts, completions)).to(self.model.device)
        with torch.inference_mode():
            return self.model(**inputs).logits[:, 0].float().tolist()
