"""Chat-format prompts: a conversation (system turn, user turns, ...) where a prompt is usually one user message.

A `ChatPrompt` is a string, the text of its last user message, so everything that treats a problem's prompt as
text (revision and localisation prompts quote it, logs show it) keeps working; its `messages` hold the whole
conversation, which `credo.rollout.generate.encode_prompts` renders with the model's chat template. A chat
template without a system role gets the system message folded into the first user message (its content, a
blank line, then the user's): `system_role(tokenizer)` tells which. The testbed's template has none (it renders
every role but "user" as an assistant turn), so there a system prompt is folded; SmolLM2's and Qwen's have one.
Without a chat template at all, a chat prompt is its messages' contents joined by blank lines. Every template
renders through `render_chats`, bounded in size, time and memory.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from credo.tasks.base import short_repr
from credo.tasks.sandbox import Limits, Sandbox

SYSTEM_PROBE = "credo-system-probe-7c1e"
"""A system message's content that no template writes by itself (`system_role`)."""


class ChatPrompt(str):
    """A prompt given as chat messages; as a string, the content of its last user message."""

    messages: tuple[dict[str, str], ...]

    def __new__(cls, messages: Sequence[Mapping[str, Any]]) -> ChatPrompt:
        checked = tuple(check_messages(messages))
        users = [m["content"] for m in checked if m["role"] == "user"]
        prompt = super().__new__(cls, users[-1])
        prompt.messages = checked
        return prompt

    def __reduce__(self) -> tuple[Any, ...]:
        return ChatPrompt, ([dict(m) for m in self.messages],)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChatPrompt):
            return self.messages == other.messages
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return f"ChatPrompt({list(self.messages)!r})"

    @property
    def plain(self) -> str:
        """The prompt for a tokenizer without a chat template: the messages' contents, blank-line separated."""
        return "\n\n".join(m["content"] for m in self.messages)


def check_messages(messages: Any) -> list[dict[str, str]]:
    """`messages` as a list of {"role", "content"} dicts of strings (other keys dropped), ending with a user
    message; a ValueError saying what is wrong otherwise."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"chat messages must be a non-empty list of {{role, content}}, got {short_repr(messages)}")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ValueError(f"chat message {i} must have string 'role' and 'content', got {short_repr(message)}")
        out.append({"role": message["role"], "content": message["content"]})
    if out[-1]["role"] != "user":
        raise ValueError(f"chat messages must end with a user message (the last is {out[-1]['role']!r})")
    return out


def with_system(prompt: str, system_prompt: str | None) -> str:
    """`prompt` with a system message first (a `ChatPrompt`), unless `system_prompt` is empty or the prompt
    already begins with a system message of its own (which wins)."""
    if not system_prompt:
        return prompt
    messages = list(prompt.messages) if isinstance(prompt, ChatPrompt) else [{"role": "user", "content": str(prompt)}]
    if messages[0]["role"] == "system":
        return prompt
    return ChatPrompt([{"role": "system", "content": system_prompt}, *messages])


def with_instruction(prompt: str, instruction: str | None) -> str:
    """`prompt` with `instruction` appended to its (last) user message after a blank line."""
    if not instruction:
        return prompt
    if not isinstance(prompt, ChatPrompt):
        return f"{prompt}\n\n{instruction}"
    messages = [dict(m) for m in prompt.messages]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last]["content"] = f"{messages[last]['content']}\n\n{instruction}"
    return ChatPrompt(messages)


MAX_TEMPLATE_CHARS = 65_536
"""The longest chat template credo renders (real ones are a few kilobytes)."""
RENDER_SECONDS = 10.0
"""The longest a chat template may take to render one call's conversations (`RENDER_BATCH` at most)."""
RENDER_MEMORY_MB = 1024
"""The address space of the worker that renders chat templates (its imports take about 200 MB)."""
RENDER_BATCH = 64
"""Conversations rendered per worker call (each call's reply is bounded in size)."""
TEMPLATES = Sandbox("chat-template", "chat_template_scorer", Limits(memory_mb=RENDER_MEMORY_MB, file_mb=1),
                    confined=False)
"""The worker that renders chat templates: a fresh child per call, `RLIMIT_AS`, the time bound (no namespaces:
a template is not model output, and Jinja's sandbox keeps it from files and imports)."""
SHIPPED_TEMPLATES: set[str] = set()
"""Chat templates that ship with credo (the testbed's, added by `credo.testbed`): credo's own code, rendered in
the trainer's process."""


