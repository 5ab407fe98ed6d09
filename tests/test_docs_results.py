"""The results docs' scope table and paper settings hold what they say: every method's paper has a row, the
`@paper` cells are valid configs, and the numbers they compute from committed files come out as printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from credo.config import load_config
from credo.losses.lambda_returns import positional_weights
from credo.methods import METHODS

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "docs" / "results"


def _papers() -> set[str]:
    """arXiv ids of the registered methods' papers (GRPO's and REINFORCE's, the baselines, and credo's own
    yardstick have no claim under test)."""
    return {METHODS.get(name).paper for name in METHODS.names()} - {"credo", "2402.03300"}


@pytest.mark.parametrize("page", ["scope.md", "paper-settings.md"])
def test_every_methods_paper_has_a_row(page: str) -> None:
    text = (RESULTS / page).read_text()
    missing = {paper for paper in _papers() if f"({paper})" not in text}
    assert not missing, f"{page} has no row for {sorted(missing)}"


def test_scope_table_has_a_holm_column_and_the_long_horizon_row() -> None:
    text = (RESULTS / "scope.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| paper (arXiv)"))
    assert header.rstrip(" |").endswith("survives Holm")
    assert "**The long-horizon regime**" in text


POWERED = {"decisive": ("credit-decisive", "decisive"), "no-cancel": ("credit-nocancel", "nocancel"),
           "hard": ("credit-hard", "hard")}
REGIMES = {**POWERED, "long, sampled": ("long-study/main", "default"),
           "long, greedy": ("long-study/main", "default"),
           "long survey, sampled": ("long-study/survey", "default"),
           "long survey, greedy": ("long-study/survey", "default"),
           "decisive, retuned": ("long-study/decisive-fragile", "decisive")}
SECONDARY = {"long, greedy": "greedy_pass@1", "long survey, greedy": "greedy_pass@1"}
"""The regimes whose claims are a secondary endpoint's verdicts (in the headline's one Holm family)."""
CLAIM = re.compile(r"(?P<regime>" + "|".join(map(re.escape, sorted(REGIMES, key=len, reverse=True))) + r"):|"
                   r"`(?P<method>[^`]+)`(?: vs `(?P<like>[^`]+)`)? "
                   r"(?:(?P<verdict>beats|falls behind|not distinguishable) \((?P<p><0\.001|\d\.\d{3})|"
                   r"(?P<descriptive>descriptive) \((?P<mean>[+-]\d\.\d{3}))[;),]")


def _committed_results() -> dict:
    """`{regime: DifficultyResult}` of the three credit reports and the long study's main and survey families (each
    family's sampled and greedy reports) and its decisive re-run, as `credo report --from-json` recomputes them."""
    from credo.study.results import results_from_json

    out = {}
    for regime, (folder, difficulty) in REGIMES.items():
        study = yaml.safe_load((RESULTS / folder / "study.yaml").read_text())
        out[regime] = results_from_json(RESULTS / folder, study)[difficulty].result
    return out


def test_scope_holm_column_holds_the_reports_verdicts() -> None:
    """Every row's "survives Holm" cell (the long-horizon regime's too) says yes or partly and quotes verdicts
    (`method` [vs `like`] verdict (Holm p), each after the regime it is in) that are the committed reports' under
    Holm's correction, or a survey's description (`method` descriptive (mean difference)) where it has too few
    seeds for a verdict."""
    from credo.study.tables import p_text

    results = _committed_results()
    rows = [line for line in (RESULTS / "scope.md").read_text().splitlines() if line.startswith("| **")]
    checked = 0
    for line in rows:
        cell = line.rstrip(" |").rsplit(" | ", 1)[1]
        assert re.match(r"\*\*(yes|partly|no)\*\*: ", cell), cell
        regime, claims = None, 0
        for m in CLAIM.finditer(cell):
            if m["regime"]:
                regime = m["regime"]
                continue
            assert regime is not None, f"{m[0]!r} before any regime in {cell[:40]!r}"
            row = next(r for r in results[regime].rows if r.method == m["method"])
            if regime in SECONDARY:  # a secondary endpoint: against the baseline only
                assert m["like"] is None, f"{regime}: {m[0]}: secondary endpoints have no like-for-like contrast"
                contrast = row.secondary_vs_baseline[SECONDARY[regime]]
            else:
                contrast = row.auc_vs_baseline if m["like"] is None else row.auc_vs_like
            if m["like"] is not None:
                assert row.like_for_like == m["like"], m[0]
            if m["descriptive"]:  # a survey's contrast on fewer seeds than a verdict needs: its mean, no test
                assert (contrast.verdict, f"{contrast.estimate.mean:+.3f}") == ("descriptive", m["mean"]), m[0]
            else:
                assert (contrast.verdict, p_text(contrast.p_holm)) == (m["verdict"], m["p"]), f"{regime}: {m[0]}"
            claims += 1
        assert claims, cell
        checked += 1
    assert checked == len(rows) >= 10


