"""``tiankong cascade eval``: the accuracy-vs-escalation curve of a small/large model pair on labelled data."""

from __future__ import annotations

import click

from . import TiankongGroup, emit_json, parse_labels


@click.group(cls=TiankongGroup)
def cascade() -> None:
    """Confidence cascade: measure when a small model's answer is enough and when to escalate."""


@cascade.command("eval")
@click.option("--data", required=True, help='JSONL file of {"text", "label"} records.')
@click.option("--small", required=True, help="The model answering first (its confidence decides escalation).")
@click.option("--large", required=True, help="The model escalated to (the same as --small: a flat curve).")
@click.option("--task", type=click.Choice(["classify"]), default="classify", show_default=True,
              help="The decision task (zero-shot classify over the labels).")
@click.option("--labels", "label_list", default=None, help="Comma-separated labels (default: the data's labels).")
@click.option("--target", type=float, default=0.95, show_default=True,
              help="Choose the fewest escalations reaching this fraction of always-large accuracy.")
@click.option("--plot", "plot_path", default=None, help="Write the curve as a PNG here.")
@click.option("--markdown", "markdown_path", default=None, help="Write the summary and table as Markdown here.")
@click.option("--items", is_flag=True, help="With --json: every record's answers and confidences too.")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def eval_cmd(data: str, small: str, large: str, task: str, label_list: str | None, target: float,
             plot_path: str | None, markdown_path: str | None, items: bool, llama_server: str | None,
             as_json: bool) -> None:
    """Run --small and --large on labelled records; print the cascade curve and the threshold to use.

    An item escalates when the small model's confidence (its top label's calibrated probability) is below the
    threshold. The chosen threshold is what `tiankong route --threshold` takes (printed as a command).
    """
    from pathlib import Path

    from ..cascade import cascade_eval
    from ..cascade.report import markdown_table, plot, summary

    result = cascade_eval(data, small, large, task=task, labels=parse_labels(label_list), target=target,
                          llama_server=llama_server, log=lambda line: click.echo(line, err=True))
    curve = result.curve
    title = f"{Path(data).name}: {small} -> {large} (n={curve.n})"
    if plot_path:
        plot(curve, plot_path, title)
    text = f"{summary(curve, small, large)}\n\n{markdown_table(curve)}\n"
    if markdown_path:
        try:
            Path(markdown_path).write_text(f"# {title}\n\n{text}", encoding="utf-8")
        except OSError as exc:
            from ..errors import ConfigError

            raise ConfigError(f"cannot write {markdown_path}: {exc.strerror}",
                              hint="choose a writable --markdown path") from None
    if small == large:
        click.echo("warning: --small and --large are the same model: the curve is flat, escalating buys nothing",
                   err=True)
    if as_json:
        emit_json(result.to_json(items=items))
        return
    click.echo(text)
    click.echo(f"use: {result.to_json()['route']['command']}")
