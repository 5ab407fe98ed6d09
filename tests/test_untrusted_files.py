"""Red team: config files, reports and checkpoints from elsewhere load as data; user code runs only when asked."""

from __future__ import annotations

import json
import resource
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file
from typer.testing import CliRunner

from credo.cli import app

runner = CliRunner()


# ------------------------------------------------------------------------------------------ reward modules
def run_naming_a_reward(tmp_path) -> tuple[Path, Path]:
    """A run directory whose config names a reward module that creates a sentinel file when imported."""
    sentinel = tmp_path / "imported"
    module = tmp_path / "evil_rewards.py"
    module.write_text(f"open({str(sentinel)!r}, 'w').close()\n\ndef accuracy(completions, **columns):\n"
                      "    return [0.0] * len(completions)\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "arith", "reward": f"{module}:accuracy"}}))
    return run, sentinel


def test_credo_config_imports_no_reward_module_unless_asked(tmp_path):
    run, sentinel = run_naming_a_reward(tmp_path)
    result = runner.invoke(app, ["config", str(run)])
    assert result.exit_code == 0, result.output
    assert "evil_rewards.py:accuracy" in result.output
    assert not sentinel.exists()
    result = runner.invoke(app, ["config", str(run), "task.reward=no_colon"])
    assert result.exit_code == 2 and "must look like 'package.module:function'" in result.output
    assert runner.invoke(app, ["config", str(run), "--load-rewards"]).exit_code == 0
    assert sentinel.exists()


def test_credo_eval_imports_no_reward_module_unless_asked(tmp_path):
    run, sentinel = run_naming_a_reward(tmp_path)
    result = runner.invoke(app, ["eval", str(run)])
    assert not sentinel.exists()
    assert result.exit_code == 2 and "only with --load-rewards" in result.output


# ------------------------------------------------------------------------------------------ report folders
REPORT = Path(__file__).parents[1] / "docs" / "results" / "credit-decisive"


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if path.is_file()}


def test_a_forged_report_folder_writes_nothing_outside_it(tmp_path):
    """A difficulty named `../../../escaped` in study.yaml and report.json is refused before any figure leaves."""
    from credo.study.report import write_report

    forged = tmp_path / "a" / "b" / "forged"
    forged.mkdir(parents=True)
    name = "../../../escaped"
    study = yaml.safe_load((REPORT / "study.yaml").read_text())
    study["difficulties"] = {name: study["difficulties"]["decisive"]}
    (forged / "study.yaml").write_text(yaml.safe_dump(study))
    saved = json.loads((REPORT / "report.json").read_text())
    (forged / "report.json").write_text(json.dumps({name: saved["decisive"]}))
    before = files_under(tmp_path)
    with pytest.raises(ValueError, match=r"refusing the file name '.*\.\./\.\./\.\./escaped.*', which leads outside"):
        write_report(forged, from_json=True)
    assert {path for path in files_under(tmp_path) - before if forged not in path.parents} == set()


