"""A study: a grid of methods x seeds (x difficulties) from one YAML file, run one after another, resumable.

```yaml
name: testbed-hard
seeds: [0, 1, 2]
set: {train: {steps: 80}}                 # laid over every run's config
methods:                                  # label -> a run config (and overrides of its own)
  grpo: configs/testbed/hard/grpo.yaml
  gspo: {config: configs/testbed/hard/gspo.yaml, set: {optim: {lr: 5.0e-5}}}
difficulties:                             # optional: label -> overrides (default: one cell, "default")
  hard: {}
  decisive: {base: configs/testbed/hard/regime_decisive.yaml}   # `base`: config files laid under the overrides
report: {baseline: grpo, oracle: oracle_blame, metric: greedy_pass@1, like_for_like: {gspo: grpo}}
```

A cell's config is its method's file (with its `base` files), then the study's `set`, the difficulty's
overrides (with its own `base` files, e.g. a regime, under them), the method's `set` and finally `train.seed`; a key
of the study's `set` that a difficulty gives another value is refused (`check_not_overridden`: it would not apply);
every cell is validated before the first one runs, and a cell that would only repeat another's runs (the same
resolved config, or a method that differs from another's only where its settings let nothing act, e.g. a clip on one
on-policy update) is refused (`repeated_cells`).
Runs live in `<output>/<difficulty>/<method>/seed<k>/`. Running the study again skips finished cells
(`summary.json`), resumes cells with a checkpoint and restarts cells that stopped before their first one;
a cell whose saved config differs from what the study file now says is an error, so one directory never
mixes two studies.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from credo.config import (
    ConfigError,
    RunConfig,
    base_files,
    changed_keys,
    deep_merge,
    invalid,
    load_config,
    read_config_file,
    read_yaml_mapping,
    validate,
)
from credo.io import write_text_atomic
from credo.methods import Method, get_method
from credo.schema import Section

STUDY_FILE = "study.yaml"
"""The study's resolved file, written into its output directory (what `credo report` reads)."""


class MethodEntry(Section):
    config: str
    """The run config file (paths relative to the study file)."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Overrides of this method's runs, as a nested mapping (e.g. `{optim: {lr: 5.0e-5}}`)."""
    seeds: list[int] | None = None
    """This method's seeds (None: the study's `seeds`), e.g. fewer for a method outside the main contrasts."""

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
            raise ValueError(f"a method's seeds must be distinct and at least one, got {seeds}")
        return seeds


