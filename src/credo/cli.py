"""The `credo` command line (typer + rich)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from credo.methods import METHODS, settings

app = typer.Typer(
    help="credo: credit assignment for RL with verifiable rewards on language models.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.command()
def methods() -> None:
    """List the methods: family, paper, what each changes with respect to GRPO, and its defaults."""
    table = Table(title="credo methods", show_lines=True)
    for column in ("method", "family", "paper (arXiv)", "what it changes vs GRPO", "defaults"):
        table.add_column(column, overflow="fold")
    for name in METHODS:
        m = METHODS.get(name)
        sampler = m.sampler + (f" (localiser: {m.localiser})" if m.localiser else "")
        defaults = f"sampler: {sampler}\ncredit: {settings(m.estimator)}\nloss: {settings(m.loss)}"
        table.add_row(name, m.family, m.paper, m.changes, defaults)
    console.print(table)


@app.command()
def demo(
    drift: float = typer.Option(0.15, help="Std of the per-token log-prob change by the later mini-batch."),
) -> None:
    """Per-token credit each method gives to the responses of one toy group (see credo.demo)."""
    from credo.demo import PREFIX, REWARDS, TOKENS, credit_table

    result = credit_table(drift)
    console.print(
        f"[bold]One prompt, {len(REWARDS)} responses of {TOKENS} tokens, rewards {list(REWARDS)}.[/bold]\n"
        "Credit of a token = -B * dLoss/dlogp: how hard the update pushes its log-prob up (+) or down (-).\n"
        f"Reset methods: the rows continue a failed seed's first {PREFIX} tokens (prefix gets no credit).\n"
        "IBPO: row 1 is repairable (2 of 3 revisions verify) and only its edited tokens 4-5 train."
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
