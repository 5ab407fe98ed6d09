"""The `credo` command line (typer + rich)."""

from __future__ import annotations

import errno
import functools
import json
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

try:  # typer 0.2x vendors its own click; before, it used click's
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from credo.extras import MissingExtra
from credo.io import printable
from credo.methods import METHODS

if TYPE_CHECKING:
    from credo.config import ModelConfig, RunConfig
    from credo.rollout.backend import GenerationBackend
    from credo.tasks import Problem, Task

class OneLineUsageErrors(TyperGroup):
    """The command group whose usage errors (a bad option value, an unknown command or option, a missing argument)
    are one line on stderr, as every other error of credo (`_fail`), with exit status 2, instead of click's boxed
    usage text."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError:  # a group given no command: its help, as typer prints it
            return super().main(args, prog_name, complete_var, standalone_mode=True, **extra)
        except ClickException as error:
            where = (f" (see {error.ctx.command_path} --help)"
                     if isinstance(error, UsageError) and error.ctx is not None else "")
            print_error(one_line(error.format_message()) + where)
            sys.exit(error.exit_code)
        except typer.Abort:
            errors.print("Aborted.")
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


app = typer.Typer(
    cls=OneLineUsageErrors,
    help="credo: credit assignment for RL with verifiable rewards on language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
testbed_app = typer.Typer(help="The built-in step-verifiable testbed model.", no_args_is_help=True)
app.add_typer(testbed_app, name="testbed")
console = Console(width=shutil.get_terminal_size((120, 24)).columns)
errors = Console(stderr=True, width=shutil.get_terminal_size((120, 24)).columns, soft_wrap=True)


_options_given = {"debug": False}
"""The global options of this invocation (set by `_options` before the command runs)."""


def _print_version(value: bool) -> None:
    """`credo --version`: the installed package's version, then exit."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("credo")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        number = "unknown (not installed)"
    typer.echo(f"credo {number}")
    raise typer.Exit()


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show an error's traceback instead of its one-line message."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print credo's version and exit."),
) -> None:
    """credo: credit assignment for RL with verifiable rewards on language models."""
    _options_given["debug"] = debug


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


USER_ERRORS = (ValueError, OSError, MissingExtra)
"""Errors whose message is the whole story (bad input, a missing or unwritable file, an optional package to
install): shown without their type. Anything else is shown with its type, as an internal error."""


MAX_ERROR = 2000
"""The most characters of an error message `_fail` shows (one that quotes a huge value is cut there)."""


def one_line(text: str) -> str:
    """A message of several lines in one: each line's whitespace collapsed, lines joined by "; " (by a space after
    a line that ends with ":", such as "invalid config x.yaml:")."""
    out = ""
    for line in (" ".join(line.split()) for line in text.splitlines()):
        if line:
            out += (" " if not out or out.endswith(":") else "; ") + line
    return out.strip()


OS_ERRORS = {
    errno.EEXIST: "a file stands where a directory is needed",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EISDIR: "a directory, where a file is needed",
    errno.ENAMETOOLONG: "a file name too long for the file system",
    errno.EACCES: "permission denied",
}
"""What an operating-system error with a path means for the user, in words (`os_error`)."""


def os_error(error: OSError) -> str:
    """An OSError that names a path, as `path: what it means (the system's words)`, the path cut to 200 characters;
    any other error's own message."""
    if error.filename is None or error.strerror is None:
        return str(error)
    path = str(error.filename)
    if len(path) > 200:
        path = f"{path[:200]}... ({len(path):,} characters)"
    meaning = OS_ERRORS.get(error.errno)
    return f"{path}: {meaning} ({error.strerror})" if meaning else f"{path}: {error.strerror}"


def print_error(message: str) -> None:
    """`error: message` on stderr, the message's markup escaped: the one form of every error credo's CLI reports."""
    errors.print(f"[bold red]error:[/bold red] {escape(message)}")