class ReportConfig(Section):
    baseline: str = "grpo"
    """The method every other is compared with (tokens to its final score, paired differences)."""
    oracle: str | None = "oracle_blame"
    """The yardstick method: each method's share of its gain over the baseline (None: no such column)."""
    metric: str = "greedy_pass@1"
    """The primary endpoint: the held-out metric of the tables (an eval key: greedy_pass@1, pass@1, pass@4, ...),
    whose area at equal rollout tokens gets each method's verdict against the baseline."""
    secondary: list[str] = Field(default_factory=list)
    """Secondary endpoints, each also getting a verdict against the baseline in the same Holm family as the primary
    endpoint's (one family over every metric that yields a verdict, never one family per metric): a metric's name
    for its area at equal rollout tokens (it needs a curve in every run, e.g. `greedy_pass@1`), or `final:<metric>`
    for its value at the last evaluation (e.g. `final:avg@16`, with `eval.final_samples: 16` on
    `eval.final_sample_problems` problems; `final:avg@16@t0.6` at a temperature of `eval.final_temperatures`)."""
    @field_validator("secondary")
    @classmethod
    def _endpoints(cls, secondary: list[str]) -> list[str]:
        bad = [e for e in secondary if not re.fullmatch(r"(final:)?[a-z_]+@\d+(@t[0-9.]+)?", e)]
        if bad:
            raise ValueError(f"report.secondary {bad}: an endpoint is a metric (its area, e.g. pass@1) or "
                             "final:<metric> (its final value, e.g. final:avg@16)")
        return secondary

    like_for_like: dict[str, str] = Field(default_factory=dict)
    """Per method, a second baseline run alike but for the credit (the same optimiser steps per batch, the same
    learning rate), e.g. `{s_trace: grpo_4mb}`: the table and findings add the paired difference to it."""
    like_for_like_endpoints: Literal["primary", "all"] = "primary"
    """Where the like-for-like contrasts join the Holm family: on the primary endpoint alone, or on the secondary
    endpoints too (`all`), as the study's plan registered its family (a plan that counts the like-for-like pairs on
    every endpoint sets `all`; studies planned before this setting read as `primary`)."""
    step_size_controls: dict[str, str] = Field(default_factory=dict)
    """Per method, its step-size control: a cell that runs the baseline's recipe at a step as large as the method's.

    E.g. `{s_trace: grpo@lr=4e-04}`, GRPO at the learning rate whose mean update size (`optim/update_norm`) is
    nearest the method's (a tuning study's report names it: `credo.study.tuning.step_size_controls`). The paired
    difference of the primary endpoint's area to it joins the Holm family beside the contrast to the baseline, so a
    gain that a larger step alone explains is not called credit. The baseline neither has one nor is one."""
    exploratory: list[str] = Field(default_factory=list)
    """Cells added after results were seen, labelled exploratory (a study plan's rule): their contrasts keep their
    raw 95% intervals and are read at the raw p, outside the Holm family, so adding one changes no planned verdict."""
    min_verdict_seeds: int = Field(4, ge=2)
    """The fewest paired seeds a contrast needs for a test and a verdict; under it (a survey) it is descriptive: its
    mean and per-seed differences, no p, no verdict, outside the Holm family. At 2-3 seeds a t-test's interval rests
    on 1-2 degrees of freedom and an exact test cannot reach any corrected level (docs/guides/studies.md,
    "Surveys"); a study that wants verdicts from fewer seeds says so here, and its report says what that rests on."""
    equivalence_margin: float | None = Field(None, gt=0)
    """The margin of "equivalent", stated in the plan before the runs: a contrast that does not beat or fall behind
    is "equivalent" where two one-sided t-tests (TOST, Holm over the family) put it inside +/- this margin; None:
    no equivalence test, and a non-significant contrast is only "not distinguishable", never "level" or "equal"."""
    auc_tokens: float | None = Field(None, gt=0)
    """Rollout-token budget of the areas under the curve; None: the smallest final budget in the grid. With token
    checkpoints (`train.eval_every_tokens`) the areas end at the last checkpoint every run reached, at most this."""
    heatmap_step: int = Field(1, ge=1)
    """The step whose logged samples the credit heatmaps show (step 1: every i.i.d. method sees the same
    responses of the same seed, so the heatmaps differ only by credit)."""
    heatmap_scale: Literal["page", "row"] = "page"
    """The heatmaps' colour scale when the page opens: one for the whole page (rows compare), or each row's
    own largest |credit| (every row's pattern shows); the page has a switch for the other."""


