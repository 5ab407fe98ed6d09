"""The testbed model: a small Llama trained from scratch on noisy `arith` solution traces.

`build_testbed(config)` trains a `LlamaForCausalLM` (about 0.65M parameters, a character tokenizer of its
own with single tokens for `</thought>` and `\\boxed{`, and a chat template) by supervised learning on
solution traces from the noise model of `credo.tasks.arith` (systematic misconceptions plus rare random
slips), so that the starting policy solves short chains often and long chains rarely, and its errors sit at
steps RL can fix. The result is a standard Hugging Face model directory (`from_pretrained` loads it),
cached under `$CREDO_CACHE/testbed/<hash of the config>` and written atomically; building is
deterministic for a given config and machine.

The agent testbed's model (`AgentJob`, configs/testbed/agent/) learns the calculator's episodes
(`credo.tasks.calculator`) instead: the policy's calls, checks, undos and answer, with the calculator's observations
between them as context it is never trained to write (their tokens carry no SFT label, as they carry no RL loss).

Shipped models. The models of the default config, of the hard, no-cancel and long-horizon regimes, of the headroom
study's regime (k100-n8-p06) and of the agent testbed ship with the
package (`credo/testbed_models/<hash>/`, listed with each file's SHA-256 in `manifest.json`): `build_testbed`
copies a shipped model into the cache after checking every file's hash, so a first run trains at once and every
machine starts from the same weights (an SFT on another CPU lands on other weights: float kernels differ).
`build_testbed(..., shipped=False)` (`credo testbed build`) trains from scratch.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import random
import shutil
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from pydantic import Field, model_validator

from credo.io import atomic_directory, cache_root, open_own_file
from credo.rollout.localise import TESTBED_PROMPT, TESTBED_STEP_FORMAT, localisation_prompt
from credo.rollout.revise import (
    TESTBED_REVISE_PROMPT,
    TESTBED_REVISE_REWRITE,
    TESTBED_WORKED_REVISE_REWRITE,
    revision_prompt,
)
from credo.schedules import warmup_cosine
from credo.schema import Section
from credo.tasks.arith import (
    ArithConfig,
    ArithTask,
    KeyedMisconceptions,
    first_wrong_value,
    noisy_value,
    noisy_values,
)
from credo.tasks.base import THOUGHT_END
from credo.tasks.calculator import CALL_WORDS, calculator_prompt, noisy_transcript
from credo.tasks.chat import SHIPPED_TEMPLATES

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
SHIPPED_TEMPLATES.add(CHAT_TEMPLATE)  # credo's own: rendered in the trainer's process (credo.tasks.chat)


TESTBED_FORMAT = 4
"""Version of what the config does not state (the tokenizer, the SFT formats); part of the cache key."""


class TestbedModel(Section):
    """Architecture of the testbed Llama."""

    hidden_size: int = Field(128, ge=8)
    """Width of the hidden states (and of the token embeddings, tied to the output layer)."""
    num_layers: int = Field(3, ge=1)
    """Decoder layers."""
    num_heads: int = Field(4, ge=1)
    """Attention heads per layer."""
    num_kv_heads: int | None = Field(None, ge=1)
    """Key/value heads per layer (grouped-query attention, as modern LLMs have; 1: multi-query); None: one per head.

    Decoding long responses on a CPU is bound by reading the key/value cache (the long regime's float32 cache is up to
    ~160 MB a step), which fewer key/value heads cut in proportion, the physics kept: a cheaper lab per run."""
    intermediate_size: int = Field(384, ge=8)
    """Width of each layer's MLP."""
    max_positions: int = Field(160, ge=32)
    """Longest sequence in tokens, prompt and response together (Llama's `max_position_embeddings`)."""
    attn_implementation: Literal["eager", "sdpa"] = "eager"
    """Attention kernel of the SFT (and the model's default): eager for short sequences, sdpa for long ones.

    On 2-core CPUs eager is 3x faster than sdpa for the short padded batches of 1-6-step compact chains, while for
    the long-horizon regime's worked chains (micro-batches of 380-480 tokens) sdpa's forward and backward took
    0.55-0.6x eager's time."""

    @model_validator(mode="after")
    def _grouped(self) -> TestbedModel:
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads = {self.num_kv_heads} must divide num_heads = {self.num_heads} (each key/value "
                             "head serves a group of query heads)")
        return self