def test_names_in_a_shared_report_folder_reach_neither_the_terminal_nor_the_page_as_code(tmp_path):
    """A study named with a terminal escape sequence (a clipboard write, a screen clear) and a method named as a
    `javascript:` link: `credo report` prints the escapes as text, and report.html links nothing but http(s) and
    relative paths."""
    shared = tmp_path / "shared"
    shared.mkdir()
    evil, link = "study\x1b]52;c;ZWNobw==\x07\x1b[2J", "[x](javascript:alert(1))"
    study = yaml.safe_load((REPORT / "study.yaml").read_text())
    study["name"] = evil
    study["methods"] = {(link if m == "srpo" else m): entry for m, entry in study["methods"].items()}
    (shared / "study.yaml").write_text(yaml.safe_dump(study))
    saved = json.loads((REPORT / "report.json").read_text())
    for row in saved["decisive"]["methods"]:
        row["method"] = link if row["method"] == "srpo" else row["method"]
    (shared / "report.json").write_text(json.dumps(saved))
    result = runner.invoke(app, ["report", str(shared), "--from-json", "--html"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\\x1b]52" in result.output
    page = (shared / "report.html").read_text()
    assert "javascript:" in page and 'href="javascript' not in page.lower()
    assert "\x1b" not in page  # the title too


@pytest.mark.parametrize("name", ["report.json", "study.yaml"])
def test_a_report_folder_file_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_at_once(tmp_path, name):
    """`report.json -> /dev/zero` would read until memory runs out, a FIFO would block forever: both are one line."""
    import os
    import shutil

    for kind in ("fifo", "zero"):
        shared = tmp_path / kind
        shutil.copytree(REPORT, shared)
        (shared / name).unlink()
        if kind == "fifo":
            os.mkfifo(shared / name)
        else:
            (shared / name).symlink_to("/dev/zero")
        result = runner.invoke(app, ["report", str(shared), "--from-json"])
        assert result.exit_code != 0 and "is a symbolic link or a special file" in result.output, result.output


def test_a_results_script_refuses_a_study_file_linked_to_dev_zero(tmp_path):
    """The results pages read a report folder through `written_areas`, with the report's own file checks."""
    import shutil

    from credo.study.results import written_areas

    shared = tmp_path / "linked"
    shutil.copytree(REPORT, shared)
    (shared / "study.yaml").unlink()
    (shared / "study.yaml").symlink_to("/dev/zero")
    with pytest.raises(OSError, match="is a symbolic link or a special file"):
        written_areas(shared, "default")


def test_a_checkpoint_holding_a_fifo_is_unreadable_not_a_hang(tmp_path):
    import os

    from credo.checkpoint import UnreadableCheckpoint, read_checkpoint

    step = tmp_path / "checkpoints" / "step_000002"
    step.mkdir(parents=True)
    os.mkfifo(step / "state.json")
    with pytest.raises(UnreadableCheckpoint, match="special file"):
        read_checkpoint(step)


# ------------------------------------------------------------------------------------------ config files
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
"""Nine levels of nine aliases: 9^9 (387 million) strings from 9 lines."""


def test_a_yaml_alias_bomb_is_refused_at_once_in_one_short_line(tmp_path):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    started = time.perf_counter()
    result = runner.invoke(app, ["config", str(tmp_path / "bomb.yaml")])
    assert time.perf_counter() - started < 5
    assert result.exit_code == 2 and "aliases (*name) are not allowed" in result.output
    assert len(result.output) < 1000 and result.output.count("\n") == 1


@pytest.mark.parametrize("config", [{"task": {"name": "x" * 100_000}}, {"base": ["y" * 100_000, 1]}])
def test_a_huge_value_in_a_config_gives_a_short_error(tmp_path, config):
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["config", str(tmp_path / "big.yaml")])
    assert result.exit_code == 2 and result.output.startswith("error:")
    assert len(result.output) < 2500 and result.output.count("\n") == 1


# ------------------------------------------------------------------------------------------ checkpoints
def test_a_deflate_bomb_trainer_pt_is_refused_before_it_inflates(tmp_path):
    """torch.load reads DEFLATE members too: a 40 MB tensor of zeros in a ~40 kB trainer.pt (1,000x)."""
    from credo.checkpoint import CheckpointError, read_checkpoint

    genuine = tmp_path / "genuine.pt"
    torch.save({"optimizer": {"state": {0: {"exp_avg": torch.zeros(10_000_000)}}, "param_groups": []},
                "scheduler": {}, "torch_rng": torch.get_rng_state(), "cuda_rng": [], "python_rng": (3, (1,), None)},
               genuine)
    checkpoint = tmp_path / "checkpoints" / "step_000002"
    checkpoint.mkdir(parents=True)
    with zipfile.ZipFile(genuine) as source, zipfile.ZipFile(checkpoint / "trainer.pt", "w", zipfile.ZIP_DEFLATED) as bomb:
        for member in source.infolist():
            bomb.writestr(member.filename, source.read(member.filename))
    assert (checkpoint / "trainer.pt").stat().st_size * 500 < genuine.stat().st_size
    save_file({"w": torch.zeros(2)}, checkpoint / "trainable.safetensors")
    (checkpoint / "state.json").write_text(json.dumps({"step": 2}))
    with pytest.raises(CheckpointError, match=r"refusing to load .*trainer.pt: its member '.*' is compressed"):
        read_checkpoint(checkpoint)


