"""Run configuration: YAML files, `key.path=value` overrides, validation messages, dump round trips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from credo.config import ConfigError, RunConfig, check_resume, dump, load_config
from credo.methods import get_method

YAML = """\
method: p_trace
loss:
  decay: 0.9
rollout:
  group_size: 4
  temperature: 0.7
  stop: ["\\n\\n"]
optim:
  lr: 0.0001
  schedule: cosine
  betas: [0.8, 0.95]
task:
  name: arith
  max_steps: 4
  noise:
    p_misc: 0.5
eval:
  samples: 2
  ks: [1, 2]
"""


def write(tmp_path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def config_error(overrides, path=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# ------------------------------------------------------------------------------------------ loading


def test_load_yaml_file(tmp_path):
    config = load_config(write(tmp_path, YAML))
    assert config.method == "p_trace"
    assert config.loss == {"decay": 0.9}
    assert (config.rollout.group_size, config.rollout.temperature, config.rollout.stop) == (4, 0.7, ["\n\n"])
    assert (config.optim.lr, config.optim.schedule, config.optim.betas) == (1e-4, "cosine", (0.8, 0.95))
    assert config.task == {"name": "arith", "max_steps": 4, "noise": {"p_misc": 0.5}}
    assert (config.eval.samples, config.eval.ks) == (2, [1, 2])
    # untouched sections keep their defaults
    assert config.train == RunConfig().train and config.rollout.prompts_per_step == 16
    assert get_method(config.method, loss=config.loss).loss.decay == 0.9


def test_defaults_without_a_file():
    config = load_config(None)
    assert config == RunConfig()
    assert (config.method, config.task, config.optim.lr, config.eval.ks) == ("grpo", {"name": "arith"}, 2e-5, [1, 4])


def test_overrides_parse_as_yaml(tmp_path):
    config = load_config(
        write(tmp_path, YAML),
        [
            "rollout.group_size=6",  # int
            "optim.lr=3e-4",  # YAML 1.1 reads "3e-4" as a string; the float field converts it
            "optim.weight_decay=0.01",  # float
            "rollout.dynamic_sampling=true",  # bool
            "eval.greedy=false",
            "eval.ks=[1, 2]",  # list
            "rollout.stop=[a, 'b c']",
            "optim.grad_clip=null",  # None
            "task.max_steps=5",  # a task option; the file's name stays
            "train.device=cpu",  # plain string
            "rollout.temperature = 0.5",  # spaces around the value
        ],
    )
    assert config.rollout.group_size == 6 and isinstance(config.rollout.group_size, int)
    assert config.optim.lr == 3e-4 and config.optim.weight_decay == 0.01
    assert config.rollout.dynamic_sampling is True and config.eval.greedy is False
    assert config.eval.ks == [1, 2] and config.rollout.stop == ["a", "b c"]
    assert config.optim.grad_clip is None
    assert config.task == {"name": "arith", "max_steps": 5, "noise": {"p_misc": 0.5}}
    assert config.train.device == "cpu" and config.rollout.temperature == 0.5
    # the file's other values survive
    assert (config.method, config.optim.schedule) == ("p_trace", "cosine")


def test_later_override_wins_and_new_sections_are_created():
    config = load_config(None, ["train.steps=5", "train.steps=7", "model.lora.r=4"])
    assert config.train.steps == 7
    assert config.model.lora is not None and (config.model.lora.r, config.model.lora.alpha) == (4, 32)


def test_task_name_defaults_to_arith():
    assert load_config(None, ["task.max_steps=4"]).task == {"name": "arith", "max_steps": 4}
    assert load_config(None, ["task.name=arith"]).task == {"name": "arith"}


def test_override_syntax_errors(tmp_path):
    assert "override 'optim.lr' must look like key.path=value" in config_error(["optim.lr"])
    path = write(tmp_path, "optim:\n  lr: 0.1\n")
    assert "override 'optim.lr.x=1': 'lr' is not a section" in config_error(["optim.lr.x=1"], path)
    for empty_key in ("=1", "optim..lr=1", "optim.=1", " =1"):
        assert f"override {empty_key!r} must look like key.path=value" in config_error([empty_key])
    assert "override 'optim.lr=[1,': the value is not valid YAML" in config_error(["optim.lr=[1,"])
    assert load_config(None, [" optim . lr = 0.01"]).optim.lr == 0.01  # spaces around the parts are dropped


# ------------------------------------------------------------------------------------------ unknown keys


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        ("optim.lrr=1", "optim.lrr", "lr, weight_decay, betas, grad_clip, warmup_steps, schedule, minibatches"),
        ("rollout.foo=1", "rollout.foo", "backend, vllm, prompts_per_step, group_size, max_new_tokens, temperature, top_p"),
        ("foo=1", "foo", "method, credit, loss, model, task, rollout, optim, train, eval"),
        ("model.foo=1", "model.foo", "path, testbed, dtype, autocast_bf16, tf32, attn_implementation, lora"),
        ("eval.sample=4", "eval.sample", "greedy, samples, final_samples, ks, temperature, top_p, final_temperatures"),
        ("train.stpes=4", "train.stpes", "steps, seed, device, eval_every"),
    ],
)
def test_unknown_key_names_dotted_key_and_allowed_keys(tmp_path, override, key, allowed):
    path = write(tmp_path, "method: grpo\n")
    message = config_error([override], path)
    assert message.startswith(f"invalid config {path}:")
    assert re.search(rf"^  {re.escape(key)}: unknown key; allowed here: {re.escape(allowed)}", message, re.M), message


def test_unknown_key_in_optional_section_lists_allowed_keys():
    message = config_error(["model.lora.rr=3"])
    assert "model.lora.rr: unknown key; allowed here: r, alpha, dropout, target_modules" in message


# ------------------------------------------------------------------------------------------ bad values


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("rollout.group_size=1", "rollout.group_size: Input should be greater than or equal to 2"),
        ("optim.lr=-1e-5", "optim.lr: Input should be greater than 0"),
        ("optim.lr=0", "optim.lr: Input should be greater than 0"),
        ("rollout.top_p=1.5", "rollout.top_p: Input should be less than or equal to 1"),
        ("optim.schedule=linear", "optim.schedule: Input should be 'constant' or 'cosine'"),
        ("train.steps=abc", "train.steps: Input should be a valid integer, unable to parse string as an integer"),
        ("optim=3", "optim: Input should be a valid dictionary or instance of OptimConfig"),
        ("task=3", "task: task must be a mapping with a `name` and the task's options"),
    ],
)
def test_bad_value_names_the_key(override, line):
    message = config_error([override])
    assert message.startswith("invalid config <defaults>:")
    assert f"  {line}" in message.splitlines(), message


def test_several_errors_are_all_listed():
    lines = config_error(["rollout.group_size=1", "rollout.top_p=2"]).splitlines()
    assert lines[1:] == [
        "  rollout.group_size: Input should be greater than or equal to 2",
        "  rollout.top_p: Input should be less than or equal to 1",
    ]


def test_unknown_method_and_switches():
    message = config_error(["method=gpro"])
    assert "  method: unknown method 'gpro'; valid names: arpo, dapo, dr_grpo, fr3e, gigpo, grpo, grpo_lambda" in message
    message = config_error(["loss.lamb=0.9"])
    assert re.search(r"  loss: unknown switch\(es\) lamb of grpo's loss \(PPOClipLoss\); allowed: .*\bclip_high\b",
                     message), message
    message = config_error(["method=p_trace", "loss.lamb=0.9"])
    assert re.search(r"  loss: unknown switch\(es\) lamb of p_trace's loss \(TraceLoss\); allowed: .*\bdecay\b",
                     message), message
    message = config_error(["credit.bogus=1"])
    assert "  credit: unknown switch(es) bogus of grpo's credit (GroupAdvantage); allowed:" in message
    message = config_error(["method=s_trace", "credit.keep_frac=0"])  # a bad value, under its part's key
    assert "  credit: EntropySelection.keep_frac = 0 must lie in (0.0, 1.0]" in message


def test_unknown_task_and_task_options():
    assert "  task: unknown task 'arithm'; valid names: arith, calculator, jsonl, dataset, guessing, reasoning_gym:<dataset>" in config_error(["task.name=arithm"])
    message = config_error(["task.max_stepz=4"])
    assert re.search(r"task: max_stepz: unknown key; allowed here: reward, correct_at, name, min_steps, max_steps, .*noise", message), message
    assert "task: noise.p_misc: Input should be less than or equal to 1" in config_error(["task.noise.p_misc=2"])
    assert "task: min_steps = 5 exceeds max_steps = 3" in config_error(["task.min_steps=5", "task.max_steps=3"])
    assert "task: path: Field required" in config_error(["task.name=jsonl"])


def test_eval_ks_above_samples():
    assert "eval.ks [1, 8] needs eval.samples or eval.final_samples >= 8" in config_error(["eval.ks=[1, 8]"])
    assert "eval.ks [1, 4] needs eval.samples or eval.final_samples >= 4" in config_error(["eval.samples=2"])
    assert "needs eval.samples or eval.final_samples >= 16" in config_error(["eval.ks=[1, 16]", "eval.final_samples=8"])
    config = load_config(None, ["eval.samples=0", "eval.final_samples=16", "eval.ks=[1, 4, 16]"])  # k at the end only
    assert (config.eval.samples, config.eval.final_samples) == (0, 16)
    # greedy only: samples 0 works with ks up to 1
    config = load_config(None, ["eval.samples=0", "eval.ks=[1]"])
    assert (config.eval.samples, config.eval.ks) == (0, [1])


@pytest.mark.parametrize("ks", ["[0]", "[]"])
def test_eval_ks_must_be_positive(ks):
    assert re.search(r"eval\.ks.*(greater than 0|at least 1 item)", config_error([f"eval.ks={ks}"]))


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("optim.lr=.inf", "optim.lr: Input should be a finite number"),  # passed, then died in sampling
        ("optim.lr=.nan", "optim.lr: Input should be a finite number"),
        ("optim.lr=1e6", "optim.lr: Input should be less than 1"),  # destroyed the model and exited 0
        ("optim.betas=[0.9, 1.0]", "optim.betas.1: Input should be less than 1"),
        ("optim.betas=[.nan, 0.9]", "optim.betas.0: Input should be a finite number"),
        ("optim.weight_decay=.inf", "optim.weight_decay: Input should be a finite number"),
        ("optim.grad_clip=.inf", "optim.grad_clip: Input should be a finite number"),
        ("rollout.temperature=.inf", "rollout.temperature: Input should be a finite number"),
        ("rollout.top_p=0", "rollout.top_p: Input should be greater than 0"),
        ("eval.temperature=.nan", "eval.temperature: Input should be a finite number"),
        ("rollout.resets.localiser_temperature=.inf",
         "rollout.resets.localiser_temperature: Input should be a finite number"),
        ("train.max_grad_norm=.inf", "train.max_grad_norm: Input should be a finite number"),
        ("loss.clip_high=.inf", "loss: PPOClipLoss.clip_high = inf must be finite and lie in [0.0, inf)"),
        ("loss.clip_low=.nan", "loss: PPOClipLoss.clip_low = nan must be finite and lie in [0.0, 1.0)"),
        ("optim.warmup_steps=301", ("config: optim.warmup_steps = 301 exceeds the run's 300 optimiser steps "
                                    "(train.steps x optim.minibatches x optim.epochs)")),
    ],
)
def test_non_finite_and_out_of_range_hyperparameters_name_the_key(override, line):
    message = config_error(["optim.minibatches=3", override])
    assert f"  {line}" in message.splitlines(), message


@pytest.mark.parametrize("value", ["0", "-5"])
def test_token_checkpoints_need_a_positive_spacing(value):
    message = config_error([f"train.eval_every_tokens={value}"])
    assert "  train.eval_every_tokens: Input should be greater than or equal to 1" in message.splitlines(), message


def test_token_checkpoints_default_off_and_may_be_set_without_dividing_the_budget():
    assert load_config(None).train.eval_every_tokens is None
    config = load_config(None, ["train.eval_every_tokens=20000", "train.rollout_tokens=50000"])
    assert (config.train.eval_every_tokens, config.train.rollout_tokens) == (20000, 50000)


def test_warmup_may_fill_the_run():
    assert load_config(None, ["train.steps=10", "optim.epochs=2", "optim.warmup_steps=20"]).optim.warmup_steps == 20


def test_exponent_float_in_a_method_switch():
    config = load_config(None, ["loss.clip_high=1e-3"])
    assert get_method(config.method, loss=config.loss).loss.clip_high == pytest.approx(1e-3)


# ------------------------------------------------------------------------------------------ files


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=rf"^config file {re.escape(str(path))} does not exist$"):
        load_config(path)


def test_invalid_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "optim:\n  lr: [1, 2\n")
    with pytest.raises(ConfigError, match=rf"(?s)^{re.escape(path)} is not valid YAML: .*line 3"):
        load_config(path)


def test_invalid_yaml_is_one_line_at_its_position(tmp_path):
    path = write(tmp_path, "optim: {lr: 1e-5\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path} is not valid YAML: line 2, column 1: expected ',' or '}}', but got "
                               "'<stream end>' (while parsing a flow mapping)")


@pytest.mark.parametrize("text", ["method: grpo\nmethod: gspo\n", "optim:\n  lr: 1.0e-4\n  lr: 2.0e-4\n"])
def test_a_key_written_twice_is_an_error_naming_it(tmp_path, text):
    """PyYAML keeps the last of two equal keys without a word; a config refuses them."""
    path = write(tmp_path, text)
    key = text.split(":")[0] if text.startswith("method") else "lr"
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)} is not valid YAML: line [23], column \d+: the key "
                                          rf"'{key}' is written twice in one mapping$"):
        load_config(path)


def test_a_binary_file_or_a_directory_is_named(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(binary))} is not a UTF-8 text file \(byte 0: "):
        load_config(binary)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path))} is a directory, not a YAML config file$"):
        load_config(tmp_path)


@pytest.mark.parametrize("text", ["- optim\n- rollout\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: the top level must be a mapping of sections$"):
        load_config(path)


def test_empty_file_is_all_defaults(tmp_path):
    assert load_config(write(tmp_path, "# nothing\n")) == RunConfig()


def test_validation_error_names_the_file(tmp_path):
    path = write(tmp_path, "rollout:\n  group_size: 1\n")
    with pytest.raises(ConfigError, match=rf"^invalid config {re.escape(path)}:\n  rollout\.group_size: "):
        load_config(path)


# ------------------------------------------------------------------------------------------ dump


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["method=p_trace", "loss.decay=0.5", "model.lora.r=8", "model.lora.target_modules=[q_proj, v_proj]"],
        [
            "optim.betas=[0.8, 0.9]", "optim.grad_clip=null",
            "task.noise.misconceptions={carry: -11}", "eval.max_problems=3",
        ],
    ],
)
def test_dump_round_trips(tmp_path, overrides):
    config = load_config(write(tmp_path, YAML) if overrides else None, overrides)
    text = dump(config)
    assert text.startswith("method: ")  # field order kept (sort_keys=False)
    again = load_config(write(tmp_path, text, "dumped.yaml"))
    assert again == config
    assert dump(again) == text


def test_shipped_config_loads_and_round_trips(tmp_path):
    config = load_config("configs/testbed/grpo.yaml")
    assert (config.method, config.optim.lr, config.eval.max_problems) == ("grpo", 1e-4, 200)
    assert load_config(write(tmp_path, dump(config))) == config


# ------------------------------------------------------------------------------------------ base files


def test_base_files_merge_under_the_file(tmp_path):
    write(tmp_path, "method: s_trace\noptim: {lr: 1.0e-4, minibatches: 4}\ntask: {min_steps: 2, max_steps: 6}\n", "method.yaml")
    write(tmp_path, "task: {min_steps: 5}\ntrain: {steps: 7}\n", "regime.yaml")
    path = write(tmp_path, "base: [method.yaml, regime.yaml]\noptim: {lr: 3.0e-5}\n", "run.yaml")
    config = load_config(path, ["train.steps=9"])
    assert config.method == "s_trace"
    assert (config.optim.lr, config.optim.minibatches) == (3e-5, 4)  # the file over its bases, key by key
    assert (config.task["min_steps"], config.task["max_steps"]) == (5, 6)  # later bases over earlier ones
    assert config.train.steps == 9  # overrides over everything


def test_base_is_relative_to_the_file_and_may_nest(tmp_path):
    (tmp_path / "a").mkdir()
    write(tmp_path / "a", "method: dapo\n", "root.yaml")
    write(tmp_path / "a", "base: root.yaml\ntrain: {steps: 4}\n", "middle.yaml")
    config = load_config(write(tmp_path, "base: a/middle.yaml\n", "top.yaml"))
    assert (config.method, config.train.steps) == ("dapo", 4)


def test_base_errors_name_the_file(tmp_path):
    write(tmp_path, "base: two.yaml\n", "one.yaml")
    write(tmp_path, "base: one.yaml\n", "two.yaml")
    with pytest.raises(ConfigError, match="include each other in a cycle"):
        load_config(tmp_path / "one.yaml")
    with pytest.raises(ConfigError, match=r"three\.yaml: base missing\.yaml: config file .*missing\.yaml does not exist$"):
        load_config(write(tmp_path, "base: missing.yaml\n", "three.yaml"))
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"five\.yaml: base folder\.yaml: .*folder\.yaml is a directory, not a YAML "):
        load_config(write(tmp_path, "base: folder.yaml\n", "five.yaml"))
    with pytest.raises(ConfigError, match=r"four\.yaml: base must be a file name or a list of file names, got 3"):
        load_config(write(tmp_path, "base: 3\n", "four.yaml"))


HARD = sorted((Path(__file__).parents[1] / "configs" / "testbed" / "hard").glob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in HARD if not p.stem.startswith("regime")], ids=lambda p: p.stem)
def test_hard_configs_are_their_method_in_the_hard_regime(path):
    config = load_config(path)
    plain = load_config(path.parents[1] / path.name)
    assert config.method == plain.method and config.optim == plain.optim and config.loss == plain.loss
    assert config.rollout.resets == plain.rollout.resets and config.rollout.revisions == plain.rollout.revisions
    assert (config.task["min_steps"], config.task["max_steps"], config.task["min_misconception_steps"]) == (5, 6, 3)
    assert config.task["noise"]["misconceptions"] == {"carry": -10, "borrow": 10, "mul7": 10}
    assert config.model.testbed["task"]["noise"] == config.task["noise"]  # the model learned what the checker knows


def test_the_nocancel_regime_lays_over_a_hard_config(tmp_path):
    path = write(tmp_path, f"base: [{HARD[0].parent}/grpo.yaml, {HARD[0].parent}/regime_nocancel.yaml]\n")
    config = load_config(path)
    noise = {"misconceptions": {"carry": -10, "borrow": -10, "mul7": -10}, "offsets_may_cancel": False}
    assert config.task["noise"] == noise and config.model.testbed["task"]["noise"] == noise
    assert config.task["min_misconception_steps"] == 3


# ------------------------------------------------------------------------------------------ resuming


def test_resume_accepts_the_resumable_keys(tmp_path):
    recorded = tmp_path / "config.yaml"
    recorded.write_text(dump(load_config(None, ["train.steps=10"])))
    check_resume(recorded, load_config(recorded))  # unchanged
    check_resume(recorded, load_config(recorded, ["train.steps=20", "train.eval_every=5", "train.checkpoint_every=5",
                                                  "train.max_nan_steps=5", "optim.micro_batch_size=2"]))
    check_resume(tmp_path / "absent.yaml", load_config(None, ["optim.lr=1e-3"]))  # nothing recorded


def test_resume_refuses_what_shaped_the_trained_steps_naming_each_key(tmp_path):
    recorded = tmp_path / "config.yaml"
    recorded.write_text(dump(load_config(None)))
    with pytest.raises(ConfigError) as info:
        check_resume(recorded, load_config(recorded, ["optim.lr=5e-4", "method=dapo", "train.seed=1",
                                                      "model.lora={r: 4}", "train.steps=200"]))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("--resume cannot change method ('grpo' -> 'dapo': the method shaped the steps already trained); "
                              "model.lora (None -> {'r': 4, ")
    assert "optim.lr (2e-05 -> 0.0005: the checkpoint's optimiser and schedule state were built with it)" in message
    assert "train.seed (0 -> 1: the data order and random state follow the seed)" in message
    assert "train.steps (" not in message and "may change only train.steps, train.eval_every" in message


def test_resume_refuses_other_token_checkpoints(tmp_path):
    # the checkpoints already evaluated are multiples of the recorded spacing: a resumed run keeps it
    recorded = tmp_path / "config.yaml"
    recorded.write_text(dump(load_config(None, ["train.eval_every_tokens=1000"])))
    check_resume(recorded, load_config(recorded, ["train.rollout_tokens=5000"]))
    for change in ("train.eval_every_tokens=500", "train.eval_every_tokens=null"):
        with pytest.raises(ConfigError, match=r"train\.eval_every_tokens \(1000 -> (500|None): the token checkpoints"):
            check_resume(recorded, load_config(recorded, [change]))


def test_an_override_fills_a_section_that_a_dumped_config_left_null(tmp_path):
    # config.yaml of a run without LoRA holds `lora: null`; `--set model.lora.r=4` turns LoRA on there too.
    recorded = tmp_path / "config.yaml"
    recorded.write_text(dump(RunConfig()))
    assert "lora: null" in recorded.read_text()
    config = load_config(recorded, ["model.lora.r=4"])
    assert config.model.lora is not None and config.model.lora.r == 4


@pytest.mark.parametrize("override, credo_key", [
    ("num_generations=8", "rollout.group_size"), ("rollout.num_generations=8", "rollout.group_size"),
    ("beta=0.04", "loss.kl_beta"), ("optim.learning_rate=1e-5", "optim.lr"), ("max_completion_length=64",
    "rollout.max_new_tokens"), ("num_iterations=2", "optim.epochs"), ("save_steps=10", "train.checkpoint_every"),
])
def test_a_trl_key_is_answered_with_credos_spelling(override, credo_key):
    """A TRL GRPOConfig key, anywhere in a config, is a one-line error that names credo's key for it."""
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    line = str(error.value).splitlines()[-1]
    assert "TRL's GRPOConfig spelling" in line and line.endswith(f"credo's: {credo_key}")


def test_every_trl_key_hint_names_keys_credo_has():
    """Each dotted credo key a TRL hint names exists in the schema (a renamed credo key cannot leave a stale hint)."""
    import re
    import typing

    from credo.config import TRL_KEYS, RunConfig

    for hint in TRL_KEYS.values():
        for dotted in re.findall(r"\b(?:rollout|optim|train|model|loss|credit)\.[a-z0-9_]+(?:\.[a-z0-9_]+)*", hint):
            section, *rest = dotted.split(".")
            if section in ("loss", "credit"):  # the method's switches, validated against its classes
                continue
            model = RunConfig.model_fields[section].annotation
            for part in rest:
                model = next(m for m in (model, *typing.get_args(model)) if hasattr(m, "model_fields"))  # X | None
                assert part in model.model_fields, (hint, dotted)
                model = model.model_fields[part].annotation
