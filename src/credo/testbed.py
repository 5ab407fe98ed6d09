"""The testbed model: a small Llama trained from scratch on noisy `arith` solution traces.

`build_testbed(config)` trains a `LlamaForCausalLM` (about 0.6M parameters, a character tokenizer of its
own with single tokens for `</thought>` and `\\boxed{`, and a chat template) by supervised learning on
solution traces from the noise model of `credo.tasks.arith` (systematic misconceptions plus rare random
slips), so that the starting policy solves short chains often and long chains rarely, and its errors sit at
steps RL can fix. The result is a standard Hugging Face model directory (`from_pretrained` loads it),
cached under `$CREDO_CACHE/testbed/<hash of the config>` and written atomically; building is
deterministic for a given config.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import string
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from credo.io import atomic_directory, cache_root
from credo.rollout.localise import TESTBED_PROMPT, TESTBED_STEP_FORMAT, localisation_prompt
from credo.tasks.arith import ArithConfig, ArithTask, noisy_solution
from credo.tasks.base import THOUGHT_END

USER, ASSISTANT, END, PAD, UNK = "<|user|>", "<|assistant|>", "<|end|>", "<pad>", "<unk>"
SPECIAL = [PAD, UNK, USER, ASSISTANT, END]
WORDS = ["</thought>", "\\boxed{"]
"""Multi-character symbols that are single tokens (kept when decoding)."""
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}" + USER + "{{ m['content'] }}" + END
    + "{% else %}" + ASSISTANT + "{{ m['content'] }}" + END + "{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)


class TestbedModel(BaseModel):
    """Architecture of the testbed Llama."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(3, ge=1)
    num_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(384, ge=8)
    max_positions: int = Field(96, ge=32)


class LocalisationJob(BaseModel):
    """SFT examples that teach the testbed model SRPO's self-localisation job: a failed chain in the
    compact localiser prompt (`credo.rollout.localise.TESTBED_PROMPT`) -> `\\boxed{k}`, the first wrong
    thought, right with probability `p_exact`, otherwise an earlier or a later thought in the proportions
    the SRPO paper measured for real models (exact 12%, earlier 38%, later 51%), so that the self-localiser
    is as fallible as a real one and the oracle stays the upper bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    share: float = Field(0.0625, ge=0.0, lt=1.0)
    """Share of SFT examples that are localisation examples (0 disables the job)."""
    p_exact: float = Field(0.12, ge=0.0, le=1.0)
    p_earlier: float = Field(0.38, ge=0.0, le=1.0)
    """Probability of an earlier thought (the rest, `1 - p_exact - p_earlier`, is a later one)."""


class TestbedConfig(BaseModel):
    """Everything that determines the testbed model (its hash names the cache entry)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: ArithConfig = ArithConfig(min_steps=1, max_steps=6)
    """Chains and noise of the SFT traces (chain lengths here are the SFT distribution)."""
    model: TestbedModel = TestbedModel()
    localisation: LocalisationJob = LocalisationJob()
    steps: int = Field(850, ge=1)
    """SFT optimiser steps."""
    batch_size: int = Field(128, ge=1)
    micro_batches: int = Field(4, ge=1)
    """Each batch is sorted by length and cut into this many micro-batches (less padding, same gradient)."""
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    seed: int = 0

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