class LocalisationJob(Section):
    """SFT examples that teach the testbed model SRPO's self-localisation job: a failed chain in the
    compact localiser prompt (`credo.rollout.localise.TESTBED_PROMPT`) -> `\\boxed{k}`, the first wrong
    thought, right with probability `p_exact`, otherwise an earlier or a later thought in the proportions
    the SRPO paper measured for real models (exact 12%, earlier 38%, later 51%, as rounded there; here the rest,
    `1 - p_exact - p_earlier` = 50%, is later), so that the self-localiser is as fallible as a real one and the
    oracle stays the upper bound."""

    share: float = Field(0.0625, ge=0.0, lt=1.0)
    """Share of SFT examples that are localisation examples (0 disables the job)."""
    p_exact: float = Field(0.12, ge=0.0, le=1.0)
    """Probability that an example's answer is the exact first wrong thought."""
    p_earlier: float = Field(0.38, ge=0.0, le=1.0)
    """Probability of an earlier thought (the rest, `1 - p_exact - p_earlier`, is a later one)."""


class RevisionJob(Section):
    """SFT examples that teach the testbed model IBPO's revision job: a failed chain and a sibling in the
    compact revision prompt (`credo.rollout.revise.TESTBED_REVISE_PROMPT`) -> a revised chain. The reviser
    keeps the attempt's steps before its first error; from there, with probability `p_use_reference`, it
    copies the reference's steps for as long as the reference is right, and computes every other step with
    the noise model. So a revision is likelier to succeed with a correct reference and when the attempt
    went wrong late (a near miss), and it is never certain: as for real revisers."""

    share: float = Field(0.0625, ge=0.0, lt=1.0)
    """Share of SFT examples that are revision examples (0 disables the job)."""
    p_correct_reference: float = Field(0.5, ge=0.0, le=1.0)
    """Probability that an example's reference is the correct solution (else a noisy trace)."""
    p_use_reference: float = Field(1.0, ge=0.0, le=1.0)
    """Probability that the reviser copies the reference's right steps (else it computes them)."""


class AgentJob(Section):
    """SFT examples of the calculator's episodes (`credo.tasks.calculator`): a noisy solver's transcript
    (`noisy_transcript`: a call per step, written from the value the calculator last returned and misread where the
    noise model errs; after a call a check with probability `p_check`, and after a check that says "no" an undo
    with probability `p_undo` and the call again; then the answer), with the calculator's observations between the
    turns as context that carries no label. A model with this job gets the calculator's markers (`CALL_WORDS`) as
    single tokens, so that a call and its observation cost a few tokens each."""

    share: float = Field(0.0, ge=0.0, le=1.0)
    """Share of SFT examples that are calculator episodes (0 disables the job; 1: nothing else)."""
    p_check: float = Field(0.3, ge=0.0, le=1.0)
    """Probability of a check after each call."""
    p_undo: float = Field(0.7, ge=0.0, le=1.0)
    """Probability of an undo (and the call again) after a check that says "no"."""
    max_turns: int = Field(24, ge=2)
    """The transcripts' turn limit (the answer always fits: the solver answers when one turn is left)."""


class SFTExample(NamedTuple):
    """One SFT example as token ids: the chat prompt, the response (ending with the end token), and which response
    tokens are trained (False on a calculator's observations: context the model reads but never writes)."""

    prompt: list[int]
    response: list[int]
    trained: list[bool]


class TestbedConfig(Section):
    """Everything that determines the testbed model (its hash names the cache entry)."""

    task: ArithConfig = ArithConfig(min_steps=1, max_steps=6)
    """Chains and noise of the SFT traces (chain lengths here are the SFT distribution)."""
    model: TestbedModel = TestbedModel()
    """Architecture of the testbed Llama."""
    localisation: LocalisationJob = LocalisationJob()
    """SFT examples of SRPO's self-localisation job."""
    revision: RevisionJob = RevisionJob()
    """SFT examples of IBPO's revision job."""
    agent: AgentJob = AgentJob()
    """SFT examples of the calculator's episodes (the agent testbed)."""
    steps: int = Field(850, ge=1)
    """SFT optimiser steps."""
    batch_size: int = Field(128, ge=1)
    """SFT examples per optimiser step (freshly drawn for every step)."""
    micro_batches: int = Field(4, ge=1)
    """Each batch is sorted by length and cut into this many micro-batches (less padding, same gradient)."""
    lr: float = Field(3e-3, gt=0)
    """AdamW's peak learning rate of the SFT (linear warm-up, then cosine decay to 0 at `steps`)."""
    warmup_steps: int = Field(50, ge=0)
    """SFT steps of linear learning-rate warm-up."""
    seed: int = 0
    """Seed of the model's initial weights and of the SFT examples."""

    def digest(self) -> str:
        """The config's hash (12 hex digits), over its JSON with the options of `ADDED_LATER` left out where they
        hold their default (so models built and shipped before those options existed keep their names)."""
        exclude: dict = {}
        for section, options in ADDED_LATER.items():
            for dotted, default in options.items():
                *parents, key = [*([section] if section else []), *dotted.split(".")]
                owner = functools.reduce(getattr, parents, self)
                if getattr(owner, key) == default:
                    functools.reduce(lambda level, name: level.setdefault(name, {}), parents, exclude)[key] = True
        return hashlib.sha256(f"{TESTBED_FORMAT}:{self.model_dump_json(exclude=exclude)}".encode()).hexdigest()[:12]