def _fail(error: Exception) -> None:
    """One line on stderr naming what went wrong (at most `MAX_ERROR` characters), markup escaped; exit status 2."""
    message = one_line(os_error(error) if isinstance(error, OSError) else str(error)) or type(error).__name__
    if len(message) > MAX_ERROR:
        message = f"{message[:MAX_ERROR]}... ({len(message) - MAX_ERROR:,} more characters cut)"
    if not isinstance(error, USER_ERRORS):
        message = f"{type(error).__name__}: {message} (run with --debug for the traceback)"
    print_error(message)
    raise typer.Exit(2)


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any exception of `command` into `_fail`'s one line, unless `credo --debug` asked for the traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:
            if _options_given["debug"]:
                raise
            _fail(error)

    return wrapper


BARE_OVERRIDES_HELP = "Overrides after the config, key.path=value each (e.g. optim.lr=5e-5), applied after --set ones."


def bare_overrides(config: Path | None, bare: list[str] | None,
                   what: str = "config file") -> tuple[Path | None, list[str]]:
    """The config file and the `key.path=value` overrides given as plain arguments after it (after `what`).

    A first argument holding `=` that names no existing file is an override (`credo train train.steps=10`,
    all defaults otherwise). Any other argument without `key=` is a `ConfigError` naming it.
    """
    bare = list(bare or [])
    if config is not None and "=" in str(config) and not config.exists():
        config, bare = None, [str(config), *bare]
    for argument in bare:
        key = argument.split("=", 1)[0].strip()
        if "=" not in argument or not key or "" in key.split("."):
            from credo.config import ConfigError

            raise ConfigError(f"unexpected argument {argument!r}: after the {what}, give overrides as "
                              f"key.path=value (e.g. optim.lr=5e-5) or --set key.path=value")
    return config, bare


@app.command()
@one_line_errors
def train(
    config: Path = typer.Argument(None, help="YAML run config (default: all defaults, GRPO on the testbed)."),
    output: Path = typer.Option(None, "--output", "-o", help="Run directory (default: runs/<method>, then -2, -3, ...)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a config key, e.g. --set optim.lr=1e-5."),
    resume: Path = typer.Option(None, "--resume", help="Continue the run in this directory from its last checkpoint "
                                "(its config.yaml's reward functions are imported, as training does)."),
    settings: Annotated[list[str] | None, typer.Argument(
        metavar="KEY=VALUE", help=BARE_OVERRIDES_HELP, show_default=False)] = None,
) -> None:
    """Train with RL: sample groups, verify, assign credit, update; evaluate at the start, every N steps and at the end.

    Overrides: `credo train CONFIG optim.lr=5e-5 train.steps=10` (or --set optim.lr=5e-5)."""
    from credo.config import ConfigError, load_config

    _quiet_transformers()
    try:
        config, bare = bare_overrides(config, settings)
        overrides = [*overrides, *bare]
        if resume is not None and (config is not None or output is not None):
            raise ConfigError(f"--resume {resume} continues that run with its own config.yaml and directory: give no "
                              "CONFIG or --output with it (change a key with KEY=VALUE or --set)")
        if resume is not None and not resume.is_dir():
            raise ConfigError(f"--resume {resume}: not a run directory")
        if output is not None and output.exists() and not output.is_dir():
            raise ConfigError(f"--output {output} is a file: give a directory for the run")
        if resume is not None:
            run_config = load_config(resume / "config.yaml", overrides)
            run_dir = resume
        else:
            run_config = load_config(config, overrides)
            run_dir = output or fresh_run_dir(Path("runs") / run_config.method)
    except (ConfigError, FileNotFoundError) as error:
        _fail(error)
    from credo.train import train as run_training

    console.print(f"[bold]credo train[/bold] method={run_config.method} task={run_config.task['name']} -> {run_dir}")
    try:
        summary = run_training(run_config, run_dir, resume=resume is not None)
    except (FileExistsError, FileNotFoundError, ValueError) as error:
        _fail(error)
    print_summary(summary, run_dir)