def render_chats(tokenizer: Any, conversations: Sequence[Sequence[Mapping[str, str]]], *,
                 add_generation_prompt: bool) -> list[str]:
    """Each conversation as `tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=...)`
    renders it, bounded: a template longer than `MAX_TEMPLATE_CHARS`, or one that takes more than
    `RENDER_SECONDS` or `RENDER_MEMORY_MB` to render, is a ValueError saying so; an error the template raises
    ("System role not supported") is a ValueError carrying its message.

    A chat template is code from the model's directory. transformers renders it in Jinja's immutable sandbox
    (no imports, files or private attributes; `range` capped at 100,000 items), which still lets a loop of loops
    run for hours and one expression (`'x' * 2**31`) allocate gigabytes. So it renders in a worker of its own
    (`TEMPLATES`: `credo.tasks.sandbox`, unconfined but bounded, a fresh child per call of `RENDER_BATCH`
    conversations), with transformers' own renderer and the tokenizer's special tokens as its arguments, as
    `apply_chat_template` passes them. The worker starts once per process (about a second: it imports
    transformers' template module) and each call costs a fork. Templates credo ships (`SHIPPED_TEMPLATES`) and
    every template off Linux (no worker there) render in the trainer's process, where only the time is bounded
    (a SIGALRM timer, in the main thread)."""
    template = tokenizer.get_chat_template()
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"the tokenizer's chat template has {len(template):,} characters, more than the "
                         f"{MAX_TEMPLATE_CHARS:,} credo renders")
    conversations = [[dict(message) for message in conversation] for conversation in conversations]
    if template in SHIPPED_TEMPLATES or not sys.platform.startswith("linux"):
        return [render_in_process(tokenizer, conversation, add_generation_prompt) for conversation in conversations]
    batches = [conversations[i:i + RENDER_BATCH] for i in range(0, len(conversations), RENDER_BATCH)]
    special = dict(tokenizer.special_tokens_map)
    outcomes = TEMPLATES.call_many("render", [(template, batch, add_generation_prompt, special) for batch in batches],
                                   RENDER_SECONDS)
    texts: list[str] = []
    for batch, outcome in zip(batches, outcomes):
        if outcome.failed:
            raise ValueError(f"the tokenizer's chat template took more than {RENDER_SECONDS:g} s or "
                             f"{RENDER_MEMORY_MB} MB to render {len(batch)} prompt{'s' * (len(batch) != 1)}; credo "
                             "stops it there (check the template in the model's tokenizer_config.json or "
                             "chat_template.jinja)")
        if outcome.error is not None:
            raise ValueError(f"the tokenizer's chat template failed: {short_repr(outcome.error, 300)}")
        value = outcome.value
        if not (isinstance(value, list) and len(value) == len(batch) and all(isinstance(t, str) for t in value)):
            raise ValueError("the chat template's worker replied with something other than one text per prompt")
        texts.extend(value)
    return texts


def render_in_process(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """`apply_chat_template` in this process, stopped after `RENDER_SECONDS` by a SIGALRM timer where one can
    run (the main thread, no other timer running)."""

    def render() -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        return render()

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, RENDER_SECONDS)
    try:
        return render()
    except TimeoutError:
        raise ValueError(f"the tokenizer's chat template took more than {RENDER_SECONDS:g} s to render one prompt; "
                         "credo stops it there (check the template in the model's tokenizer_config.json)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def system_role(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template has a system role: it renders a system message without raising,
    keeps its content, and renders it differently from the same content as a user or an assistant turn."""

    def render(role: str) -> str:
        conversation = [{"role": role, "content": SYSTEM_PROBE}, {"role": "user", "content": "?"}]
        return render_chats(tokenizer, [conversation], add_generation_prompt=True)[0]

    try:
        system = render("system")
    except Exception:  # e.g. "System role not supported"
        return False
    if SYSTEM_PROBE not in system:
        return False
    for role in ("user", "assistant"):
        try:
            if render(role) == system:
                return False
        except Exception:  # a template that insists on alternating roles: it told them apart
            pass
    return True


def template_messages(prompt: str, system: bool) -> list[dict[str, str]]:
    """The messages to render for `prompt`: one user message for a plain string; a `ChatPrompt`'s messages,
    with a leading system message folded into the first user message when `system` is False."""
    if not isinstance(prompt, ChatPrompt):
        return [{"role": "user", "content": prompt}]
    messages = [dict(m) for m in prompt.messages]
    if not system and messages[0]["role"] == "system":
        head = messages.pop(0)["content"]
        first = next(i for i, m in enumerate(messages) if m["role"] == "user")
        messages[first]["content"] = f"{head}\n\n{messages[first]['content']}"
    return messages


def plain_text(prompt: str) -> str:
    """The text a tokenizer without a chat template encodes: the prompt, or a `ChatPrompt`'s `plain` form."""
    return prompt.plain if isinstance(prompt, ChatPrompt) else prompt