ADDED_LATER: dict[str, dict[str, object]] = {
    "task": {"max_misconception_steps": None, "invertible_steps": False, "worked": False, "p_check": 0.0,
             "decision_rate": None, "noise.keyed": KeyedMisconceptions(), "eval_split": "test"},
    "model": {"attn_implementation": "eager", "num_kv_heads": None},
    "": {"agent": AgentJob()},
}
"""Options added to the config after `TESTBED_FORMAT` was set, with their defaults: at the default, an option is
the SFT that existed before it, so `digest` leaves it out. A new option of the SFT's config belongs here (with
its default; a nested option by its dotted path, `noise.keyed`; a whole section under ""), or else every
model's cache name and shipped folder changes; `tests/test_shipped_testbed.py` pins the shipped names."""


def build_tokenizer(extra_words: tuple[str, ...] = ()):
    """A character-level fast tokenizer with the testbed's special tokens and chat template; `extra_words` are
    further single tokens, after every other (the agent testbed's calculator markers), so that the ids of the rest
    are those of every testbed model."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # "\n" separates prompt parts
    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS + chars + list(extra_words))}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, eos_token=END,
        additional_special_tokens=[USER, ASSISTANT],
    )
    tokenizer.add_tokens(WORDS + list(extra_words))
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def new_model(config: TestbedModel, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads or config.num_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        attn_implementation=config.attn_implementation,
    )
    return LlamaForCausalLM(llama)


def sft_tokenizer(config: TestbedConfig):
    """The tokenizer of the model `config` builds: `build_tokenizer`'s, with the calculator's markers where the
    SFT has calculator episodes."""
    return build_tokenizer(CALL_WORDS if config.agent.share > 0 else ())


def sft_examples(config: TestbedConfig, task: ArithTask, tokenizer, rng: random.Random,
                 size: int) -> list[SFTExample]:
    """`size` SFT examples: noisy solution traces of chain lengths drawn per example, a `localisation.share` of
    localisation examples, a `revision.share` of revision examples and an `agent.share` of calculator episodes
    (`agent_example`).

    Every batch mixes all chain lengths: batches of one length each (cheaper to pad) trained far worse
    (greedy 4% vs 30% on 2-step chains after 400 steps), so lengths are mixed and `sft_batches` (below)
    cuts the padding instead.
    """
    prompt_texts, responses = [], []
    jobs = config.localisation.share, config.localisation.share + config.revision.share
    for _ in range(size):
        chain = task.random_chain(rng, rng.randint(task.config.min_steps, task.config.max_steps))
        job = rng.random()
        if job < jobs[0]:
            prompt, answer = localisation_example(config.localisation, task, failable(task, chain, rng), rng)
        elif job < jobs[1]:
            prompt, answer = revision_example(config.revision, task, failable(task, chain, rng), rng)
        elif job < jobs[1] + config.agent.share:
            prompt, answer = agent_example(config.agent, task, chain, rng)
        else:
            prompt, answer = chain.prompt, [task.write(chain, noisy_values(chain, task.config.noise, rng), rng)]
        prompt_texts.append(chat_prompt(tokenizer, prompt))
        responses.append(answer if isinstance(answer, list) else [answer])
    prompts = tokenizer(prompt_texts, add_special_tokens=False)["input_ids"]
    return [SFTExample(prompt, *_response_ids(tokenizer, pieces)) for prompt, pieces in zip(prompts, responses)]


def _response_ids(tokenizer, pieces: list[str]) -> tuple[list[int], list[bool]]:
    """A response's token ids from its pieces, tokenised one by one as the episode sampler appends them (the
    policy's turns at even positions, trained; observations at odd ones, not), and the end token."""
    ids, trained = [], []
    for i, piece in enumerate(tokenizer(pieces + [END], add_special_tokens=False)["input_ids"]):
        ids += piece
        trained += [i % 2 == 0 or i == len(pieces)] * len(piece)
    return ids, trained