@app.command("config")
@one_line_errors
def show_config(
    config: Path = typer.Argument(
        None, help="YAML run config or a run directory (its config.yaml); default: all defaults."),
    overrides: list[str] = typer.Option([], "--set", help="Override a config key, e.g. --set optim.lr=1e-5."),
    load_rewards: bool = typer.Option(False, "--load-rewards", help="Also import the reward functions of "
                                      "task.reward, to check that they exist and take the right arguments."),
    settings: Annotated[list[str] | None, typer.Argument(
        metavar="KEY=VALUE", help=BARE_OVERRIDES_HELP, show_default=False)] = None,
) -> None:
    """Print the resolved, validated run config as YAML (`base` files merged, overrides applied, defaults filled
    in): the config.yaml `credo train` would record. Nothing loads or runs (reward functions are imported only
    with --load-rewards); a bad config is a one-line error."""
    from credo.config import dump, load_config

    config, bare = bare_overrides(config, settings)
    if config is not None and config.is_dir():
        if not (config / "config.yaml").is_file():
            raise ValueError(f"{config} is a directory without a config.yaml: give a YAML config file or a run "
                             "directory")
        config = config / "config.yaml"
    typer.echo(dump(load_config(config, [*overrides, *bare], load_rewards=load_rewards)), nl=False)


def fresh_run_dir(base: Path) -> Path:
    """`base`, or `base-2`, `base-3`, ... : the first that does not exist yet."""
    candidate, number = base, 1
    while candidate.exists():
        number += 1
        candidate = base.with_name(f"{base.name}-{number}")
    return candidate


def print_summary(summary: dict, run_dir: Path) -> None:
    console.print(eval_table(f"{summary['method']}: held-out accuracy, start -> end ({summary['steps']} steps, "
                             f"{summary['rollout_tokens']:,} rollout tokens, {summary['wall_s']:.0f} s)",
                             summary["eval_start"], summary["eval_end"]))
    console.print(f"learning curve: {run_dir / 'plots' / 'learning_curve.png'}   summary: {run_dir / 'summary.json'}")


def eval_table(title: str, *results: dict) -> Table:
    """Evaluations (`credo.evaluate.evaluate_policy`) as a table: a row per difficulty, then "all" (a task without
    buckets has that one alone), a column per metric, each cell the evaluations' values in turn (`start → end`),
    "–" where one lacks the metric (the final evaluation may take more samples: pass@16 only at the end)."""
    table = Table(title=title)
    table.add_column("difficulty")
    metrics = [k for k in dict.fromkeys(k for result in results for k in result) if k != "by_difficulty"]
    for key in metrics:
        table.add_column(key, justify="right")
    buckets = dict.fromkeys(d for result in results for d in result["by_difficulty"])
    rows = [(d, [result["by_difficulty"].get(d, {}) for result in results]) for d in buckets if d != "all"]

    def value(record: dict, key: str) -> str:
        return f"{record[key]:.3f}" if key in record else "–"

    for name, records in rows + [("all", list(results))]:
        table.add_row(name, *(" → ".join(value(record, k) for record in records) for k in metrics))
    return table


def evaluation_setup(run_config: RunConfig, model_config: ModelConfig) -> tuple[GenerationBackend, Task, list[Problem]]:
    """What an evaluation of the model `model_config` names needs: the model on `train.device`, served by
    `rollout.backend`; `run_config`'s task; its held-out problems (at most `eval.max_problems`)."""
    from credo.evaluate import eval_subset
    from credo.models import load_model, make_backend
    from credo.run_setup import pick_device
    from credo.tasks import build_task

    model, tokenizer = load_model(model_config, pick_device(run_config.train.device))
    backend = make_backend(run_config.rollout, model, tokenizer, model_config, seed=run_config.train.seed)
    task = build_task(run_config.task)
    return backend, task, eval_subset(task.eval_problems(), run_config.eval.max_problems)


EVAL_SECTIONS = ("eval", "task", "rollout")
"""The config sections `credo eval` reads (with `EVAL_KEYS`); an override of any other key would change nothing."""
EVAL_KEYS = ("train.seed", "train.device")


