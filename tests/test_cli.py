"""The command line: `credo methods`, `credo demo`, `credo compare` and `credo report`."""

from __future__ import annotations

import re

import pytest
import torch
from typer.testing import CliRunner

from credo import cli
from credo.cli import app
from credo.demo import credit_table
from credo.methods import METHODS, needs_in_brief


@pytest.mark.parametrize("width", [160, 80])
def test_methods_lists_every_method_on_one_line(monkeypatch, width):
    """The overview is a list to scan: one line per registered method (name, family, paper, what it changes,
    sampler, needs), no switch or repr of a credit or loss object (those are `credo methods NAME`'s); on a narrow
    terminal the changes are cut, never wrapped."""
    monkeypatch.setattr(cli.console, "width", width)
    result = CliRunner().invoke(app, ["methods"])
    assert result.exit_code == 0, result.output
    table = result.output.split("samplers (options under rollout:")[0]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == len(METHODS)
    assert not re.search(r"\w+\(\w+=", table)  # no Credit(...) / Loss(...) repr
    assert all(len(line) <= width for line in table.splitlines())
    for name, row in zip(METHODS, rows):
        method = METHODS.get(name)
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        assert cells[:3] + cells[4:] == [name, method.family, method.paper, method.sampler.name, needs_in_brief(method)]
        assert cells[3] == method.brief if width == 160 else method.brief.startswith(cells[3].rstrip("…"))


