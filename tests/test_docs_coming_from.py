"""docs/coming-from-trl.md and docs/coming-from-verl.md stay true to TRL, verl and credo.

Each table row is machine-readable: the first column is the TRL field or verl key (or metric) in backticks; the
second is `none` or credo's equivalent as backticked tokens: a dotted config key (`rollout.group_size`), a key
with a value (`method: gspo`, `credit.scale: none`) or a command (`credo train --resume`); in a key table the
third column is `exact`, `close` or `none`. These tests check that

- the GRPOConfig table names every field `trl.GRPOConfig` adds to `TrainingArguments`, and no other (a TRL
  upgrade that adds or drops one fails here), and the other TRL tables name real fields;
- every credo key either page names (equivalents, and keys in the notes) exists in credo's schema, and each
  key with a value validates (through `load_config`, with the row's method for `credit.*` / `loss.*`);
- every `credo.config.TRL_KEYS` hint agrees with the TRL page: the field has a row, and each credo key the
  hint names is in that row (a hint that says "none" has a `none` row);
- every verl key exists in verl 0.9.1's generated trainer config, and every metric named exists in the
  source of its trainer (TRL's, verl's, credo's);
- the pages' YAML examples are valid credo configs, their links point at headings of the pages they name, and the
  README links both pages.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from credo.config import TRL_KEYS, RunConfig, load_config
from credo.methods import METHODS, get_method
from credo.tasks.base import TASKS

ROOT = Path(__file__).parents[1]
TRL_PAGE = ROOT / "docs" / "coming-from-trl.md"
VERL_PAGE = ROOT / "docs" / "coming-from-verl.md"
PAGES = [TRL_PAGE, VERL_PAGE]
MATCHES = {"exact", "close", "none"}
CREDO_TOKEN = re.compile(r"^(method|credit|loss|model|task|rollout|optim|train|eval)(\.[a-z0-9_]+)*(: .+)?$")
"""A backticked credo key (optionally with `: value`): its first part is a section of `RunConfig`. No TRL field or
verl key looks like one (verl's sections are `actor_rollout_ref`, `data`, `trainer`, `algorithm`, ...)."""


@dataclasses.dataclass
class Row:
    page: str
    table: str
    key: str
    credo: str
    match: str | None
    notes: str

    @property
    def equivalents(self) -> list[str]:
        return re.findall(r"`([^`]+)`", self.credo)

    @property
    def credo_tokens(self) -> list[str]:
        """The credo keys (with their values) this row names: its equivalents and those in its notes."""
        notes = [t for t in re.findall(r"`([^`]+)`", self.notes) if CREDO_TOKEN.match(t)]
        return [t for t in self.equivalents if not t.startswith("credo ")] + notes


def tables(page: Path) -> dict[str, list[Row]]:
    """Each table of a page, by the header of its first column, as rows."""
    out: dict[str, list[Row]] = {}
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---")):
            i += 1
            continue
        header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        rows = []
        i += 2
        while i < len(lines) and lines[i].startswith("|"):
            cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            assert len(cells) == len(header), f"{page.name}: a row of {header[0]!r} has {len(cells)} cells: {lines[i]}"
            first = re.fullmatch(r"`([^`]+)`", cells[0])
            assert first, f"{page.name}: the first cell must be one backticked name: {lines[i]}"
            keyed = header[1] == "credo"
            rows.append(Row(page.name, header[0], first.group(1), cells[1], cells[2] if keyed else None,
                            cells[-1]))
            i += 1
        assert header[0] not in out, f"{page.name}: two tables headed {header[0]!r}"
        out[header[0]] = rows
    return out


def key_rows(page: Path) -> list[Row]:
    return [row for rows in tables(page).values() for row in rows if row.match is not None]


def metric_rows(page: Path) -> list[Row]:
    return [row for rows in tables(page).values() for row in rows if row.match is None]


def own_grpo_fields() -> set[str]:
    trl = pytest.importorskip("trl")
    from transformers import TrainingArguments

    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {f.name for f in dataclasses.fields(trl.GRPOConfig)} - inherited


# ------------------------------------------------------------------------------------------- the tables' shape
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_key_row_has_a_match_that_fits_its_equivalent(page):
    rows = key_rows(page)
    assert len(rows) > 50
    for row in rows:
        assert row.match in MATCHES, row
        assert (row.credo == "none") == (row.match == "none"), f"{row.key}: credo {row.credo!r}, match {row.match!r}"
        if row.credo != "none":
            assert row.equivalents and re.sub(r"`[^`]+`", "", row.credo).strip(" ,") == "", (
                f"{row.key}: the credo cell holds only backticked keys, comma-separated: {row.credo!r}")
        else:
            assert row.notes, f"{row.key}: say why credo has none"
    for rows in tables(page).values():
        keys = [row.key for row in rows]
        assert len(keys) == len(set(keys)), f"{page.name}: a key listed twice in one table"


# ------------------------------------------------------------------------------------------- (a) TRL's fields
def test_trl_table_names_every_grpo_config_field():
    """Every field GRPOConfig adds to TrainingArguments has a row, and every row is such a field."""
    own = own_grpo_fields()
    listed = {row.key for row in tables(TRL_PAGE)["GRPOConfig field"]}
    assert not own - listed, f"GRPOConfig fields missing from {TRL_PAGE.name}: {sorted(own - listed)}"
    assert not listed - own, f"rows of {TRL_PAGE.name} that are not GRPOConfig's own fields: {sorted(listed - own)}"


def test_trl_other_tables_name_real_fields():
    trl = pytest.importorskip("trl")
    from transformers import TrainingArguments

    pages = tables(TRL_PAGE)
    arguments = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert {row.key for row in pages["TrainingArguments field"]} <= arguments
    scripts = {f.name for cls in (trl.ModelConfig, trl.ScriptArguments) for f in dataclasses.fields(cls)}
    assert {row.key for row in pages["ModelConfig / ScriptArguments field"]} <= scripts
    assert {row.key for row in pages["loss_type"]} >= {"grpo", "dapo", "dr_grpo", "bnpo"}
    loss_type = next(f for f in dataclasses.fields(trl.GRPOConfig) if f.name == "loss_type")
    for row in pages["loss_type"]:
        assert f"'{row.key}'" in loss_type.metadata["help"], f"TRL has no loss_type {row.key!r}"


# ------------------------------------------------------------------------------------------- (b) credo's keys
def nested_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in typing.get_args(annotation) if (m := nested_model(arg))), None)