@app.command("eval")
@one_line_errors
def evaluate(
    target: Path = typer.Argument(..., help="A run directory (its final model) or a Hugging Face model directory."),
    overrides: list[str] = typer.Option([], "--set", help="Override eval/task keys, e.g. --set eval.samples=8."),
    load_rewards: bool = typer.Option(False, "--load-rewards", help="Import and call the reward functions the "
                                      "task names (task.reward): needed to evaluate a task with a custom reward."),
    settings: Annotated[list[str] | None, typer.Argument(
        metavar="KEY=VALUE", show_default=False,
        help="Overrides after the target, e.g. eval.samples=8, applied after --set ones.")] = None,
) -> None:
    """Evaluate a model on its task's held-out problems: greedy pass@1, pass@k, avg@k, per difficulty.

    A task with a custom reward (`task.reward`: user code) is evaluated only with --load-rewards."""
    from credo.config import ConfigError, load_config

    _quiet_transformers()
    overrides = [*overrides, *bare_overrides(None, settings, what="model")[1]]
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        if not (key.split(".")[0] in EVAL_SECTIONS or key in EVAL_KEYS):
            raise ConfigError(f"override {text!r}: credo eval does not read {key}; it reads "
                              f"{', '.join(f'{s}.*' for s in EVAL_SECTIONS)}, {' and '.join(EVAL_KEYS)}")
    is_run = (target / "config.yaml").exists()
    run_config = load_config(target / "config.yaml" if is_run else None, overrides, load_rewards=load_rewards)
    if run_config.task.get("reward") and not load_rewards:
        raise ConfigError("task.reward names reward functions, user code that credo eval imports and runs only "
                          "with --load-rewards")
    import torch

    from credo.config import ModelConfig
    from credo.evaluate import evaluate_policy

    model_dir = target / "model" if is_run else target
    backend, task, problems = evaluation_setup(run_config, ModelConfig(path=str(model_dir)))
    with torch.no_grad():
        result = evaluate_policy(backend, task, problems, run_config.eval,
                                 max_new_tokens=run_config.rollout.max_new_tokens, seed=run_config.train.seed,
                                 reward_errors=run_config.rollout.reward_errors)
    console.print(eval_table(f"{model_dir} on {task.name}", result))
    console.print_json(json.dumps(result))


@app.command()
@one_line_errors
def compare(
    study: Path = typer.Argument(..., help="Study YAML: methods x seeds (x difficulties), see credo.study.grid."),
    output: Path = typer.Option(None, "--output", "-o", help="Study directory (default: the file's `output`, else runs/studies/<name>)."),
    jobs: int = typer.Option(1, min=1, help="Runs at once, in separate processes sharing the cores."),
    html: bool = typer.Option(False, "--html", help="Also write report.html."),
    seeds: str = typer.Option(None, "--seeds", help="Run only these seeds' cells here, e.g. 26,27,28,29 (a grid split "
                              "between machines; the report covers every finished run in the directory)."),
) -> None:
    """Run a grid of methods x seeds from one file (finished runs are skipped, killed ones resumed), then report."""
    import sys

    from credo.study.grid import load_study, run_study
    from credo.study.report import write_report
    from credo.study.tuning import run_tuning

    _quiet_transformers()
    spec = load_study(study, output)
    try:
        chosen = None if seeds is None else {int(s) for s in seeds.split(",") if s.strip()}
    except ValueError:
        raise typer.BadParameter(f"--seeds {seeds!r}: comma-separated integers, e.g. 26,27") from None

    def log(line: str) -> None:
        console.print(printable(line, None), markup=False, highlight=False)

    command = " ".join(["credo", *sys.argv[1:]])
    if spec.config.tune is not None and spec.config.tune.auto_extend and chosen is None:
        spec = run_tuning(study, output, jobs=jobs, log=log, command=command)
    else:
        if spec.config.tune is not None and spec.config.tune.auto_extend:
            log("tune.auto_extend: no extension with --seeds (part of the grid decides nothing); run the study "
                "without --seeds to extend it")
        run_study(spec, jobs=jobs, log=log, command=command, seeds=chosen)
    path = write_report(spec.output, html=html)
    console.print(f"report: {path}")


