"""Study figures people can read: a colour and line style per method (a hue per family), the legend outside
the axes and on the image even for 27 methods, the tokens panel cut at the compared budget, y fitted."""

from __future__ import annotations

import pytest

from credo.methods import FAMILIES
from credo.plots import FAMILY_COLOURS, FAMILY_NAMES, method_family, method_styles
from credo.study import figures as study_figures

TUNING = ["grpo", "grpo@lr=2e-4", "grpo_4mb", "grpo_4mb@lr=5e-5", "dapo", "dapo@lr=2e-4", "gspo", "gspo@lr=1e-4",
          "grpo_lambda", "grpo_lambda@lam=0.9", "grpo_lambda@lr=5e-5", "p_trace", "p_trace@lam=0.9", "p_trace@lr=5e-5",
          "s_trace", "s_trace@keep_frac=0.5", "s_trace@lr=5e-5", "rrpo", "rrpo@lr=2e-4", "srpo", "srpo@lr=2e-4",
          "srpo_oracle", "srpo_oracle@lr=2e-4", "ibpo", "ibpo@lr=1e-4", "oracle_blame", "oracle_blame@lr=2e-4"]
"""The labels of the committed tuning study (docs/results/testbed-hard-tuning)."""


def test_labels_name_their_family_and_every_method_looks_different():
    assert [method_family(x) for x in ("p_trace@decay=0.9", "grpo_4mb", "grpo_lambda_recent", "ibpo_paper_clip",
                                       "srpo_oracle", "gtpo", "oracle_blame@lr=2e-4", "better")] == [
        "trace", "baseline", "trace", "revision", "reset", "token", "oracle", None]
    styles = method_styles(TUNING)
    assert len({(s.colour, s.linestyle) for s in styles.values()}) == len(TUNING)
    assert len({s.colour for s in styles.values()}) == len(TUNING)  # colours alone tell them apart too
    for family, hue in FAMILY_COLOURS.items():
        members = [label for label, s in styles.items() if s.family == family]
        assert all(method_family(label) == family for label in members)
        if len(members) == 1:
            assert styles[members[0]].colour == hue
    assert list(styles)[:8] == TUNING[:8] and list(styles)[-2:] == ["oracle_blame", "oracle_blame@lr=2e-4"]
    unknown = method_styles(["a", "b", "c"])  # no registered method: a qualitative palette, not greys
    assert len({s.colour for s in unknown.values()}) == 3 and all(s.family is None for s in unknown.values())


def test_every_family_of_the_registry_has_a_hue_and_its_name():
    # A family added to credo.methods.FAMILIES without a colour here would fail when a study draws it.
    assert list(FAMILY_COLOURS) == list(FAMILIES) == list(FAMILY_NAMES)


def curves_for(labels: list[str], budget: float) -> dict:
    """Mean curves ending at different token counts: each method's area, some beyond the budget."""
    out = {}
    for i, label in enumerate(labels):
        end = budget * (1 + i % 4)
        ys = [0.1 + 0.01 * i * k / 4 for k in range(5)]
        out[label] = {axis: {"x": [scale * k / 4 for k in range(5)], "mean": ys, "low": [None] * 5, "high": [None] * 5,
                             "seeds": 1} for axis, scale in (("step", 40), ("rollout_tokens", end), ("wall_s", 30))}
    return out


@pytest.mark.parametrize("labels", [TUNING, ["grpo", "oracle_blame", "better"]])
def test_the_legend_stays_on_the_image_and_the_axes_fit_the_compared_data(labels, tmp_path, monkeypatch):
    figures = []
    save = study_figures.save_figure

    def keep(fig, path, **kwargs):
        fig.canvas.draw()
        frame = fig.bbox
        legend = fig.legends[0].get_window_extent()
        figures.append({"legend": legend, "frame": frame, "axes": [ax.get_window_extent() for ax in fig.axes],
                        "xlim": [ax.get_xlim() for ax in fig.axes], "ylim": fig.axes[0].get_ylim(),
                        "texts": [t.get_text() for t in fig.legends[0].get_texts()]})
        return save(fig, path, **kwargs)

    monkeypatch.setattr(study_figures, "save_figure", keep)
    budget = 1000.0
    path = study_figures.plot_curves(curves_for(labels, budget), "greedy_pass@1", tmp_path / "curves.png", "study", budget=budget)
    assert path.stat().st_size > 5000
    seen = figures[0]
    legend, frame = seen["legend"], seen["frame"]
    assert frame.x0 <= legend.x0 and legend.x1 <= frame.x1 and frame.y0 <= legend.y0 and legend.y1 <= frame.y1
    assert all(legend.y1 <= ax.y0 for ax in seen["axes"])  # below the panels, over none of them
    assert sorted(seen["texts"]) == sorted(labels)
    assert seen["xlim"][1] == (0.0, budget)  # the tokens panel ends at the compared budget
    top = 0.1 + 0.01 * (len(labels) - 1)  # the highest mean (the steps panel shows every curve whole)
    low, high = seen["ylim"]
    assert 0.05 <= low < 0.1 and top <= high < top + 0.05  # fitted to the data, not 0-1