def test_demo_prints_credit_tables():
    result = CliRunner().invoke(app, ["demo"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "+0.167" in result.output  # GRPO's first-minibatch credit A/n = 1/6 for a reward-1 row


def test_demo_numbers():
    table = credit_table(drift=0.15)
    grpo = table.methods.index("grpo")
    # rewards 1, 0, 1, 0: mean 0.5, population std 0.5, A = +-1 (eps 1e-6); credit A/n = 1/6 per token.
    torch.testing.assert_close(table.first_minibatch[grpo, 0], torch.full((6,), 1 / 6), atol=1e-5, rtol=0)
    for name in ("p_trace", "s_trace", "gspo", "dapo"):
        torch.testing.assert_close(table.first_minibatch[table.methods.index(name)], table.first_minibatch[grpo])
    srpo = table.first_minibatch[table.methods.index("srpo"), 1]
    assert torch.equal(srpo[:2], torch.zeros(2)) and (srpo[2:] < 0).all()  # the prefix gets no credit
    ibpo = table.first_minibatch[table.methods.index("ibpo"), 1]
    assert torch.equal(ibpo != 0, torch.tensor([False, False, False, True, True, False]))  # edited tokens only
    oracle = table.first_minibatch[table.methods.index("oracle_blame"), 3]
    assert torch.equal(oracle != 0, torch.tensor([False] * 4 + [True] * 2))  # from the first wrong step on
    assert torch.allclose(oracle[4:], table.first_minibatch[table.methods.index("grpo"), 3, 4:])
    p_trace = table.methods.index("p_trace")
    assert (table.later_minibatch[p_trace] - table.later_minibatch[grpo]).abs().max() > 1e-3


def test_train_eval_and_testbed_build_commands(tmp_path):
    import json

    from tiny import TINY, TINY_TESTBED

    runner = CliRunner()
    settings = [x for item in TINY + ["train.steps=2"] for x in ("--set", item)]
    result = runner.invoke(app, ["train", "--output", str(tmp_path / "run"), *settings], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "greedy_pass@1" in result.output and "→" in result.output  # the start -> end table
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    again = runner.invoke(app, ["train", "--output", str(tmp_path / "run"), *settings])
    assert again.exit_code == 2 and "already holds a run" in again.output
    evaluated = runner.invoke(app, ["eval", str(tmp_path / "run")], env={"COLUMNS": "200"})
    assert evaluated.exit_code == 0, evaluated.output
    assert f"{summary['eval_end']['greedy_pass@1']:.3f}" in evaluated.output  # same model, same problems
    built = runner.invoke(app, ["testbed", "build", "--set", "steps=1", "--set", "batch_size=4",
                                "--set", "model={hidden_size: 16, num_layers: 1, num_heads: 2, intermediate_size: 32}"])
    assert built.exit_code == 0, built.output
    assert "testbed model:" in built.output and "steps=6" in built.output
    assert TINY_TESTBED  # the tiny model of the run above came from the same cache mechanism


def test_bad_config_is_a_clear_cli_error(tmp_path):
    result = CliRunner().invoke(app, ["train", "--set", "optim.lrr=1"])
    assert result.exit_code == 2
    assert "optim.lrr: unknown key" in result.output


def test_compare_runs_the_grid_and_report_rewrites_it(tmp_path):
    from study.test_grid import write_study

    study = write_study(tmp_path, seeds=[0])
    result = CliRunner().invoke(app, ["compare", str(study), "--html"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert "tiny: 2 runs, 0 done, 2 to run" in result.output and (out / "report.html").exists()
    again = CliRunner().invoke(app, ["compare", str(study)], env={"COLUMNS": "200"})
    assert "tiny: 2 runs, 2 done, 0 to run" in again.output
    report = CliRunner().invoke(app, ["report", str(out), "--output", str(tmp_path / "docs")], env={"COLUMNS": "200"})
    assert report.exit_code == 0, report.output
    assert "Findings" in report.output and (tmp_path / "docs" / "report.md").exists()


def test_compare_and_report_errors_are_one_line(tmp_path):
    missing = CliRunner().invoke(app, ["compare", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    not_a_study = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert not_a_study.exit_code == 2 and "is not a study directory" in not_a_study.output


def test_errors_are_one_line_on_stderr_with_markup_escaped(tmp_path):
    # A path with rich markup in it ("[bold]") must be printed as it is, and only on stderr.
    missing = tmp_path / "[bold]x[/bold]" / "study.yaml"
    result = CliRunner().invoke(app, ["compare", str(missing)])
    assert result.exit_code == 2
    assert "[bold]x[/bold]" in result.stderr and result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "error" not in result.stdout


def test_a_malformed_set_value_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["train", "--set", "optim.lr=[1,"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr


def test_an_internal_error_names_its_type_and_debug_shows_the_traceback(tmp_path, monkeypatch):
    import credo.study.report as report

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(report, "write_report", broken)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr == "error: RuntimeError: boom; second line (run with --debug for the traceback)\n"
    debug = CliRunner().invoke(app, ["--debug", "report", str(tmp_path)])
    assert isinstance(debug.exception, RuntimeError) and str(debug.exception) == "boom\nsecond line"


def test_a_missing_extra_and_a_missing_gpu_are_plain_one_line_errors(tmp_path, monkeypatch):
    import credo.extras as extras

    def missing(*args, **kwargs):
        raise extras.MissingExtra("the vLLM backend needs vllm: pip install 'credo[vllm]'")

    monkeypatch.setattr("credo.study.report.write_report", missing)
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr == "error: the vLLM backend needs vllm: pip install 'credo[vllm]'\n"
    if not torch.cuda.is_available():
        gpu = CliRunner().invoke(app, ["eval", str(tmp_path), "--set", "train.device=cuda"])
        assert gpu.exit_code == 2 and gpu.stderr.startswith("error: train.device = 'cuda' but no CUDA device"), gpu.stderr


def test_a_corrupt_model_config_is_a_one_line_error(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", ')
    result = CliRunner().invoke(app, ["eval", str(model)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and "config.json" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------- bare overrides, credo config, --version
CONFIG = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "configs" / "testbed" / "grpo.yaml")


def test_version_prints_the_package_version():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"credo {version('credo')}\n"


def stop_before_training(monkeypatch) -> list:
    """Replace the training run by one that records its config and stops with a one-line error."""
    seen = []

    def record(config, run_dir, *, resume=False, show_progress=True):
        seen.append((config, resume))
        raise ValueError("stopped before training")

    monkeypatch.setattr("credo.train.train", record)
    return seen


def test_train_takes_bare_key_value_overrides_beside_set(tmp_path, monkeypatch):
    from credo.config import dump, load_config

    seen = stop_before_training(monkeypatch)
    runner = CliRunner()
    result = runner.invoke(app, ["train", CONFIG, "optim.lr=5e-5", "train.steps=10", "--set", "train.steps=7",
                                 "--output", str(tmp_path / "run")])
    assert result.exit_code == 2 and "stopped before training" in result.stderr, result.output
    config, resume = seen[-1]
    assert config.optim.lr == 5e-5 and config.train.steps == 10 and not resume  # bare ones after --set ones
    assert dump(config) == dump(load_config(CONFIG, ["train.steps=7", "optim.lr=5e-5", "train.steps=10"]))
    no_file = runner.invoke(app, ["train", "train.steps=4", "rollout.group_size=2", "-o", str(tmp_path / "run")])
    assert no_file.exit_code == 2 and seen[-1][0] == load_config(None, ["train.steps=4", "rollout.group_size=2"])
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.yaml").write_text(dump(load_config(CONFIG)))
    resumed = runner.invoke(app, ["train", "--resume", str(tmp_path / "old"), "train.steps=200"])
    assert resumed.exit_code == 2 and seen[-1][0].train.steps == 200 and seen[-1][1]


def test_a_bare_argument_that_is_not_key_value_is_a_one_line_error(tmp_path, monkeypatch):
    seen = stop_before_training(monkeypatch)
    for arguments, bad in ((["train", CONFIG, "optim.lr=5e-5", "other.yaml"], "other.yaml"),
                           (["train", CONFIG, "=5"], "=5"),
                           (["train", CONFIG, "optim..lr=1"], "optim..lr=1"),
                           (["config", CONFIG, "steps"], "steps"),
                           (["eval", str(tmp_path), "eval.samples=2", "junk"], "junk")):
        result = CliRunner().invoke(app, arguments)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: unexpected argument {bad!r}: ") and result.stderr.count("\n") == 1
        assert "key.path=value" in result.stderr and "Traceback" not in result.stderr
    assert seen == []  # refused before any run started
    applied = CliRunner().invoke(app, ["eval", str(tmp_path), "eval.max_problems=0"])  # eval's reach the config
    assert applied.exit_code == 2 and "eval.max_problems" in applied.stderr, applied.output


def test_config_prints_the_resolved_config_a_run_would_record(tmp_path):
    import yaml

    from credo.config import dump, load_config, validate

    runner = CliRunner()
    result = runner.invoke(app, ["config", CONFIG, "optim.lr=5e-5", "--set", "train.steps=10"])
    assert result.exit_code == 0, result.output
    expected = load_config(CONFIG, ["train.steps=10", "optim.lr=5e-5"])
    assert result.stdout == dump(expected)  # what train writes as config.yaml
    assert validate(yaml.safe_load(result.stdout)) == expected
    assert runner.invoke(app, ["config"]).stdout == dump(load_config(None))  # all defaults
    assert runner.invoke(app, ["config", "train.steps=3"]).stdout == dump(load_config(None, ["train.steps=3"]))
    (tmp_path / "config.yaml").write_text(result.stdout)  # a run directory: its recorded config
    assert runner.invoke(app, ["config", str(tmp_path), "train.steps=11"]).stdout == dump(
        load_config(CONFIG, ["train.steps=11", "optim.lr=5e-5"]))
    (tmp_path / "empty").mkdir()
    for arguments, message in ((["config", CONFIG, "optim.lrr=1"], "optim.lrr: unknown key"),
                               (["config", CONFIG, "optim.lr=2"], "optim.lr: Input should be less than 1"),
                               (["config", str(tmp_path / "nope.yaml")], "does not exist"),
                               (["config", CONFIG, "optim.lr=[1,"], "the value is not valid YAML"),
                               (["config", str(tmp_path / "empty")], "empty is a directory without a config.yaml")):
        bad = runner.invoke(app, arguments)
        assert bad.exit_code == 2 and bad.stdout == "", bad.output
        assert bad.stderr.startswith("error: ") and message in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_the_summary_table_shows_metrics_only_the_final_evaluation_took(tmp_path, capsys):
    """`eval.final_samples` above `eval.samples`: the last evaluation has pass@16 and avg@16, the first pass@4."""
    from credo.cli import console, print_summary

    start = {"greedy_pass@1": 0.1, "pass@4": 0.2, "avg@4": 0.1,
             "by_difficulty": {"steps=9": {"greedy_pass@1": 0.1, "pass@4": 0.2, "avg@4": 0.1}}}
    end = {"greedy_pass@1": 0.3, "pass@16": 0.6, "avg@16": 0.25,
           "by_difficulty": {"steps=9": {"greedy_pass@1": 0.3, "pass@16": 0.6, "avg@16": 0.25}}}
    summary = {"method": "grpo", "steps": 28, "rollout_tokens": 1_200_000, "wall_s": 700.0,
               "eval_start": start, "eval_end": end}
    with console.capture() as captured:
        print_summary(summary, tmp_path)
    text = captured.get()
    assert "0.100 → 0.300" in text and "0.200 → –" in text and "– → 0.600" in text


def test_train_refuses_arguments_it_would_ignore_or_misread(tmp_path, monkeypatch):
    """--resume runs with its own config.yaml and directory, so a config file or --output beside it is an error, not
    dropped; a file given as the run directory (--resume or --output) is named as such, not an errno. Nothing is
    created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "note.txt").write_text("a file")
    (tmp_path / "run").mkdir()
    runner = CliRunner()
    for arguments, message in (
            (["train", CONFIG, "--resume", "run"], ("--resume run continues that run with its own config.yaml and "
                                                    "directory: give no CONFIG or --output with it")),
            (["train", "--resume", "run", "-o", "elsewhere"], "give no CONFIG or --output with it"),
            (["train", "--resume", "note.txt"], "--resume note.txt: not a run directory"),
            (["train", CONFIG, "-o", "note.txt"], "--output note.txt is a file: give a directory for the run")):
        bad = runner.invoke(app, arguments)
        assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and message in bad.stderr, bad.output
        assert bad.stderr.count("\n") == 1, bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.txt", "run"] and not any((tmp_path / "run").iterdir())


@pytest.mark.parametrize("arguments, message", [
    (["gradient-variance", "x.yaml", "--draws", "1"],
     "error: Invalid value for '--draws': Input should be greater than or equal to 2 (see credo gradient-variance --help)"),
    (["demo", "--drift", "abc"], "error: Invalid value for '--drift': "),
    (["demo", "extra"], "error: Got unexpected extra argument(s) (extra) (see credo demo --help)"),
    (["nosuch"], "error: No such command 'nosuch'. (see credo --help)"),
    (["testbed", "facts", "--problems", "0"], "error: Invalid value for '--problems': "),
    (["report"], "error: Missing argument 'directory'. (see credo report --help)"),
    (["demo", "--drift", "nan"], "error: --drift is a standard deviation: give a finite number >= 0, not nan"),
    (["demo", "--drift", "-1"], "error: --drift is a standard deviation: give a finite number >= 0, not -1.0"),
])
def test_usage_errors_are_one_line_like_every_other_error(arguments, message):
    """click's usage errors (a bad option value, an unknown command, a missing argument) as one line with exit
    status 2, not a boxed usage text."""
    result = CliRunner().invoke(app, arguments, prog_name="credo", env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""


def test_no_command_still_shows_the_help():
    result = CliRunner().invoke(app, [], prog_name="credo")
    assert result.exit_code == 2 and "train" in result.output and "Usage" in result.output


def test_a_message_of_several_lines_is_joined_so_its_parts_stay_apart():
    from credo.cli import one_line

    assert one_line("invalid study s.yaml:\n  name: Field required\n  seeds:   Field required\n") == (
        "invalid study s.yaml: name: Field required; seeds: Field required")
    assert one_line("") == "" and one_line("one line") == "one line"


def test_eval_refuses_overrides_it_would_not_read(tmp_path):
    """`credo eval` reads eval.*, task.*, rollout.*, train.seed and train.device: any other override (an optimiser
    or model key) would change nothing, so it is an error before anything loads."""
    for override, key in (("optim.lr=0.5", "optim.lr"), ("model.dtype=bfloat16", "model.dtype"), ("method=gspo", "method")):
        result = CliRunner().invoke(app, ["eval", str(tmp_path), override])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
        assert result.stderr.startswith(f"error: override '{override}': credo eval does not read {key}; it reads "
                                        "eval.*, task.*, rollout.*, train.seed and train.device"), result.stderr


def test_an_os_error_names_its_path_and_what_it_means(tmp_path):
    """A file where credo needs a directory (CREDO_CACHE, an --output), or a name too long for the file system: one
    line naming the path (cut to 200 characters) or the variable, and what it means."""
    import errno

    from tiny import TINY

    from credo.cli import os_error

    (tmp_path / "afile").write_text("x")
    settings = [x for item in [*TINY, "train.steps=1"] for x in ("--set", item)]
    result = CliRunner().invoke(app, ["train", "-o", str(tmp_path / "run"), *settings],
                                env={"CREDO_CACHE": str(tmp_path / "afile")})
    assert result.exit_code == 2 and result.stderr == (
        f"error: CREDO_CACHE={tmp_path / 'afile'} is not a directory: credo caches its built models there\n")
    assert not (tmp_path / "run").exists()
    exists = FileExistsError(errno.EEXIST, "File exists", "out")
    assert os_error(exists) == "out: a file stands where a directory is needed (File exists)"
    long = OSError(errno.ENAMETOOLONG, "File name too long", "y" * 300)
    assert os_error(long) == f"{'y' * 200}... (300 characters): a file name too long for the file system (File name too long)"
    assert os_error(OSError("no path")) == "no path"
