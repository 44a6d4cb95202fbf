"""``tiankong cascade eval``: the accuracy-vs-escalation curve of a small/large pair on labelled data, and the
chosen threshold written where route and deciders read it (``--write``)."""

from __future__ import annotations

import click

from . import TiankongGroup, emit_json, parse_labels


@click.group(cls=TiankongGroup)
def cascade() -> None:
    """Confidence cascade: measure when a small model's answer is enough and when to escalate."""


@cascade.command("eval")
@click.option("--data", required=True, help='JSONL file of {"text", "label"} records (route: label = route name).')
@click.option("--small", default=None, help="The model answering first (its confidence decides escalation); with "
              "--decider, the decider's engine model (default: its base model).")
@click.option("--large", default=None, help="The model escalated to (the same as --small: a flat curve); with "
              "--large-decider, its engine model (default: its base model).")
@click.option("--large-decider", "large_decider", default=None, help="The large side is this tuned decider.")
@click.option("--large-url", "large_url", default=None, help="The large model is served here (an OpenAI-compatible "
              "upstream, e.g. another tiankong gateway).")
@click.option("--task", type=click.Choice(["classify", "route", "guard", "extract"]), default="classify",
              show_default=True, help="classify: zero-shot over the labels (or the decider's); route: route's local "
              "decision over --routes; guard: the guard's calibrated score (records labelled attack / benign); "
              "extract: JSON against --schema (records {text, expected}), confidence the share of values in the text.")
@click.option("--schema", "schema_file", default=None, help="--task extract: a JSON Schema file.")
@click.option("--routes", "routes_file", default=None, help="--task route: JSON file [{name, description, target}, …].")
@click.option("--decider", default=None, help="The small side is this tuned decider (`tiankong deciders list`).")
@click.option("--labels", "label_list", default=None, help="Comma-separated labels (default: the data's labels).")
@click.option("--target", type=float, default=0.95, show_default=True,
              help="Choose the fewest escalations reaching this fraction of always-large accuracy.")
@click.option("--write", "write", is_flag=True, help="Write the chosen threshold: into [route] threshold of the "
              "config file (a model), or into the decider's entry (--decider).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="With --write: this config file (default: TIANKONG_CONFIG, else config.toml in the user config "
              "dir — the one `tiankong serve` reads).")
@click.option("--plot", "plot_path", default=None, help="Write the curve as a PNG here.")
@click.option("--markdown", "markdown_path", default=None, help="Write the summary and table as Markdown here.")
@click.option("--items", is_flag=True, help="With --json: every record's answers and confidences too.")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def eval_cmd(data: str, small: str | None, large: str | None, large_decider: str | None, large_url: str | None,
             task: str, schema_file: str | None, routes_file: str | None, decider: str | None,
             label_list: str | None, target: float, write: bool, config_file: str | None, plot_path: str | None,
             markdown_path: str | None, items: bool, llama_server: str | None, as_json: bool) -> None:
    """Run the small side and --large on labelled records; print the cascade curve and the threshold to use.

    An item escalates when the small side's confidence (its top label's calibrated probability) is below the
    threshold. --write puts the chosen threshold where `tiankong route`, the library's route and the gateway's
    /v1/tasks/route read it when a request names none (a decider's: also classify's abstain threshold).
    """
    from pathlib import Path

    from .. import paths
    from ..cascade import cascade_eval
    from ..cascade.report import markdown_table, plot, summary
    from ..errors import ConfigError

    if small is None and decider is None and task != "guard":
        raise click.UsageError("give --small MODEL (or --decider NAME)")
    if large is None and large_decider is None:
        raise click.UsageError("give --large MODEL (or --large-decider NAME)")
    if large_url is not None and (large is None or large_decider is not None):
        raise click.UsageError("--large-url serves the --large model: give --large MODEL, without --large-decider")
    if write and task in ("guard", "extract"):
        raise click.UsageError(f"--write is for classify and route ({task} has no escalation threshold setting)")
    if config_file is not None and not write:
        raise click.UsageError("--config says where --write writes: add --write")
    if config_file is not None and decider is not None:
        raise click.UsageError("--config is for a model's threshold; a decider's is written into its entry")
    if items and not as_json:
        raise click.UsageError("--items adds every record's answers to --json: add --json")
    if plot_path and not plot_path.lower().endswith(".png"):
        raise click.UsageError(f"--plot {plot_path} must end in .png")
    paths.check_distinct({"--plot": plot_path, "--markdown": markdown_path},
                         {"--data": data, "--schema": schema_file, "--routes": routes_file, "--config": config_file})
    for path, what in ((plot_path, "--plot"), (markdown_path, "--markdown")):  # before both sides run, not after
        if path:
            paths.check_output(path, what)
    if write:
        from ..cascade.write import check_writable

        check_writable(decider, config_file)
    result = cascade_eval(data, small, large, task=task, labels=parse_labels(label_list), target=target,
                          routes=routes_file, decider=decider, large_decider=large_decider, large_url=large_url,
                          schema=schema_file, llama_server=llama_server,
                          log=lambda line: click.echo(line, err=True))
    curve = result.curve
    title = f"{Path(data).name}: {result.small} -> {result.large} (n={curve.n})"
    if plot_path:
        plot(curve, plot_path, title)
    text = f"{summary(curve, result.small, result.large)}\n\n{markdown_table(curve)}\n"
    if markdown_path:
        try:
            Path(markdown_path).write_text(f"# {title}\n\n{text}", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {markdown_path}: {exc.strerror}",
                              hint="choose a writable --markdown path") from None
    if result.small == result.large:
        same = "decider" if result.decider else "model"
        click.echo(f"warning: the small and large sides are the same {same}: the curve is flat, escalating buys "
                   "nothing", err=True)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    written = None
    if write:
        from ..cascade.write import write_threshold

        written = write_threshold(result, data, config_file)
        click.echo(written, err=True)
    if as_json:
        emit_json({**result.to_json(items=items), "written": written})
        return
    click.echo(text)
    if result.command is None:  # guard and extract: a threshold for the caller's own use, no route command
        click.echo(f"threshold: {result.route_threshold:.6g} (escalate below it)")
    else:
        click.echo(f"use: {result.command}" if not written else f"route uses it by default now; explicitly: "
                   f"{result.command}")