def test_powered_study_tables_are_the_scripts_output() -> None:
    """The powered study's two tables (docs/results/powered-study.md, moved there from the README) are what the
    commands it names print for the committed reports (the decisive table with the steps column that the runs folder
    adds)."""
    from example_scripts import load_example

    page = (RESULTS / "powered-study.md").read_text()
    folders = [RESULTS / f for f, _ in POWERED.values()]
    assert load_example("study_verdicts").table(folders, common=True) in page
    printed = load_example("study_table").tables(RESULTS / "credit-decisive").splitlines()[2:]
    lines = page.splitlines()
    start = lines.index(printed[0][: -len(" |")] + " | steps |")
    shown = [line.rsplit(" | ", 1)[0] + " |" for line in lines[start:start + len(printed)]]
    shown[1] = printed[1]
    assert shown == printed


def test_the_verdicts_page_is_the_scripts_output_and_the_findings_link_it() -> None:
    """The long study's verdicts page is what `reports.sh`'s study_verdicts.py command prints for the committed
    reports, and the study's findings page, which the README's paragraph links, links it."""
    from example_scripts import load_example

    script = (RESULTS / "long-study" / "reports.sh").read_text()
    folders = re.search(r'for output in ([^;]+); do\n  \[ -f "\$O/\$output/report.json" \]', script)[1].split()
    page = (RESULTS / "long-study" / "verdicts.md").read_text()
    assert page == load_example("study_verdicts").table([RESULTS / "long-study" / f for f in folders]) + "\n"
    assert "](verdicts.md)" in (RESULTS / "long-study" / "README.md").read_text()
    assert "](docs/results/long-study/README.md)" in (ROOT / "README.md").read_text()


def _readme_text() -> dict[str, str]:
    """The README and every page its text moved to: the manual's pages but the specification (whose paper sections
    quote the papers' numbers), of which the sections the README's text moved to, and the powered study."""
    pages = {"README.md": (ROOT / "README.md").read_text()}
    for page in [*ROOT.glob("docs/*.md"), *ROOT.glob("docs/guides/*.md"), RESULTS / "powered-study.md"]:
        if page.name != "methods.md":
            pages[str(page.relative_to(ROOT))] = page.read_text()
    sections = re.split(r"^(?=##+ )", (ROOT / "docs" / "methods.md").read_text(), flags=re.MULTILINE)
    moved = [s for s in sections if s.startswith(("### Readings we chose", "## Checked against public code",
                                                  "## Reproducing verl and TRL exactly"))]
    assert len(moved) == 8
    pages["docs/methods.md (readings, public code, conventions)"] = "".join(moved)
    assert len(pages) > 20
    return pages


def test_no_paper_number_beside_a_testbed_interval_in_the_readme() -> None:
    for name, text in _readme_text().items():
        for phrase in ("the paper claims", "+0.5 to +3", "+0.49 / +3.16", "+3 points", "+4.5"):
            assert phrase not in text, (name, phrase)


