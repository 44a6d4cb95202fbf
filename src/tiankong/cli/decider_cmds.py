"""``tiankong tune classify|rerank|dedupe`` and ``tiankong deciders list|show|rm``."""

from __future__ import annotations

from typing import Any

import click

from ..deciders import list_deciders, load_decider, remove_decider
from ..tuning import tune_classify
from . import emit_json, emit_table, split_list


@click.group()
def tune() -> None:
    """Learn a decision from labelled examples (cross-validated; the best method is registered)."""


@tune.command("classify")
@click.option("--data", "data", required=True, help="Labelled examples: JSONL or CSV with text,label (≥ 10 per label).")
@click.option("--name", required=True, help="Register the decider under this name (a new version each time).")
@click.option("--model", default=None, help="Tune on this model (an engine is started with embeddings on).")
@click.option("--url", default=None, help="Use a running llama-server started with --embeddings --pooling none.")
@click.option("--labels", default=None, help="Comma-separated labels the data must use (default: those found).")
@click.option("--methods", default=None, help="Comma-separated methods (default: tfidf, probe-part, "
              "probe-mean, probe-last, zeroshot, fewshot, stack); also tfidf-rules, setfit (a contrastive "
              "fine-tune of the embedding part per fold, no chat engine: needs the [retrieval] extra, 1-2 minutes "
              "per fold on 2 cores), and lora (a LoRA fine-tune per fold: needs the [lora] extra, minutes per "
              "fold on a CPU).")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Stratified cross-validation folds (2 or more).")
@click.option("--describe", multiple=True, metavar="LABEL=TEXT", help="Words for a label in prompts (repeat).")
@click.option("--no-engine", is_flag=True, help="Score only methods that need no chat engine (tfidf, "
              "probe-part by default; tfidf-rules, setfit when named in --methods).")
@click.option("--dry-run", is_flag=True, help="Print the CV table without registering the decider.")
@click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary.")
@click.option("--json", "as_json", is_flag=True, help="Print the CV report as JSON.")
def tune_classify_cmd(data: str, name: str, model: str | None, url: str | None, labels: str | None,
                      methods: str | None, folds: int, describe: tuple[str, ...], no_engine: bool, dry_run: bool,
                      llama_server: str | None, as_json: bool) -> None:
    """Tune a classify decider from labelled examples and print the CV table."""
    from ..models import DEFAULT_MODEL

    # each was dropped without a word: the engine options with --no-engine, --model beside --url (the server's)
    if no_engine and (given := [f for f, v in (("--model", model), ("--url", url), ("--llama-server", llama_server))
                                if v]):
        raise click.UsageError(f"--no-engine and {', '.join(given)}: give one of them")
    if url and (model or llama_server):
        raise click.UsageError("--url uses a running server (its model): leave out --model and --llama-server")
    chosen_model = None if (no_engine or url) else (model or DEFAULT_MODEL)
    if bad := [d for d in describe if "=" not in d or not d.split("=", 1)[1].strip()]:
        raise click.UsageError(f"--describe {bad[0]!r}: give LABEL=words (e.g. --describe 'spam=unwanted ads')")
    wanted = [x.strip() for x in methods.split(",") if x.strip()] if methods is not None else None
    if wanted == []:  # "" ran every default method, engine ones included
        raise click.UsageError("--methods is empty: name one or more methods, or leave it out for the defaults")
    if no_engine:  # the engine methods were listed as skipped "(pass --model or --url)" although none was wanted
        from ..tuning import DEFAULT_METHODS, ENGINE_FREE
        from ..tuning.report import PASSES

        if wanted is None:
            wanted = [m for m in DEFAULT_METHODS if m in ENGINE_FREE]
        elif engine_methods := [m for m in wanted if m in PASSES and m not in ENGINE_FREE]:  # unknown: the library's
            raise click.UsageError(f"--no-engine with --methods {','.join(engine_methods)}, which need a chat engine: "
                                   f"leave out --no-engine, or name only {', '.join(ENGINE_FREE)}")
    report = tune_classify(data, name=name, model=chosen_model, url=None if no_engine else url,
                           labels=split_list(labels) if labels else None,
                           methods=wanted,
                           folds=folds, descriptions=dict(d.split("=", 1) for d in describe) or None,
                           save=not dry_run, llama_server=llama_server,
                           log=lambda msg: click.echo(msg, err=True))
    if report.warning:
        click.echo(f"warning: {report.warning}", err=True)
    render_tune(report, as_json, dry_run, f"tiankong classify --decider {report.name} TEXT")


@tune.command("rerank")
@click.option("--data", "data", required=True, help="Labelled rows: JSONL or CSV with query,passage,relevant "
              "(0/1 or a grade; several passages per query, some relevant and some not; ≥ 6 queries); an optional "
              "qid column keeps one candidate list per id.")
@click.option("--name", required=True, help="Register the decider under this name (a new version each time).")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Folds by query, 2 or more (repeated with 3 seeds).")
@click.option("--method", type=click.Choice(["bm25", "embedding", "rrf", "lr-fusion"]), default=None,
              help="Register this method instead of the one the one-standard-error rule picks.")
@click.option("--dry-run", is_flag=True, help="Print the CV table without registering the decider.")
@click.option("--json", "as_json", is_flag=True, help="Print the CV report as JSON.")
def tune_rerank_cmd(data: str, name: str, folds: int, method: str | None, dry_run: bool, as_json: bool) -> None:
    """Learn how to combine BM25 and the embedding part from labelled (query, passage, relevant) rows."""
    from ..tuning.rerank import tune_rerank

    report = tune_rerank(data, name=name, folds=folds, save=not dry_run, method=method,
                         log=lambda msg: click.echo(msg, err=True))
    render_tune(report, as_json, dry_run, f"tiankong rerank --decider {report.name} QUERY -d …")


