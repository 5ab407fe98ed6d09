"""Chat templates rendered in a sandbox worker (see `credo.tasks.chat.render_chats`): bounded in memory and time.

A chat template is code from a model's directory. transformers renders it in Jinja's immutable sandbox, which
keeps it from imports, files and private attributes but not from a loop of loops or one huge string; in a worker
call it runs under the worker's `RLIMIT_AS` and the call's time bound, outside the trainer's process.
"""

from __future__ import annotations


def setup() -> None:
    """Import transformers' renderer once (no torch: its chat-template module imports only Jinja)."""
    from transformers.utils import chat_template_utils  # noqa: F401


def render(chat_template: str, conversations: list[list[dict]], add_generation_prompt: bool,
           template_kwargs: dict) -> list[str]:
    """Each conversation rendered as `tokenizer.apply_chat_template(..., tokenize=False)` renders it: the
    template's keyword arguments are the tokenizer's special tokens (`special_tokens_map`)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=conversations, tools=None, documents=None,
                                        chat_template=chat_template, return_assistant_tokens_mask=False,
                                        continue_final_message=False, add_generation_prompt=add_generation_prompt,
                                        **template_kwargs)
    return rendered