# ------------------------------------------------------------------------------------------ model output
HUGE = "9" * 5000
"""More digits than Python converts to an int (4,300): `int(HUGE)` raises ValueError."""


def test_a_boxed_answer_of_thousands_of_digits_is_just_wrong():
    from credo.tasks import build_task

    task = build_task({"name": "arith"})
    problem = task.eval_problems()[0]
    for answer in (HUGE, "0" * 5000 + problem.answer):
        verdict = task.verify(problem, f"\\boxed{{{answer}}}")
        assert (verdict.reward, verdict.correct) == (0.0, False)
    assert task.verify(problem, f"\\boxed{{{problem.answer}}}").correct


def test_a_localiser_reply_with_thousands_of_digits_reads_no_step():
    from credo.rollout.localise import parse_step

    assert parse_step(f"\\boxed{{{HUGE}}}", 5) == (1, "fallback")
    assert parse_step(f"Step 3 went wrong, then step {HUGE}", 5) == (1, "fallback")
    assert parse_step(f"Step {HUGE}, no: \\boxed{{4}}", 5) == (4, "boxed")


# ------------------------------------------------------------------------------------------ model directories
@pytest.fixture
def custom_code_model(tmp_path, monkeypatch) -> tuple[Path, Path, list]:
    """A model directory whose model and tokenizer name their own code (`auto_map`, unknown types), which
    creates a sentinel when imported; stdin answers "y" to transformers' question whether to run it."""
    import shutil

    from tiny import TINY_TESTBED

    from credo.testbed import TestbedConfig, build_testbed

    model_dir, sentinel, asked = tmp_path / "model", tmp_path / "ran", []
    shutil.copytree(build_testbed(TestbedConfig(**yaml.safe_load(TINY_TESTBED))), model_dir)
    (model_dir / "evil.py").write_text(
        f"open({str(sentinel)!r}, 'w').close()\n"
        "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
        "class EvilConfig(LlamaConfig):\n    model_type = 'evil'\n"
        "class EvilModel(LlamaForCausalLM):\n    config_class = EvilConfig\n"
        "class EvilTokenizer(PreTrainedTokenizerFast): pass\n")
    for name, changes in (("config.json", {"model_type": "evil", "auto_map": {
                              "AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}}),
                          ("tokenizer_config.json", {"tokenizer_class": "EvilTokenizer", "auto_map": {
                              "AutoTokenizer": [None, "evil.EvilTokenizer"]}})):
        data = json.loads((model_dir / name).read_text())
        (model_dir / name).write_text(json.dumps({**data, **changes}))
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    return model_dir, sentinel, asked


def test_a_model_directory_with_its_own_code_is_refused_without_asking(custom_code_model):
    from credo.config import ModelConfig
    from credo.models import load_model, load_tokenizer

    model_dir, sentinel, asked = custom_code_model
    with pytest.raises(ValueError, match="custom code"):
        load_model(ModelConfig(path=str(model_dir)), torch.device("cpu"))
    with pytest.raises(ValueError, match="custom code"):
        load_tokenizer(model_dir)
    assert not sentinel.exists() and asked == []


@pytest.fixture
def testbed_tokenizer():
    from tiny import TINY_TESTBED

    from credo.models import load_tokenizer
    from credo.testbed import TestbedConfig, build_testbed

    return load_tokenizer(build_testbed(TestbedConfig(**yaml.safe_load(TINY_TESTBED))))


def test_a_chat_template_that_loops_for_hours_is_stopped(testbed_tokenizer, monkeypatch):
    from credo.rollout.generate import encode_prompts

    monkeypatch.setattr("credo.tasks.chat.RENDER_SECONDS", 0.5)
    testbed_tokenizer.chat_template = ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                                       "{% endfor %}{{ messages[0]['content'] }}")
    started = time.perf_counter()
    with pytest.raises(ValueError, match="took more than 0.5 s or 1024 MB to render 1 prompt;"):
        encode_prompts(testbed_tokenizer, ["2+2?"])
    assert time.perf_counter() - started < 5


def test_a_chat_template_that_allocates_gigabytes_is_stopped_outside_the_trainer(testbed_tokenizer):
    """One expression, `'x' * 2**32`: 4 GiB allocated at once, which no timer cuts short in-process."""
    from credo.rollout.generate import encode_prompts

    testbed_tokenizer.chat_template = "{{ 'x' * 2**32 }}{{ messages[0]['content'] }}"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"took more than .* s or 1024 MB to render 1 prompt;"):
        encode_prompts(testbed_tokenizer, ["2+2?"])
    assert time.perf_counter() - started < 15
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 512 * 1024  # kB: not in this process


def test_a_looping_chat_template_is_stopped_off_the_main_thread_too(testbed_tokenizer, monkeypatch):
    from credo.rollout.generate import encode_prompts

    monkeypatch.setattr("credo.tasks.chat.RENDER_SECONDS", 0.5)
    testbed_tokenizer.chat_template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(ValueError, encode_prompts,
                                                                         testbed_tokenizer, ["2+2?"])))
    started = time.perf_counter()
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and time.perf_counter() - started < 10
    assert "took more than 0.5 s" in str(errors[0].value)