def resolve(key: str, methods: list[str]) -> None:
    """Assert that the dotted `key` is a credo config key: a field of the schema's sections, a switch of one of
    `methods` (`credit.*`, `loss.*`), or an option of some registered task (`task.*`)."""
    section, *rest = key.split(".")
    assert section in RunConfig.model_fields, key
    if not rest:
        return
    if section in ("credit", "loss"):
        part = "estimator" if section == "credit" else "loss"
        assert len(rest) == 1 and any(rest[0] in get_method(m).switches()[part] for m in methods), (
            f"{key} is not a switch of {' or '.join(methods)}")
        return
    if section == "task":
        assert len(rest) == 1 and any(rest[0] in TASKS.get(n).Config.model_fields for n in TASKS), key
        return
    model = nested_model(RunConfig.model_fields[section].annotation)
    for part in rest:
        assert model is not None and part in model.model_fields, key
        field = model.model_fields[part]
        model = nested_model(field.annotation)


def check_credo_tokens(row: Row) -> None:
    tokens = row.credo_tokens
    methods = [t.partition(": ")[2] for t in tokens if t.startswith("method: ")]
    for name in methods:
        assert name in METHODS, f"{row.key}: no credo method {name!r}"
    methods = methods or ["grpo"]
    for token in tokens:
        key, _, value = token.partition(": ")
        resolve(key, methods)
        if value:
            method = [f"method={methods[0]}"] if key.split(".")[0] in ("credit", "loss") else []
            load_config(None, [*method, f"{key}={value}"], load_rewards=False)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_credo_key_exists_in_the_schema(page):
    checked = 0
    for row in key_rows(page):
        try:
            check_credo_tokens(row)
        except Exception as error:  # name the row
            raise AssertionError(f"{page.name}, row {row.key!r}: {error}") from error
        checked += len(row.credo_tokens)
    assert checked > 50


def test_the_commands_are_credo_trains_options():
    import typer

    from credo.cli import app

    train = typer.main.get_command(app).commands["train"]
    options = {opt for param in train.params for opt in param.opts}
    for page in PAGES:
        for row in key_rows(page):
            for token in row.equivalents:
                if token.startswith("credo "):
                    command, option = token.rsplit(" ", 1)
                    assert command == "credo train" and option in options, f"{page.name}: {token!r}"