def agent_example(job: AgentJob, task: ArithTask, chain, rng: random.Random) -> tuple[str, list[str]]:
    """The calculator prompt of `chain` and a noisy solver's episode of it (`noisy_transcript`) as alternating
    pieces: turn, observation, turn, ..., the answer."""
    turns, observations = noisy_transcript(task.problem(chain), task.config.noise, rng, p_check=job.p_check,
                                           p_undo=job.p_undo, max_turns=job.max_turns)
    pieces = [piece for pair in zip(turns, observations) for piece in pair][:-1]  # the answer has no observation
    return calculator_prompt(chain.prompt), pieces


def localisation_example(job: LocalisationJob, task: ArithTask, chain, rng: random.Random) -> tuple[str, str]:
    """A failed noisy trace of `chain` in the localiser prompt, and the (noisy) boxed first wrong thought."""
    values, wrong = failed_values(task, chain, rng)
    text = task.write(chain, values, rng)
    thoughts = [t + THOUGHT_END for t in text.split(THOUGHT_END)[:-1]] + [text.split(THOUGHT_END)[-1]]
    n, k = len(thoughts), wrong + 1
    draw = rng.random()
    if draw >= job.p_exact and draw < job.p_exact + job.p_earlier and k > 1:
        k = rng.randint(1, k - 1)
    elif draw >= job.p_exact + job.p_earlier and k < n:
        k = rng.randint(k + 1, n)
    prompt = localisation_prompt(chain.prompt, thoughts, TESTBED_PROMPT, TESTBED_STEP_FORMAT)
    return prompt, f"\\boxed{{{k}}}"


def failable(task: ArithTask, chain, rng: random.Random):
    """`chain` if the noise model can make it fail, else the first chain drawn after it that it can: without random
    slips (`p_slip` 0) a chain without a misconception step is always solved, and `failed_values` would never return.
    (With slips every chain can fail and nothing is drawn, so the SFT streams of models built before are unchanged.)"""
    noise = task.config.noise
    if noise.p_slip == 0 and noise.p_misc == 0:
        raise ValueError("the SFT's localisation and revision jobs need failed traces, but noise.p_misc and "
                         "noise.p_slip are both 0: no trace can fail (set localisation.share and revision.share to 0)")
    while noise.p_slip == 0 and chain.misconception_steps(noise) == 0:
        chain = task.random_chain(rng, rng.randint(task.config.min_steps, task.config.max_steps))
    return chain


def failed_values(task: ArithTask, chain, rng: random.Random) -> tuple[list[int], int]:
    """A noisy trace's values that end in a wrong answer, and its first wrong step."""
    while True:
        values = noisy_values(chain, task.config.noise, rng)
        wrong = first_wrong_value(chain, values)
        if wrong is not None and values[-1] != chain.values()[-1]:
            return values, wrong


def revision_example(job: RevisionJob, task: ArithTask, chain, rng: random.Random) -> tuple[str, str]:
    """A failed noisy trace and a reference in the revision prompt, and the revised trace (see `RevisionJob`)."""
    noise = task.config.noise
    attempt, wrong = failed_values(task, chain, rng)
    reference = chain.values() if rng.random() < job.p_correct_reference else noisy_values(chain, noise, rng)
    reference_wrong = first_wrong_value(chain, reference)
    copy_until = len(chain.steps) if reference_wrong is None else reference_wrong
    if rng.random() >= job.p_use_reference:
        copy_until = 0
    revised = attempt[:wrong]
    written = revised[-1] if revised else chain.start
    for i in range(wrong, len(chain.steps)):
        op, b = chain.steps[i]
        written = reference[i] if i < copy_until else noisy_value(op, written, b, noise, rng)
        revised.append(written)
    rewrite = TESTBED_WORKED_REVISE_REWRITE if task.config.worked else TESTBED_REVISE_REWRITE
    prompt = revision_prompt(chain.prompt, task.write(chain, attempt, rng), task.write(chain, reference, rng),
                             TESTBED_REVISE_PROMPT, [rewrite])
    return prompt, task.write(chain, revised, rng)