def test_a_chat_template_error_is_a_value_error_with_its_message(testbed_tokenizer):
    from credo.rollout.generate import encode_prompts

    testbed_tokenizer.chat_template = "{{ raise_exception('System role not supported') }}"
    with pytest.raises(ValueError, match="chat template failed: .*System role not supported"):
        encode_prompts(testbed_tokenizer, ["2+2?"])


def test_a_huge_chat_template_is_refused(testbed_tokenizer):
    from credo.rollout.generate import encode_prompts

    testbed_tokenizer.chat_template = "{{ messages[0]['content'] }}" + "{# padding #}" * 10_000
    with pytest.raises(ValueError, match="chat template has 130,028 characters, more than the 65,536"):
        encode_prompts(testbed_tokenizer, ["2+2?"])


def test_a_trainer_pt_declaring_more_bytes_than_it_holds_is_refused(tmp_path):
    """Zip entries can share bytes (each declared at full size): torch would read every one of them."""
    from credo.io import check_torch_archive

    path = tmp_path / "trainer.pt"
    torch.save({"weights": torch.zeros(1000)}, path)
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02")  # the first member's central directory entry: sizes at +20 and +24
    data[entry + 20:entry + 28] = (10**9).to_bytes(4, "little") * 2
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"its members declare 1,000,\d{3},\d{3} bytes, more than the file's"):
        check_torch_archive(path)


def test_a_model_directory_whose_bin_weights_would_inflate_is_refused(tmp_path):
    """transformers loads `pytorch_model.bin` with torch.load, which reads DEFLATE members too."""
    from credo.config import ModelConfig
    from credo.models import load_model
    from credo.testbed import TestbedModel, build_tokenizer, new_model

    tokenizer = build_tokenizer()
    model = new_model(TestbedModel(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32), tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()  # the older format instead, as torch.save writes it
    weights = tmp_path / "pytorch_model.bin"
    torch.save(model.state_dict(), weights)
    load_model(ModelConfig(path=str(tmp_path)), torch.device("cpu"))  # as torch.save wrote it: loads
    data = {m.filename: zipfile.ZipFile(weights).read(m.filename) for m in zipfile.ZipFile(weights).infolist()}
    with zipfile.ZipFile(weights, "w", zipfile.ZIP_DEFLATED) as bomb:
        for name, content in data.items():
            bomb.writestr(name, content)
    with pytest.raises(ValueError, match=r"refusing to load .*pytorch_model.bin: its member '.*' is compressed"):
        load_model(ModelConfig(path=str(tmp_path)), torch.device("cpu"))