@app.command()
@one_line_errors
def report(
    directory: Path = typer.Argument(..., help="A study directory made by `credo compare`."),
    output: Path = typer.Option(None, "--output", "-o", help="Where to write the report (default: the study directory)."),
    html: bool = typer.Option(False, "--html", help="Also write report.html."),
    from_json: bool = typer.Option(False, "--from-json", help="Draw the figures and write the report again from "
                                   "DIRECTORY's report.json (a written report, e.g. a committed one; no runs needed)."),
    metric: str = typer.Option(None, "--metric", help="Another headline metric for the verdicts (e.g. "
                               "greedy_pass@1 where the study's is pass@1): a second report, into its own --output."),
) -> None:
    """Write a study's report: curves at equal cost with intervals over seeds, a table, findings, credit heatmaps.

    A directory without any finished run is an error (exit status 1) that leaves an existing report as it was."""
    from credo.study.report import write_report
    from credo.study.runs import NoFinishedRuns

    try:
        path = write_report(directory, output, html=html, from_json=from_json, headline=metric)
    except NoFinishedRuns as error:  # nothing to report is not a usage error: the one line, exit status 1
        if _options_given["debug"]:
            raise
        try:
            _fail(error)
        except typer.Exit:
            raise typer.Exit(1) from None
    from rich.markdown import Markdown

    console.print(Markdown(printable(path.read_text(), None, newlines=True)))  # names from a shared folder's files
    console.print(f"report: {path}")


@testbed_app.command("build")
@one_line_errors
def testbed_build(
    overrides: list[str] = typer.Option([], "--set", help="Override a TestbedConfig key, e.g. --set steps=800."),
    force: bool = typer.Option(False, help="Rebuild even if a cached model exists."),
) -> None:
    """Train the testbed model by SFT from scratch (cached by its config's hash; never the shipped weights)
    and report its start accuracy."""
    from pydantic import ValidationError

    from credo.config import apply_overrides, invalid
    from credo.testbed import TestbedConfig, build_testbed

    _quiet_transformers()
    try:
        config = TestbedConfig(**apply_overrides({}, overrides))
    except ValidationError as error:
        raise invalid(error, TestbedConfig, "testbed config", "(--set)") from None
    path = build_testbed(config, force=force, shipped=False, log=console.print)
    console.print(f"testbed model: {path}")
    evaluate(path, [])


FACT_ENTRIES = 8
"""The entries of a mapping fact `credo testbed facts` prints (the JSON keeps them all)."""


@testbed_app.command("facts")
@one_line_errors
def testbed_facts(
    config: Path = typer.Argument(None, help="YAML run config of the regime (its model and task)."),
    problems: int = typer.Option(256, min=1, help="Training problems to sample (the stream of train.seed)."),
    samples: int = typer.Option(8, min=1, help="Responses per training problem, at rollout.temperature."),
    output: Path = typer.Option(None, "--json", help="Also write the facts to this JSON file (atomically)."),
    settings: Annotated[list[str] | None, typer.Argument(
        metavar="KEY=VALUE", help=BARE_OVERRIDES_HELP, show_default=False)] = None,
) -> None:
    """A regime's facts on its starting model: greedy and sampled accuracy, the share of lucky successes (right
    answer, wrong step), wrong steps per failure, the kinds of first errors, the decisions per response, how often a
    batch decides each misconception type and the share of groups without a success (`credo.testbed_facts`)."""
    import torch

    from credo.config import load_config
    from credo.io import write_json_atomic
    from credo.testbed_facts import regime_facts

    _quiet_transformers()
    config, bare = bare_overrides(config, settings)
    run_config = load_config(config, bare)
    torch.manual_seed(run_config.train.seed)
    backend, task, held_out = evaluation_setup(run_config, run_config.model)
    with torch.no_grad():
        facts = regime_facts(task, backend, eval_problems=held_out, problems=problems, samples=samples,
                             seed=run_config.train.seed, temperature=run_config.rollout.temperature,
                             max_new_tokens=run_config.rollout.max_new_tokens,
                             batch_responses=run_config.rollout.prompts_per_step * run_config.rollout.group_size)
    table = Table(title=f"regime facts: {config or 'defaults'} ({facts['responses']} sampled responses)")
    table.add_column("fact")
    table.add_column("value", justify="right")
    for key, value in facts.items():
        if isinstance(value, dict):  # the most common first error kinds (a hundred keyed misconceptions: see --json)
            shown = list(value.items())[:FACT_ENTRIES]
            value = ", ".join(f"{k} {v:.3f}" for k, v in shown) + (
                f", and {len(value) - len(shown)} more" if len(value) > len(shown) else "")
        text = value if isinstance(value, str) else f"{value:.3f}" if isinstance(value, float) else str(value)
        table.add_row(key, text)
    console.print(table)
    if output is not None:
        write_json_atomic(output, facts)


