"""A plan's predictions judged by their rules: rows, bold failures, and the count of each outcome."""

from credo.study.predictions import Prediction, judged


def _fixed(measured: str, outcome: str):
    return lambda results: (measured, outcome)


def test_judged_gives_a_row_per_prediction_and_counts_every_outcome():
    predictions = [Prediction("a", "gains", "share > 0", _fixed("0.3", "held")),
                   Prediction("b", "little", "share < 0.2", _fixed("0.5", "failed")),
                   Prediction("c", "little", "share < 0.2", _fixed("–", "not decided (no room)")),
                   Prediction("d", "little", "share < 0.2", _fixed("–", "not decided (no room)"))]
    rows, counted = judged(predictions, results=None)
    assert rows == [("`a`", "gains", "share > 0", "0.3", "held"),
                    ("`b`", "little", "share < 0.2", "0.5", "**failed**"),
                    ("`c`", "little", "share < 0.2", "–", "not decided (no room)"),
                    ("`d`", "little", "share < 0.2", "–", "not decided (no room)")]
    assert counted == "1 held, 1 failed, 2 not decided (no room)"


def test_judged_names_held_and_failed_even_when_none_did():
    rows, counted = judged([Prediction("a", "x", "y", _fixed("–", "not decided"))], results=None)
    assert counted == "0 held, 0 failed, 1 not decided"


def test_each_judge_sees_the_results_it_is_given():
    seen = []
    judged([Prediction("a", "x", "y", lambda r: (seen.append(r) or "m", "held"))], results={"study": 1})
    assert seen == [{"study": 1}]