def build_tokenizer():
    """A character-level fast tokenizer with the testbed's special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS + chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, eos_token=END,
        additional_special_tokens=[USER, ASSISTANT],
    )
    tokenizer.add_tokens(WORDS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def new_model(config: TestbedModel, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        attn_implementation="eager",  # on CPU, 3x faster than sdpa for these short padded batches
    )
    return LlamaForCausalLM(llama)


def sft_examples(config: TestbedConfig, task: ArithTask, tokenizer, rng: random.Random,
                 size: int) -> list[tuple[list[int], list[int]]]:
    """`size` SFT examples as (prompt ids, response ids + end token): noisy solution traces of chain
    lengths drawn per example, and a `localisation.share` of localisation examples.

    Every batch mixes all chain lengths: batches of one length each (cheaper to pad) trained far worse
    (greedy 4% vs 30% on 2-step chains after 400 steps), so lengths are mixed and `micro_batches` (below)
    cut the padding instead.
    """
    prompt_texts, responses = [], []
    for _ in range(size):
        chain = task.random_chain(rng, rng.randint(task.config.min_steps, task.config.max_steps))
        if rng.random() < config.localisation.share:
            prompt, answer = localisation_example(config.localisation, task, chain, rng)
        else:
            prompt, answer = chain.prompt, noisy_solution(chain, task.config.noise, rng)[0]
        prompt_texts.append(chat_prompt(tokenizer, prompt))
        responses.append(answer + END)
    prompts = tokenizer(prompt_texts, add_special_tokens=False)["input_ids"]
    answers = tokenizer(responses, add_special_tokens=False)["input_ids"]
    return list(zip(prompts, answers))


def localisation_example(job: LocalisationJob, task: ArithTask, chain, rng: random.Random) -> tuple[str, str]:
    """A failed noisy trace of `chain` in the localiser prompt, and the (noisy) boxed first wrong thought."""
    while True:
        trace, _ = noisy_solution(chain, task.config.noise, rng)
        wrong, _ = task.first_wrong_step(chain, trace)
        if wrong is not None and not task.verify(task.problem(chain), trace).correct:
            break
    thoughts = [t + THOUGHT_END for t in trace.split(THOUGHT_END)[:-1]] + [trace.split(THOUGHT_END)[-1]]
    n, k = len(thoughts), wrong + 1
    draw = rng.random()
    if draw >= job.p_exact and draw < job.p_exact + job.p_earlier and k > 1:
        k = rng.randint(1, k - 1)
    elif draw >= job.p_exact + job.p_earlier and k < n:
        k = rng.randint(k + 1, n)
    prompt = localisation_prompt(chain.prompt, thoughts, TESTBED_PROMPT, TESTBED_STEP_FORMAT)
    return prompt, f"\\boxed{{{k}}}"


def micro_batches(examples: list[tuple[list[int], list[int]]], parts: int, pad: int) -> list[dict[str, torch.Tensor]]:
    """The examples sorted by length and cut into `parts` right-padded micro-batches, each padded only to
    its own longest sequence; labels (-100 elsewhere) on the response tokens."""
    ordered = sorted(examples, key=lambda e: len(e[0]) + len(e[1]))
    size = -(-len(ordered) // parts)
    out = []
    for start in range(0, len(ordered), size):
        chunk = ordered[start : start + size]
        width = max(len(p) + len(a) for p, a in chunk)
        ids = torch.full((len(chunk), width), pad)
        labels = torch.full((len(chunk), width), -100)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, (p, a) in enumerate(chunk):
            n = len(p) + len(a)
            ids[row, :n] = torch.tensor(p + a)
            labels[row, len(p) : n] = torch.tensor(a)
            mask[row, :n] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def sft_step(model, batches: list[dict[str, torch.Tensor]]) -> float:
    """Accumulate the gradient of the mean cross-entropy over all response tokens of the micro-batches."""
    total = sum(int((b["labels"] != -100).sum()) for b in batches)
    value = 0.0
    for b in batches:
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), b["labels"][:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
        ) / total
        loss.backward()
        value += loss.item()
    return value


def chat_prompt(tokenizer, user_message: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True
    )


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up over `warmup` steps, then cosine decay to 0 at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def testbed_dir(config: TestbedConfig) -> Path:
    return cache_root() / "testbed" / config.digest()


def build_testbed(
    config: TestbedConfig | None = None, *, force: bool = False, log: Callable[[str], None] = print
) -> Path:
    """Train the testbed model (or find it in the cache) and return its model directory."""
    config = config or TestbedConfig()
    target = testbed_dir(config)
    if (target / "config.json").exists() and not force:
        return target
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is the same whether we build or not
        _train_testbed(config, target, log)
    return target


def _train_testbed(config: TestbedConfig, target: Path, log: Callable[[str], None]) -> None:
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    tokenizer = build_tokenizer()
    model = new_model(config.model, tokenizer)
    task = ArithTask(config.task)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, config.steps, config.warmup_steps)
    )
    params = sum(p.numel() for p in model.parameters())
    log(f"building the testbed model ({params / 1e6:.2f}M parameters, {config.steps} SFT steps) -> {target}")
    start = time.perf_counter()
    model.train()
    for step in range(config.steps):
        examples = sft_examples(config, task, tokenizer, rng, config.batch_size)
        loss = sft_step(model, micro_batches(examples, config.micro_batches, tokenizer.pad_token_id))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % 100 == 0 or step + 1 == config.steps:
            elapsed = time.perf_counter() - start
            log(f"  sft step {step + 1}/{config.steps}  loss {loss:.4f}  {elapsed:.0f}s")
    model.eval()
    with atomic_directory(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "testbed.json").write_text(
            json.dumps({"config": config.model_dump(), "sft_seconds": time.perf_counter() - start}, indent=2)
        )