@app.command("gradient-variance")
@one_line_errors
def gradient_variance(
    configs: list[Path] = typer.Argument(..., help="Run configs, one per method; the first is the reference (GRPO)."),
    draws: int = typer.Option(16, min=2, help="Rollout batches resampled on the same prompts, per method."),
    after_steps: int = typer.Option(0, "--after-steps", min=0, help="Measure the gradient on mini-batch K+1 after "
                                    "optimiser steps on the batch's first K (off policy); 0: the whole batch at "
                                    "ratio 1."),
    overrides: list[str] = typer.Option([], "--set", help="Override a key of every config, e.g. --set model.path=DIR."),
    output: Path = typer.Option(None, "--json", help="Also write the results to this JSON file (atomically)."),
) -> None:
    """The spread of each method's policy-gradient estimate on common batches: the same policy and prompts, the
    groups resampled `draws` times (`credo.gradient_variance`); relative variance against the first config's."""
    from credo.config import load_config
    from credo.gradient_variance import check_after_steps, gradient_draws, gram_matrix, paired_ratio, spread
    from credo.io import write_json_atomic

    _quiet_transformers()
    loaded = [(path, load_config(path, overrides)) for path in configs]  # every config checked before any runs
    for _, config in loaded:
        check_after_steps(config, after_steps)
    results, reference = {}, None
    for path, config in loaded:
        grads, extra = gradient_draws(config, draws, after_steps=after_steps)
        gram = gram_matrix(grads)
        reference = gram if reference is None else reference
        ratio, ratio_se = paired_ratio(gram, reference)
        results[str(path)] = {"method": config.method, **spread(gram), "vs_first": ratio, "vs_first_se": ratio_se,
                              **extra}
    where = f", mini-batch {after_steps + 1} after {after_steps} optimiser steps" if after_steps else ""
    table = Table(title=f"policy-gradient spread over {draws} resampled batches of the same prompts{where}")
    for column in ("config", "method", "relative variance", "vs first", "mean cosine", "|g| mean", "reward", "tokens"):
        table.add_column(column, justify="left" if column in ("config", "method") else "right")
    for path, row in results.items():
        table.add_row(f"{Path(path).parent.name}/{Path(path).stem}", row["method"],
                      f"{row['relative_variance']:.3g} ± {row['relative_variance_se']:.2g}",
                      f"{row['vs_first']:.2f} ± {row['vs_first_se']:.2f}", f"{row['mean_cosine']:.3f}",
                      f"{row['grad_norm_mean']:.3g}", f"{row['reward_mean']:.3f}", f"{row['tokens_per_draw']:.0f}")
    console.print(table)
    if output is not None:
        write_json_atomic(output, results)