# ------------------------------------------------------------------------------------------- (c) TRL_KEYS
def test_every_trl_keys_hint_agrees_with_the_page():
    rows = {row.key: row for row in key_rows(TRL_PAGE) if row.table != "loss_type"}
    for name, hint in TRL_KEYS.items():
        assert name in rows, f"TRL_KEYS names {name!r}, which {TRL_PAGE.name} has no row for"
        row = rows[name]
        named = set(re.findall(r"`([^`]+)`", row.credo + " " + row.notes))
        named |= {t.partition(": ")[0] for t in named}
        if hint.startswith("none"):
            assert row.credo == "none", f"{name}: TRL_KEYS says none, the page {row.credo!r}"
            continue
        assert row.credo != "none", f"{name}: TRL_KEYS says {hint!r}, the page none"
        keys = re.findall(r"\b(?:rollout|optim|train|model|loss|credit|task|eval)\.[a-z0-9_]+(?:\.[a-z0-9_]+)*", hint)
        keys += [f"method: {m}" for m in re.findall(r"\bmethod: (\w+)", hint)]
        keys += re.findall(r"credo train --\w+", hint)
        if hint.startswith("the method"):
            keys.append("method")
        assert keys, f"{name}: cannot read a credo key from the hint {hint!r}"
        for key in keys:
            assert key in named, f"{name}: TRL_KEYS names {key} ({hint!r}); the page's row names {sorted(named)}"


# ------------------------------------------------------------------------------------------- verl's keys
def verl_config() -> dict:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed (pip install 'credo[verl]')")
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    import yaml

    return yaml.safe_load(path.read_text())


def test_every_verl_key_is_in_verls_trainer_config():
    config = verl_config()
    for row in key_rows(VERL_PAGE):
        node = config
        for part in row.key.split("."):
            assert isinstance(node, dict) and part in node, f"verl 0.9.1's trainer config has no {row.key}"
            node = node[part]


# ------------------------------------------------------------------------------------------- metric names
def source(paths: list[Path]) -> str:
    files = [p for root in paths for p in ([root] if root.is_file() else sorted(root.rglob("*.py")))]
    return "\n".join(p.read_text() for p in files)


def named_in(metric: str, text: str) -> bool:
    """A metric name occurs in `text` as a whole string literal, or, for a name the trainer assembles (verl's
    `"actor/"` prefix, `f"timing_s/{name}"`, `f"rewards/{name}/mean"`), each of its `/` parts as a whole piece of
    one (after a quote or `/`, before a quote, `/` or `{`); `<placeholders>` stand for any text."""
    if "<" not in metric and f'"{metric}"' in text:
        return True
    parts = [part for part in (re.sub(r"<[^>]+>", "", p) for p in metric.split("/")) if part]
    return all(re.search(rf'["/]{re.escape(part)}["/{{]', text) for part in parts)


def test_every_metric_named_exists():
    credo = source([ROOT / "src" / "credo"])
    pytest.importorskip("trl")
    import transformers
    import trl

    trl_text = source([Path(trl.__file__).parent / "trainer" / "grpo_trainer.py",
                       Path(transformers.__file__).parent / "trainer.py"])
    rows = [(row, trl_text) for row in metric_rows(TRL_PAGE)]
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.submodule_search_locations:
        verl = Path(next(iter(spec.submodule_search_locations)))
        verl_text = source([verl / "trainer" / "ppo", verl / "workers"])
        rows += [(row, verl_text) for row in metric_rows(VERL_PAGE)]
    assert len(rows) > 20
    for row, theirs in rows:
        assert named_in(row.key, theirs), f"{row.page}: no metric {row.key!r} in its trainer"
        if row.credo != "none":
            for metric in re.findall(r"`([^`]+)`", row.credo):
                assert named_in(metric, credo), f"{row.page}: credo writes no metric {metric!r}"


# ------------------------------------------------------------------------------------------- examples and links
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_yaml_examples_are_valid_configs(page, tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), re.DOTALL)
    assert blocks
    for n, block in enumerate(blocks):
        path = tmp_path / f"example{n}.yaml"
        path.write_text(block)
        load_config(path, load_rewards=False)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_point_at_headings(page):
    links = re.findall(r"\]\(([^)#]*)#([^)]+)\)", page.read_text())
    assert links
    for target, anchor in links:
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: no page {target}"
        assert anchor in headings(path), f"{page.name}: no heading #{anchor} in {target or page.name}"
    readme = (ROOT / "README.md").read_text()
    assert f"docs/{page.name}" in readme, f"README.md does not link {page.name}"
