"""The command line: `credo methods` and `credo demo`."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from credo.cli import app
from credo.demo import credit_table
from credo.methods import METHODS


def test_methods_lists_every_method_with_its_paper():
    result = CliRunner().invoke(app, ["methods"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in METHODS:
        assert name in result.output
        assert METHODS.get(name).paper in result.output


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
    p_trace = table.methods.index("p_trace")
    assert (table.later_minibatch[p_trace] - table.later_minibatch[grpo]).abs().max() > 1e-3