@app.command()
@one_line_errors
def methods(
    name: str = typer.Argument(None, help="One method: each switch with its value and what it does."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown."),
) -> None:
    """List the methods from the registry, one line each: family, paper, what it changes vs GRPO, its sampler and
    what it needs. `credo methods NAME`: one method's every credit and loss switch with its default and what it
    does (override them under `credit:` / `loss:`)."""
    from credo.methods import attribute_docs, needs_in_full, summary
    from credo.rollout.samplers import SAMPLERS

    if name is not None:
        method = METHODS.get(name)
        console.print(f"[bold]{name}[/bold] ({method.family}, arXiv {method.paper}): {escape(method.changes)}\n"
                      f"sampler: {escape(method.sampler.describe())}: {escape(method.sampler.draws)}\n"
                      f"needs: {escape(needs_in_full(method))}")
        if method.loss.on_policy() != method.loss:
            console.print(f"on policy (optim.minibatches = epochs = 1): its {type(method.loss).__name__} "
                          f"{escape(method.loss.on_policy_inert)}; `credo compare` refuses a cell that this makes the "
                          "twin of another")
        for part, obj in (("credit", method.estimator), ("loss", method.loss)):
            table = Table(title=f"{part}: {type(obj).__name__}", show_lines=False)
            for column in ("switch", "default", "what it does"):
                table.add_column(column, overflow="fold")
            docs = attribute_docs(type(obj))
            for key, value in method.switches()["estimator" if part == "credit" else "loss"].items():
                table.add_row(f"{part}.{key}", escape(repr(value)), escape(docs.get(key, "")))
            console.print(table)
        return
    rows = [summary(METHODS.get(n)) for n in METHODS]
    columns = list(rows[0])
    if markdown:
        typer.echo("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
        for row in rows:
            typer.echo("| " + " | ".join(row[c].replace("|", "\\|") for c in columns) + " |")
        return
    table = Table(title="credo methods (credo methods NAME: one method's switches and what they do)")
    for column in columns:  # one line per method: on a narrow terminal "changes" narrows, its cells cut, not wrapped
        table.add_column(column, no_wrap=column != "changes")
    for row in rows:
        table.add_row(*(Text(row[c], no_wrap=True, overflow="ellipsis") for c in columns))
    console.print(table)
    samplers = Table(title="samplers (options under rollout:, see credo.rollout.samplers)")
    for column in ("sampler", "draws", "records", "options"):
        samplers.add_column(column, overflow="fold")
    for sampler_name in SAMPLERS:
        sampler = SAMPLERS.get(sampler_name)
        samplers.add_row(sampler_name, escape(sampler.draws), ", ".join(sorted(sampler.records)) or "-",
                         f"rollout.{sampler_name}" if sampler.options else "rollout")
    console.print(samplers)


@app.command()
@one_line_errors
def demo(
    drift: float = typer.Option(0.15, help="Std of the per-token log-prob change by the later mini-batch."),
) -> None:
    """Per-token credit each method gives to the responses of one toy group (see credo.demo)."""
    from credo.demo import REWARDS, TOKENS, credit_table, recorded_on_the_toy_group

    if not math.isfinite(drift) or drift < 0:
        raise ValueError(f"--drift is a standard deviation: give a finite number >= 0, not {drift}")
    result = credit_table(drift)
    console.print(
        f"[bold]One prompt, {len(REWARDS)} responses of {TOKENS} tokens, rewards {list(REWARDS)}.[/bold]\n"
        "Credit of a token = -B * dLoss/dlogp: how hard the update pushes its log-prob up (+) or down (-).\n"
        + escape("\n".join(recorded_on_the_toy_group()))
    )
    for title, credit in (
        ("first mini-batch (pi = pi_old): trace methods equal GRPO", result.first_minibatch),
        (f"fourth mini-batch (pi moved, drift {drift}): traces act", result.later_minibatch),
    ):
        for row, reward in ((0, REWARDS[0]), (1, REWARDS[1])):
            table = Table(title=f"{title}; response {row} (reward {reward:g})")
            table.add_column("method")
            for t in range(TOKENS):
                table.add_column(f"t{t + 1}", justify="right")
            for name, values in zip(result.methods, credit[:, row]):
                table.add_row(name, *(_cell(v) for v in values.tolist()))
            console.print(table)


def _cell(value: float) -> str:
    if value == 0.0:
        return "[dim]0[/dim]"
    color = "green" if value > 0 else "red"
    return f"[{color}]{value:+.3f}[/{color}]"