class Tune(Section):
    """A tuning grid: every method of the study at each value of one setting, the same values for every method (the
    baseline and the yardsticks included), each cell labelled `<method>@<setting>=<value>` (`tune_label`), e.g.
    `grpo@lr=1e-04`. Its report chooses each method's value by one rule (`credo.study.tuning`)."""

    key: str = Field(pattern=r"^[a-z_]+(\.[a-z_0-9]+)+$")
    """The setting tuned, as a dotted config path (e.g. `optim.lr`)."""
    values: list[float] = Field(min_length=2)
    """Its values, the same for every method."""
    extend: dict[str, list[float]] = Field(default_factory=dict)
    """Per method, the values the rule added beyond the grid's edge because the method's best sat at that edge
    (e.g. `{grpo: [1.25e-5]}`: the grid brackets every choice, and a method already bracketed runs nothing more);
    each lies outside the grid's range, so every method keeps the whole common grid."""
    auto_extend: int = Field(0, ge=0)
    """How many values `credo compare` may add by itself beyond each edge of a method's grid (0: none, the extensions
    are written in `extend` by hand). Once every value of a method has finished at every seed and its best sits at the
    edge of its values, the value one step of the grid's ratio past that edge runs next (`credo.study.tuning`), until
    the choice is bracketed or this many values lie beyond that edge; the study directory's `study.yaml` records them
    in `extend`. Needs positive values (a geometric grid, as a learning rate's)."""
    methods: list[str] = Field(default_factory=list)
    """The methods tuned, as the study file names them (filled when the study expands its cells; not set by hand)."""

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[float]) -> list[float]:
        if len(set(values)) != len(values):
            raise ValueError(f"a tuning grid's values must be distinct, got {values}")
        return sorted(values)

    @model_validator(mode="after")
    def _beyond_the_edges(self) -> Tune:
        for method, extra in self.extend.items():
            inside = [v for v in extra if self.values[0] <= v <= self.values[-1]]
            if inside or len(set(extra)) != len(extra):
                raise ValueError(f"tune.extend.{method} {extra}: an extension's values are distinct and lie beyond the "
                                 f"grid's edges ({self.values[0]:g} .. {self.values[-1]:g})")
            self.extend[method] = sorted(extra)
        if self.auto_extend and self.values[0] <= 0:
            raise ValueError(f"tune.auto_extend steps by the grid's ratio, so its values must be positive, "
                             f"got {self.values}")
        return self


def method_values(tune: dict[str, Any], method: str) -> list[float]:
    """The values of a (resolved or written) tuning grid `tune` that `method` runs: the common grid and its extensions.

    >>> method_values({"values": [5e-5, 1e-4], "extend": {"grpo": [2.5e-5]}}, "grpo")
    [2.5e-05, 5e-05, 0.0001]
    """
    return sorted([*tune["values"], *(tune.get("extend") or {}).get(method, [])])


def endpoint(name: str) -> tuple[str, str]:
    """An endpoint's metric and measure (`ReportConfig.secondary`): `"tokens"` (its area at equal rollout tokens)
    or `"final"` (its value at the last evaluation).

    >>> endpoint("pass@1"), endpoint("final:avg@16@t0.6")
    (('pass@1', 'tokens'), ('avg@16@t0.6', 'final'))
    """
    return (name.removeprefix("final:"), "final") if name.startswith("final:") else (name, "tokens")


def endpoint_label(name: str) -> str:
    """`"pass@1 area"` or `"final avg@16"`."""
    metric, measure = endpoint(name)
    return f"final {metric}" if measure == "final" else f"{metric} area"


def tune_label(method: str, key: str, value: float) -> str:
    """A tuning cell's label: the method, the setting's last part and the value in the shortest exponent form.

    >>> tune_label("grpo", "optim.lr", 1e-4), tune_label("grpo", "optim.lr", 2.5e-5), tune_label("dapo", "loss.clip", 0.2)
    ('grpo@lr=1e-04', 'grpo@lr=2.5e-05', 'dapo@clip=2e-01')
    """
    mantissa, exponent = f"{value:.6e}".split("e")
    return f"{method}@{key.rsplit('.', 1)[-1]}={mantissa.rstrip('0').rstrip('.')}e{exponent}"


MIN_TUNING_SEEDS = 3
"""A tuning study's fewest seeds outside an exploratory study: one seed decides by noise (docs/guides/studies.md)."""