@tune.command("dedupe")
@click.option("--data", "data", required=True, help="Labelled pairs: JSONL or CSV with a,b,label (label same or "
              "different; ≥ 10 of each).")
@click.option("--name", required=True, help="Register the decider under this name (a new version each time).")
@click.option("--model", default=None, help="Also score the methods that read this chat model (a decider that "
              "needs it cannot serve `tiankong dedupe`, which starts no chat engine).")
@click.option("--url", default=None, help="Use a running llama-server started with --embeddings --pooling none.")
@click.option("--methods", default=None, help="Comma-separated methods (default: tfidf, probe-part, probe-pair; "
              "with --model or --url: every classify method).")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Stratified cross-validation folds (2 or more).")
@click.option("--dry-run", is_flag=True, help="Print the CV table without registering the decider.")
@click.option("--json", "as_json", is_flag=True, help="Print the CV report as JSON.")
def tune_dedupe_cmd(data: str, name: str, model: str | None, url: str | None, methods: str | None, folds: int,
                    dry_run: bool, as_json: bool) -> None:
    """Learn which uncertain pairs are duplicates from labelled (a, b, same/different) pairs."""
    from ..tuning.dedupe import tune_dedupe

    if methods is not None and not [x for x in methods.split(",") if x.strip()]:  # "" ran the defaults
        raise click.UsageError("--methods is empty: name one or more methods, or leave it out for the defaults")
    if url and model:
        raise click.UsageError("--url uses a running server (its model): leave out --model")
    report = tune_dedupe(data, name=name, model=model, url=url, folds=folds, save=not dry_run,
                         methods=[x.strip() for x in methods.split(",") if x.strip()] if methods else None,
                         log=lambda msg: click.echo(msg, err=True))
    if report.warning:
        click.echo(f"warning: {report.warning}", err=True)
    render_tune(report, as_json, dry_run, f"tiankong dedupe --decider {report.name} --input IN --output OUT")


def render_tune(report: Any, as_json: bool, dry_run: bool, usage: str) -> None:
    """A tune report as JSON or its CV table, and how to use the registered decider."""
    if as_json:
        emit_json(report.to_json())
        return
    click.echo(report.table())
    if report.decider is not None and not dry_run:
        click.echo(f"registered decider {report.decider.ref} ({report.chosen}); use it: {usage}")


@click.group()
def deciders() -> None:
    """Registered deciders (made by `tiankong tune`) and the built-in ones."""


@deciders.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> None:
    """Name, labels, method and CV accuracy of every decider."""
    def broken(name: str, exc: Exception) -> None:
        click.echo(f"warning: {exc} — remove it with `tiankong deciders rm {name}`", err=True)

    found = [d.summary() for d in list_deciders(broken)]
    if as_json:
        emit_json(found)
        return
    emit_table(["name", "method", "cv accuracy", "labels", "base model", "source"], [
        [f"{row['name']}@{row['version']}", str(row["method"]),
         "-" if row["cv_accuracy"] is None else f"{row['cv_accuracy']:.3f}", ", ".join(row["labels"]),
         str(row["base_model"] or "(no engine)"), str(row["source"])] for row in found], wrap="labels")


@deciders.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(name: str, as_json: bool) -> None:
    """A decider's record: method, labels, base model, examples, CV results (not its weights)."""
    found = load_decider(name)
    data = {k: v for k, v in found.to_json().items() if k != "state"} | {"source": found.source}
    if as_json:
        emit_json(data)
        return
    summary = found.summary()
    click.echo(f"{found.ref}: {found.method} over {', '.join(found.labels)} (source {found.source})")
    click.echo(f"base model: {summary['base_model'] or '(none: runs without an engine)'}")
    click.echo(f"examples: {found.examples.get('n')} (sha256 {str(found.examples.get('sha256', ''))[:12]}…)")
    for row in found.cv.get("results", []):
        click.echo(f"  {row['method']:<11} {row['size']:>5} acc {row['accuracy']:.3f}  F1 {row['macro_f1']:.3f}  "
                   f"ECE {row['ece']:.3f}")
    for row in found.cv.get("rows", []):  # a rerank decider's rows (its folds are queries): nDCG@10 ± its SE
        chosen = "  ← chosen" if row.get("method") == found.method else ""
        click.echo(f"  {row['method']:<11} nDCG@10 {row['ndcg@10']:.3f} ± {row['se']:.3f}{chosen}")
    if found.task == "rerank" and found.cv.get("rule"):
        click.echo(f"chosen by: {found.cv['rule']} ({found.cv.get('folds')} folds of queries)")


@deciders.command("rm")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def rm_cmd(name: str, as_json: bool) -> None:
    """Remove every registered version of NAME (and the fine-tuned part or adapter only it reads)."""
    removed = remove_decider(name)
    versions = [p for p in removed if p.suffix == ".json"]  # the rest: the parts' model / adapter files
    parts = [str(p) for p in removed if p.suffix != ".json"]
    if as_json:
        emit_json({"name": name, "removed": [str(p) for p in versions], "parts": parts})
    else:
        also = f" and its parts {', '.join(parts)}" if parts else ""
        click.echo(f"removed {name} ({len(versions)} version(s)){also}")