def sft_batches(examples: list[SFTExample], parts: int, pad: int) -> list[dict[str, torch.Tensor]]:
    """The SFT examples sorted by length and cut into at most `parts` right-padded micro-batches with the fewest
    padded tokens in all (`least_padding_cuts`), each padded only to its own longest sequence; labels
    (-100 elsewhere) on the trained response tokens."""
    ordered = sorted(examples, key=lambda e: len(e.prompt) + len(e.response))
    bounds = least_padding_cuts([len(e.prompt) + len(e.response) for e in ordered], parts)
    out = []
    for start, stop in zip([0] + bounds[:-1], bounds):
        chunk = ordered[start:stop]
        width = max(len(e.prompt) + len(e.response) for e in chunk)
        ids = torch.full((len(chunk), width), pad)
        labels = torch.full((len(chunk), width), -100)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, (p, a, trained) in enumerate(chunk):
            n = len(p) + len(a)
            ids[row, :n] = torch.tensor(p + a)
            labels[row, len(p) : n] = torch.where(torch.tensor(trained), torch.tensor(a), -100)
            mask[row, :n] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def least_padding_cuts(lengths: list[int], parts: int) -> list[int]:
    """End positions of at most `parts` contiguous chunks of the ascending `lengths` that minimise the padded
    area `sum(len(chunk) * max(chunk))`: a dynamic programme over cut points, `cost[k, i] = min_j
    cost[k-1, j] + (i - j) * lengths[i-1]`. (The long revision and localisation examples then get a
    micro-batch of their own instead of widening one of the chains: 30% less SFT time than equal cuts.)

    >>> least_padding_cuts([1, 1, 1, 9], 2), least_padding_cuts([2, 2, 2], 2)
    ([3, 4], [3])
    """
    n = len(lengths)
    if n == 0:
        return []
    widths = torch.tensor(lengths, dtype=torch.float64)
    i = torch.arange(n + 1, dtype=torch.float64)
    chunk = (i.unsqueeze(0) - i.unsqueeze(1)) * torch.cat([widths.new_zeros(1), widths]).unsqueeze(0)  # [j, i]
    chunk = torch.where(i.unsqueeze(1) < i.unsqueeze(0), chunk, torch.inf)
    best = torch.full((n + 1,), torch.inf, dtype=torch.float64)
    best[0] = 0.0
    choices = []
    for _ in range(min(parts, n)):
        total = best.unsqueeze(1) + chunk
        best, start = total.min(dim=0)
        best[0] = 0.0
        choices.append(start)
    bounds, end = [], n
    for start in reversed(choices):
        if end == 0:
            break
        bounds.append(end)
        end = int(start[end])
    return sorted(bounds)


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


SHIPPED = Path(__file__).parent / "testbed_models"
"""The testbed models that ship with the package, one folder per config hash, and their `manifest.json`."""


def testbed_dir(config: TestbedConfig) -> Path:
    return cache_root() / "testbed" / config.digest()


def shipped_testbed(config: TestbedConfig) -> Path | None:
    """The shipped model folder of `config`, if one ships and every file matches its SHA-256 in the manifest;
    None if none ships. A file that fails its check is a `ValueError` naming it (a damaged install)."""
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    files = manifest.get(config.digest())
    if files is None:
        return None
    folder = SHIPPED / config.digest()
    for name, expected in files.items():
        path = folder / name
        actual = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"
        if actual != expected:
            raise ValueError(f"shipped testbed model {path} fails its SHA-256 check ({actual[:12]}, expected "
                             f"{expected[:12]}): reinstall credo, or build it with `credo testbed build`")
    return folder


def build_testbed(
    config: TestbedConfig | None = None, *, force: bool = False, shipped: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """The testbed model's directory: the cached one; else the shipped one, verified and copied into the cache
    (`shipped=True`); else trained by SFT. `force` ignores the cache (and with `shipped=False`, the shipped
    model: a build from scratch). Processes that need the same model at once (a study's parallel runs) build it
    once: each waits for the `flock` on `<digest>.lock` beside the cached model, and a waiter finds it built."""
    config = config or TestbedConfig()
    target = testbed_dir(config)
    if (target / "config.json").exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = open_own_file(target.parent / f"{config.digest()}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the process ends, killed or not
        if (target / "config.json").exists() and not force:
            return target
        return _build_testbed_locked(config, target, shipped, log)
    finally:
        os.close(fd)


def _build_testbed_locked(config: TestbedConfig, target: Path, shipped: bool, log: Callable[[str], None]) -> Path:
    source = shipped_testbed(config) if shipped else None
    if source is not None:
        with atomic_directory(target) as tmp:
            for path in source.iterdir():
                shutil.copyfile(path, tmp / path.name)
        log(f"testbed model {config.digest()}: the shipped weights (SHA-256 verified) -> {target}")
        return target
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is the same whether we build or not
        _train_testbed(config, target, log)
    return target


def _train_testbed(config: TestbedConfig, target: Path, log: Callable[[str], None]) -> None:
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    tokenizer = sft_tokenizer(config)
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
        loss = sft_step(model, sft_batches(examples, config.micro_batches, tokenizer.pad_token_id))
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