class StudyConfig(Section):
    name: str
    output: str | None = None
    """Directory of the runs and the report (default `runs/studies/<name>`, relative to the working directory)."""
    seeds: list[int] = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)
    """Overrides of every run, as a nested mapping."""
    methods: dict[str, MethodEntry] = Field(min_length=1)
    difficulties: dict[str, dict[str, Any]] = Field(default_factory=lambda: {"default": {}}, min_length=1)
    order: Literal["methods", "seeds"] = "methods"
    """The order of the runs: each method's seeds in turn, or by seed ("seeds": every method's run of a seed before
    the next seed, so a study stopped half-way holds every method at the same seeds)."""
    report: ReportConfig = ReportConfig()
    tuning_seeds: list[int] = Field(default_factory=list)
    """The seeds the study's settings were tuned on (its tuning study's): never the study's own seeds."""
    pilot_seeds: list[int] = Field(default_factory=list)
    """The seeds of every pilot that chose anything about the study (a regime, a metric, a budget): never its own."""
    tune: Tune | None = None
    """A tuning grid over every method (None: a study of the methods as given)."""
    exploratory: bool = False
    """A study outside the protocol, allowed to reuse tuning or pilot seeds or tune on fewer than
    `MIN_TUNING_SEEDS` seeds; its report says so first.

    A metric or a setting chosen on seeds that then confirm it is not confirmed (docs/guides/studies.md, "Seeds"),
    so `credo compare` refuses a study whose seeds meet `tuning_seeds` or `pilot_seeds` unless it is exploratory."""

    def seeds_of(self, method: str) -> list[int]:
        """The seeds of `method`: its own, else the study's."""
        return self.methods[method].seeds or self.seeds

    @model_validator(mode="after")
    def _fresh_seeds(self) -> StudyConfig:
        used = set(self.seeds).union(*(entry.seeds or [] for entry in self.methods.values()))
        for name in ("tuning_seeds", "pilot_seeds"):
            shared = sorted(used & set(getattr(self, name)))
            if shared and not self.exploratory:
                raise ValueError(f"seeds {shared} are also {name.replace('_', ' ')}: a study's seeds must be fresh "
                                 "(choose others), or mark the study exploratory: true")
        return self

    @model_validator(mode="after")
    def _enough_tuning_seeds(self) -> StudyConfig:
        few = [m for m in self.methods if len(self.seeds_of(m)) < MIN_TUNING_SEEDS]
        if self.tune is not None and few and not self.exploratory:
            raise ValueError(f"a tuning study needs at least {MIN_TUNING_SEEDS} seeds per cell ({few[0]} has "
                             f"{self.seeds_of(few[0])}): one seed chooses by noise; add seeds, or mark the study "
                             "exploratory: true")
        return self

    @field_validator("methods", mode="before")
    @classmethod
    def _entries(cls, methods: Any) -> Any:
        if isinstance(methods, dict):
            return {k: {"config": v} if isinstance(v, str) else v for k, v in methods.items()}
        return methods

    @model_validator(mode="before")
    @classmethod
    def _expand_tuning(cls, data: Any) -> Any:
        """With a `tune` grid, each method becomes one cell per value (`tune_label`), its `set` carrying the value;
        the grid records the methods it expanded, so a resolved study (already expanded) is left as it is."""
        if not isinstance(data, dict) or not isinstance(data.get("tune"), dict) or data["tune"].get("methods"):
            return data
        tune, methods = data["tune"], data.get("methods")
        key, values, extend = tune.get("key"), tune.get("values"), tune.get("extend") or {}
        if not (isinstance(methods, dict) and isinstance(key, str) and isinstance(values, list)
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
                and isinstance(extend, dict) and all(isinstance(v, list) for v in extend.values())
                and all(isinstance(e, (str, dict)) for e in methods.values())):
            return data  # the fields' own validation names what is wrong
        unknown = sorted(set(extend) - set(methods))
        if unknown:
            raise ValueError(f"tune.extend names {unknown}, which are not methods of the study")
        path, cells = key.split("."), {}
        for method, entry in methods.items():
            entry = {"config": entry} if isinstance(entry, str) else entry
            found: Any = entry.get("set") or {}
            for part in path:
                found = found.get(part) if isinstance(found, dict) else None
            if found is not None:
                raise ValueError(f"method {method} sets {key} itself, which the tuning grid sets for every method")
            for value in method_values(tune, method):
                setting: Any = value
                for part in reversed(path):
                    setting = {part: setting}
                cells[tune_label(method, key, value)] = {**entry, "set": deep_merge(entry.get("set") or {}, setting)}
        return {**data, "methods": cells, "tune": {**tune, "methods": list(methods)}}

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        return seeds