def test_paper_cells_are_valid_configs() -> None:
    text = (RESULTS / "paper-settings.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    cells = yaml.safe_load("methods:\n" + block)["methods"]
    assert {"srpo@paper", "vine@paper", "grpo_lambda@paper"} <= set(cells)

    def flat(prefix: str, mapping: dict):
        for key, value in mapping.items():
            yield from flat(f"{prefix}{key}.", value) if isinstance(value, dict) else [f"{prefix}{key}={value}"]

    for cell in cells.values():
        config = ROOT / "configs" / "studies" / cell["config"]
        run = load_config(config.resolve(), list(flat("", cell["set"])))
        assert run.optim.minibatches * run.optim.epochs >= 1
    srpo = load_config((ROOT / "configs/testbed/hard/srpo.yaml").resolve(),
                       list(flat("", cells["srpo@paper"]["set"])))
    assert (srpo.optim.lr, srpo.optim.minibatches, srpo.rollout.temperature, srpo.rollout.top_p,
            srpo.rollout.prompts_per_step) == (5e-5, 4, 0.7, 0.95, 32)


def test_scope_first_third_snippet_prints_its_numbers(capsys, monkeypatch) -> None:
    text = (RESULTS / "scope.md").read_text()
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", text, re.S) if "first_third" in s)
    expected = [float(x) for x in re.search(r"# ([\d. ]+)\n", snippet).group(1).split()]
    monkeypatch.chdir(ROOT)
    exec(compile(snippet, "scope.md", "exec"), {})
    printed = [float(x) for x in capsys.readouterr().out.split()]
    assert printed == pytest.approx(expected, abs=5e-4)


def test_scope_lambda_weight_ranges() -> None:
    # "within [0.82, 1] on a 41-token response ... within [0.84, 1] on 35 tokens"; `recent` at 0.99: 0.67
    for n, low in ((41, 0.82), (35, 0.84)):
        w = positional_weights(torch.tensor([n]), n, decay=0.99, style="both")[0]
        assert round(w.min().item(), 2) == low and w.max().item() == pytest.approx(1.0)
    recent = positional_weights(torch.tensor([41]), 41, decay=0.99, style="recent")[0]
    assert round(recent.min().item(), 2) == 0.67
    lam_length = positional_weights(torch.tensor([41]), 41, decay=0.9, style="recent", per_length=32)[0]
    assert round(lam_length.min().item(), 2) == 0.04


def test_the_ranking_study_runs_each_cell_at_its_tuning_reports_choice() -> None:
    """configs/studies/ranking_main.yaml and ranking_survey.yaml hold between them the cells their tuning report
    wrote (`tuned_k100-n8-p06.yaml`: each method at the rule's choice, each step-size control at the baseline's grid
    rate nearest its update size), each as written, and the report settings that name them; the survey's one untuned
    cell is the paper's settings (`srpo@paper`, plan.md "Cells")."""
    tuned = yaml.safe_load((RESULTS / "ranking" / "tuning" / "tuned_k100-n8-p06.yaml").read_text())
    studies = [yaml.safe_load((ROOT / "configs" / "studies" / f"ranking_{part}.yaml").read_text())
               for part in ("main", "survey")]
    for study in studies:
        assert {cell: study["methods"][cell] for cell in study["methods"] if cell in tuned["methods"]} == {
            cell: tuned["methods"][cell] for cell in study["methods"] if cell in tuned["methods"]}
        assert (study["report"]["baseline"], study["report"]["oracle"]) == (tuned["report"]["baseline"],
                                                                           tuned["report"]["oracle"])
    assert set(tuned["methods"]) <= set(studies[0]["methods"]) | set(studies[1]["methods"])
    assert set(studies[1]["methods"]) - set(tuned["methods"]) == {"srpo@paper"}
    assert set(studies[0]["methods"]) <= set(tuned["methods"])
    controls = {**studies[0]["report"]["step_size_controls"], **studies[1]["report"]["step_size_controls"]}
    assert {cell: controls[cell] for cell in controls if cell != "srpo@paper"} == tuned["report"]["step_size_controls"]