def run_path(output: Path, difficulty: str, method: str, seed: int) -> Path:
    """Where a cell's run lives: `<output>/<difficulty>/<method>/seed<k>`."""
    return output / difficulty / method / f"seed{seed}"


@dataclass(frozen=True)
class Cell:
    difficulty: str
    method: str
    seed: int
    config: RunConfig
    run_dir: Path

    @property
    def label(self) -> str:
        return f"{self.difficulty} · {self.method} · seed {self.seed}"


@dataclass(frozen=True)
class Study:
    config: StudyConfig
    root: Path
    """The study file's directory (method config paths are relative to it)."""
    output: Path
    file: Path
    """The study file, which an error in one of its cells names."""

    def cells(self) -> list[Cell]:
        """Every run of the grid, validated (a bad config or a model path that names no model is an error naming
        the cell, before anything runs)."""
        from credo.models import check_model_path

        out = []
        for difficulty, overrides in self.config.difficulties.items():
            difficulty_set = self.with_bases(overrides, f"{self.file}: difficulty {difficulty}")
            check_not_overridden(self.config.set, difficulty_set, f"{self.file}: difficulty {difficulty}")
            for method, entry in self.config.methods.items():
                try:
                    data = read_config_file(self.root / entry.config)
                except ConfigError as error:
                    raise ConfigError(f"{self.file}: method {method}: {error}") from None
                for layer in (self.config.set, difficulty_set, entry.set):
                    data = deep_merge(data, layer)
                for seed in self.config.seeds_of(method):
                    where = f"{self.file}: method {method}, difficulty {difficulty}, seed {seed}"
                    config = validate(deep_merge(data, {"train": {"seed": seed}}), where)
                    if self.config.tune is not None and not self.config.exploratory:
                        check_validation_split(config, where)
                    try:
                        check_model_path(config.model)
                    except FileNotFoundError as error:
                        raise ConfigError(f"{where}: {error}") from None
                    out.append(Cell(difficulty, method, seed, config, run_path(self.output, difficulty, method, seed)))
        if self.config.order == "seeds":
            rank = {seed: i for i, seed in enumerate(dict.fromkeys(
                seed for method in self.config.methods for seed in self.config.seeds_of(method)))}
            out.sort(key=lambda cell: rank[cell.seed])  # stable: difficulties and methods keep their order
        return out

    def with_bases(self, overrides: dict[str, Any], where: str) -> dict[str, Any]:
        """Overrides with their `base` config files (a name or a list, relative to the study file) merged under them."""
        data: dict[str, Any] = {}
        for base in base_files(overrides.get("base", []), where):
            try:
                data = deep_merge(data, read_config_file(self.root / base))
            except ConfigError as error:
                raise ConfigError(f"{where}: base {base}: {error}") from None
        return deep_merge(data, {key: value for key, value in overrides.items() if key != "base"})


def leaf_values(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as its dotted keys and their values (`{"eval": {"greedy": True}}` -> `{"eval.greedy": True}`)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(leaf_values(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_not_overridden(study_set: dict[str, Any], difficulty_set: dict[str, Any], where: str) -> None:
    """A `ConfigError` for a key of the study's `set` that a difficulty (its overrides or its `base` files, laid over
    `set`) gives another value: the study's setting would silently not apply to that difficulty's runs."""
    ours, theirs = leaf_values(study_set), leaf_values(difficulty_set)
    clashes = [f"{key} = {ours[key]!r} (the difficulty's: {theirs[key]!r})"
               for key in ours if key in theirs and theirs[key] != ours[key]]
    if clashes:
        raise ConfigError(f"{where}: its overrides and base files set {'; '.join(clashes)}, over the study's `set`, "
                          "which would not apply; set the key in the difficulty instead")


def check_validation_split(config: RunConfig, where: str) -> None:
    """A `ConfigError` for a tuning cell that evaluates on the test problems where its task has a validation split
    (`eval_split`): values tuned on the problems that then judge them are not confirmed by them."""
    from credo.tasks import task_class

    name = config.task.get("name", "")
    if "eval_split" in task_class(name).Config.model_fields and config.task.get("eval_split", "test") != "validation":
        raise ConfigError(f"{where}: a tuning study evaluates on the validation problems (set task.eval_split: "
                          "validation), not on the test problems the study then reports; or mark it exploratory: true")


def check_step_size_controls(report: ReportConfig, methods: list[str], path: Path) -> None:
    """A `ConfigError` naming the entry of `report.step_size_controls` that is not a pair of two different methods
    of the study, that gives the baseline a control (a control is the baseline's recipe: it has no contrast to read),
    or whose control is the baseline (that contrast is already in the family: twice, it would count twice in Holm's
    correction)."""
    for method, control in report.step_size_controls.items():
        where = f"{path}: report.step_size_controls {method}: {control}"
        for name in (method, control):
            if name not in methods:
                raise ConfigError(f"{where}: {name!r} is not one of the methods: {', '.join(methods)}")
        if method == control:
            raise ConfigError(f"{where}: a method cannot be its own step-size control")
        if method == report.baseline:
            raise ConfigError(f"{where}: the baseline has no step-size control (a control runs the baseline's recipe)")
        if control == report.baseline:
            raise ConfigError(f"{where}: the baseline is no step-size control (its contrast is already in the family)")


def load_study(path: str | Path, output: str | Path | None = None,
               extend: dict[str, list[float]] | None = None) -> Study:
    """Read and validate a study file; `output` overrides its output directory, and `extend` adds values to its
    tuning grid's `tune.extend` (the extensions `tune.auto_extend` ran)."""
    path = Path(path)
    data = read_yaml_mapping(path, "a study: name, seeds, methods, ...")
    if extend and isinstance(data.get("tune"), dict):
        written = data["tune"].get("extend") or {}
        methods = [*written, *(m for m in extend if m not in written)]
        merged = {m: [*written.get(m, []), *extend.get(m, [])] for m in methods}
        data = {**data, "tune": {**data["tune"], "extend": merged}}
    try:
        config = StudyConfig(**data)
    except ValidationError as error:
        raise invalid(error, StudyConfig, "study", path) from None
    if config.report.baseline not in config.methods:
        raise ConfigError(f"{path}: report.baseline {config.report.baseline!r} is not one of the methods: {', '.join(config.methods)}")
    if config.report.oracle is not None and config.report.oracle not in config.methods:
        raise ConfigError(f"{path}: report.oracle {config.report.oracle!r} is not one of the methods: {', '.join(config.methods)} "
                          "(set it to null for no yardstick column)")
    for method, like in config.report.like_for_like.items():
        for name in (method, like):
            if name not in config.methods:
                raise ConfigError(f"{path}: report.like_for_like {method}: {like}: {name!r} is not one of the methods: "
                                  f"{', '.join(config.methods)}")
    check_step_size_controls(config.report, list(config.methods), path)
    if config.report.metric in config.report.secondary or len(set(config.report.secondary)) < len(config.report.secondary):
        raise ConfigError(f"{path}: report.secondary {config.report.secondary} repeats a metric or the primary endpoint "
                          f"{config.report.metric!r}")
    for method in config.report.exploratory:
        if method not in config.methods or method == config.report.baseline:
            raise ConfigError(f"{path}: report.exploratory: {method!r} is not one of the compared methods: "
                              f"{', '.join(m for m in config.methods if m != config.report.baseline)}")
    target = Path(output or config.output or Path("runs") / "studies" / config.name)
    return Study(config, path.parent, target, path)


def repeated_cells(study: Study, cells: list[Cell] | None = None) -> list[str]:
    """One line per method of the grid whose runs would only repeat another's (empty: none), naming both and why.

    Two cells of a difficulty are compared by their resolved run configs, less the seed and with the method as its
    parts (`credo.methods.Method`: sampler, credit estimator, loss, with the run's sampler switches): equal, the
    later one repeats the earlier. A cell that trains on policy (`optim.minibatches = epochs = 1`: every ratio is
    1) is compared with its loss as the loss's on-policy form (`PolicyLoss.on_policy`, declared by each loss), so a
    difference that cannot act there (a clip, a ratio, a trace) does not make it another method. `run_study`
    refuses such a grid before any run; reports of studies that ran them still load (they read `study.yaml`)."""
    cells = study.cells() if cells is None else cells
    first: dict[tuple[str, str], Cell] = {}
    for cell in cells:
        first.setdefault((cell.difficulty, cell.method), cell)
    lines = []
    for difficulty in study.config.difficulties:
        where = f" (difficulty {difficulty!r})" if len(study.config.difficulties) > 1 else ""
        kept: list[tuple[str, dict[str, Any], Method]] = []
        for name in study.config.methods:
            if (difficulty, name) not in first:
                continue
            run, method = _resolved(first[difficulty, name].config)
            repeats = (_repeat(f"{name!r}{where}", method, other, other_method, on_policy=_on_policy(run))
                       for other, other_run, other_method in kept if run == other_run)
            line = next((line for line in repeats if line), "")
            if line:
                lines.append(line)
            else:
                kept.append((name, run, method))
    return lines


def _resolved(config: RunConfig) -> tuple[dict[str, Any], Method]:
    """A cell's run config less its seed and method, and its method with the run's switches."""
    run = config.model_dump(mode="json", exclude={"method": True, "credit": True, "loss": True, "train": {"seed"}})
    return run, get_method(config.method, estimator=config.credit, loss=config.loss).for_run(config.rollout)


def _on_policy(run: dict[str, Any]) -> bool:
    """One optimiser step per rollout batch: it updates the policy that sampled the batch, so every ratio is 1."""
    return run["optim"]["minibatches"] * run["optim"]["epochs"] == 1


def _repeat(cell: str, method: Method, other: str, other_method: Method, *, on_policy: bool) -> str:
    """Why the cell repeats `other`, a run alike but for the method; "" when the methods differ there."""
    if (method.sampler, method.estimator) != (other_method.sampler, other_method.estimator):
        return ""
    if method.loss == other_method.loss:
        return (f"cell {cell} has the same resolved run config as {other!r} (the seed aside, with the method as its "
                "sampler, credit and loss): it would repeat its runs; drop it")
    if not on_policy or method.loss.on_policy() != other_method.loss.on_policy():
        return ""
    why = "; ".join(f"{owner} {type(loss).__name__} {loss.on_policy_inert}"
                    for owner, loss in (("its", method.loss), (f"the {other!r} cell's", other_method.loss))
                    if loss.on_policy() != loss)
    return (f"cell {cell} trains on policy (1 mini-batch, 1 epoch): {why}, so it equals {other!r}; "
            "give it optim.minibatches > 1 or drop it")


def check_distinct(study: Study, cells: list[Cell] | None = None) -> None:
    """A `ConfigError` naming every cell of the grid that would repeat another's runs (`repeated_cells`)."""
    lines = repeated_cells(study, cells)
    if lines:
        raise ConfigError(f"{study.file}: " + "\n".join(lines))


def cell_status(cell: Cell) -> str:
    """"done" (summary written), "resume" (a checkpoint), "restart" (stopped before one) or "new"."""
    if (cell.run_dir / "summary.json").exists():
        return "done"
    if not cell.run_dir.exists():
        return "new"
    return "resume" if any((cell.run_dir / "checkpoints").glob("step_*")) else "restart"


def check_unchanged(cell: Cell) -> None:
    """A `ConfigError` if the cell's run directory holds a run of another config (`changed_keys`: read as
    validated, so a setting credo gained since the run, absent from its config.yaml, counts at its default)."""
    saved = cell.run_dir / "config.yaml"
    if not saved.exists():
        return
    changed = changed_keys(load_config(saved, load_rewards=False), cell.config)
    if changed:
        raise ConfigError(
            f"{cell.run_dir} was run with another config than the study now gives ({cell.label}; "
            f"{', '.join(key for key, _, _ in changed)}); use a new output directory, or delete that run to redo it"
        )


def run_cell(cell: Cell, *, show_progress: bool, threads: int | None = None) -> dict:
    """Train one cell (resume or restart as its directory says); returns its summary."""
    import torch

    from credo.train import train

    if threads is not None:
        torch.set_num_threads(threads)
    # Resuming a cell that stopped before its first checkpoint starts it again from step 0 (under the run's lock).
    return train(cell.config, cell.run_dir, resume=cell_status(cell) in ("resume", "restart"), show_progress=show_progress)


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: end this worker as soon as the `credo compare` process that started it is gone.

    A pool's workers outlive a killed parent (and would start the cells already queued to them); a daemon
    thread notices that the worker was re-parented and ends it. The run directory's lock stops another
    process from writing into a cell that such a worker still holds."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="credo-parent-watch", daemon=True).start()


def _run_cell_in_worker(cell: Cell, threads: int) -> dict:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return run_cell(cell, show_progress=False, threads=threads)


def run_study(study: Study, *, jobs: int = 1, log: Callable[[str], None] = print, command: str = "",
              seeds: Collection[int] | None = None) -> list[Cell]:
    """Run every unfinished cell (`jobs` processes at once, sharing the cores); returns the cells.

    With `seeds`, only the cells of those seeds run here: a grid split between machines (a GPU taking some seeds
    while the CPUs take the others, each into its own study directory, their run folders merged for the report)."""
    cells = study.cells()
    if seeds is not None:
        unknown = sorted(set(seeds) - {c.seed for c in cells})
        if unknown:
            raise ConfigError(f"{study.config.name}: --seeds {unknown} are not seeds of the study "
                              f"({sorted({c.seed for c in cells})})")
    check_distinct(study, cells)
    for cell in cells:
        check_unchanged(cell)
    study.output.mkdir(parents=True, exist_ok=True)
    resolved = study.config.model_dump(mode="json")
    if command:
        resolved["command"] = command
    write_text_atomic(study.output / STUDY_FILE, dump_study(resolved))
    statuses = [cell_status(c) for c in cells]  # each cell's files read once
    todo = [c for c, status in zip(cells, statuses) if status != "done" and (seeds is None or c.seed in seeds)]
    done = statuses.count("done")
    here = "" if seeds is None else f" here (seeds {', '.join(map(str, sorted(seeds)))})"
    log(f"{study.config.name}: {len(cells)} runs, {done} done, {len(todo)} to run{here} -> {study.output}")
    started = time.perf_counter()
    if jobs == 1:
        for number, cell in enumerate(todo, 1):
            log(f"[{number}/{len(todo)}] {cell.label} ({cell_status(cell)})  {_eta(started, number - 1, len(todo))}")
            summary = run_cell(cell, show_progress=True)
            log(f"[{number}/{len(todo)}] {cell.label}: {_brief(summary, study.config.report.metric)}")
        return cells
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_run_cell_in_worker, cell, threads): cell for cell in todo}
        for number, future in enumerate(as_completed(futures), 1):
            cell = futures[future]
            log(f"[{number}/{len(todo)}] {cell.label}: {_brief(future.result(), study.config.report.metric)}  "
                f"{_eta(started, number, len(todo))}")
    return cells


def _brief(summary: dict, metric: str) -> str:
    start, end = summary["eval_start"].get(metric), summary["eval_end"].get(metric)
    score = f"{metric} {start:.3f} -> {end:.3f}" if start is not None and end is not None else ""
    return f"{score}, {summary['rollout_tokens']:,} tokens, {summary['wall_s']:.0f} s"


def _eta(started: float, done: int, total: int) -> str:
    if done == 0:
        return ""
    left = (time.perf_counter() - started) / done * (total - done)
    return f"(about {left / 60:.0f} min left)"


def dump_study(data: dict) -> str:
    """A resolved study's `study.yaml` text (its keys in the order given)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
