"""Task verbs: classify, route, rewrite, rerank, redact, guard, compress, summarize, tag.

Each parses its arguments, calls the ``Client`` method of the same name and renders the result (``--json``:
the same JSON the gateway's ``/v1/tasks/<task>`` returns).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..deciders.registry import load_decider
from ..errors import ConfigError
from ..models import DEFAULT_MODEL
from ..structured.drivers import run_sync
from ..tasks.classify import decide_flow, decider_labels
from ..tasks.guard import guard_flow
from ..tasks.redact import redact_flow
from . import emit_json, parse_labels
from .run_cmds import API_KEY_OPTION, _client
from .spec_options import spec_option

if TYPE_CHECKING:
    from ..api import Client

_options = [
    click.option("--model", default=None, help=f"Model (default: TIANKONG_MODEL, else {DEFAULT_MODEL}; embedded "
                 "engine)."),
    click.option("--url", default=None, help="Use a running server instead (or TIANKONG_URL)."),
    click.option("--llama-server", "llama_server", default=None, help="Use this llama-server binary."),
    click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON."),
    API_KEY_OPTION,
]


def task_options(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_options):
        func = option(func)
    return func


def read_text(text: str | None, file: str | None = None) -> str:
    """TEXT, or --file, or stdin ('-' or absent); bytes must be UTF-8."""
    if file:
        data = _read_bytes(file)
    elif text not in (None, "-"):
        return str(text)
    elif sys.stdin.isatty():
        raise click.UsageError("give TEXT, --file, or pipe the text on stdin")
    else:
        data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the input is not valid UTF-8 (byte {exc.start})",
                          hint="convert it first, e.g. `iconv -f GBK -t UTF-8`") from None


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def read_json(path: str) -> Any:
    try:
        return json.loads(_read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None


def client_for(model: str | None, url: str | None, llama_server: str | None, decider: str | None = None) -> Client:
    """A client for the task; with a decider, its engine runs the decider's model (unless ``model`` says another)
    with what the decider reads: embeddings, its LoRA adapter."""
    if not decider:
        return _client(model, url, llama_server)
    from ..deciders import engine_needs, load_decider

    needs = engine_needs(load_decider(decider))
    return _client(model or needs.model, url, llama_server, embeddings=needs.embeddings, adapters=needs.adapters)


def render(result: Any, as_json: bool, line: Callable[[Any], str]) -> None:
    if as_json:
        emit_json(result.to_json() if hasattr(result, "to_json") else result)
    else:
        click.echo(line(result))


def _scores(scores: dict[str, float]) -> str:
    return "  ".join(f"{label}={p:.3f}" for label, p in scores.items())


@click.command()
@click.argument("text", required=False)
@click.option("--labels", "label_list", default=None, help="Comma-separated labels, e.g. spam,ham.")
@click.option("-l", "--label", "labels", multiple=True, help="A label (repeat; or use --labels a,b).")
@click.option("--decider", default=None, help="Answer with this tuned decider (`tiankong deciders list`).")
@click.option("--describe", multiple=True, metavar="LABEL=TEXT", help="Describe a label (repeat).")
@click.option("--examples", "examples_file", default=None, help="JSON file: [{text, label}, …] few-shot examples.")
@spec_option("classify", "instructions", "--instructions")
@spec_option("classify", "multi_label", "--multi-label")
@spec_option("classify", "threshold", "--threshold")
@spec_option("classify", "calibrate", "--calibrate/--no-calibrate")
@task_options
def classify(text: str | None, label_list: str | None, labels: tuple[str, ...], decider: str | None,
             describe: tuple[str, ...], examples_file: str | None, instructions: str | None, multi_label: bool,
             threshold: float | None, calibrate: bool | None, model: str | None, url: str | None,
             llama_server: str | None, as_json: bool) -> None:
    """Classify TEXT into one (or, with --multi-label, several) of the labels, with probabilities."""
    names = parse_labels(label_list, labels) or []
    if not names and not decider:
        raise click.UsageError("give --labels a,b (or -l a -l b), or --decider NAME")
    descriptions = dict(d.split("=", 1) for d in describe if "=" in d) or None
    examples = read_json(examples_file) if examples_file else None
    body = read_text(text)
    if decider and not url and not os.environ.get("TIANKONG_URL") and not _decider_needs_engine(decider):
        found = load_decider(decider)  # an engine-free decider (tf-idf): no engine is started
        decider_labels(found.labels, names or None, found.ref)
        result = run_sync(decide_flow(found, body, threshold=threshold), lambda *a: None)
    else:
        with client_for(model, url, llama_server, decider) as client:
            result = client.classify(body, names or None, decider=decider, descriptions=descriptions,
                                     examples=examples, instructions=instructions, multi_label=multi_label,
                                     threshold=threshold, calibrate=calibrate)
    if result.warning:
        click.echo(f"warning: {result.warning}", err=True)
    render(result, as_json, lambda r: f"{','.join(r.labels) or '(abstain)'}\t{_scores(r.scores)}")


@click.command()
@click.argument("text", required=False)
@click.option("--routes", "routes_file", required=True, help="JSON file: [{name, description, target}, …].")
@spec_option("route", "threshold", "--threshold")
@spec_option("route", "redline", "--no-redline", help="Do not escalate red-line requests (maths, reasoning, …).")
@spec_option("route", "escalate_target", "--escalate-target")
@click.option("--upstream-url", default=None, help="Send escalated requests to this OpenAI-compatible server.")
@click.option("--upstream-key-env", default=None, help="Environment variable holding the upstream's API key.")
@click.option("--upstream-model", default=None, help="Model name at the upstream.")
@click.option("--no-redact", is_flag=True, help="Send escalated text to the upstream without PII redaction.")
@spec_option("route", "decider", "--decider")
@task_options
def route(text: str | None, routes_file: str, threshold: float, redline: bool, escalate_target: str,
          upstream_url: str | None, upstream_key_env: str | None, upstream_model: str | None, no_redact: bool,
          decider: str | None, model: str | None, url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Route TEXT to one of the routes, or escalate it (and, with --upstream-url, answer it there)."""
    routes = read_json(routes_file)
    body = read_text(text)
    upstream = ({"url": upstream_url, "api_key_env": upstream_key_env, "model": upstream_model,
                 "redact": not no_redact} if upstream_url else None)
    with client_for(model, url, llama_server, decider) as client:
        result = client.route(body, routes, threshold=threshold, redline=redline, escalate_target=escalate_target,
                              upstream=upstream, decider=decider)
    render(result, as_json, lambda r: f"{r.route}\t{r.target}\t{'escalate' if r.escalated else 'local'}\t"
                                      f"{r.confidence:.3f}\t{r.reason}")


@click.command()
@click.argument("query", required=False)
@spec_option("rewrite", "mode", "--mode")
@spec_option("rewrite", "n", "-n")
@task_options
def rewrite(query: str | None, mode: str, n: int, model: str | None, url: str | None, llama_server: str | None,
            as_json: bool) -> None:
    """Rewrite QUERY for retrieval (and/or write a hypothetical answer passage)."""
    body = read_text(query)
    with client_for(model, url, llama_server) as client:
        result = client.rewrite(body, mode=mode, n=n)
    render(result, as_json, lambda r: "\n".join([*r.queries, *([r.hypothetical] if r.hypothetical else [])]))


@click.command()
@click.argument("query")
@click.option("-d", "--doc", "docs", multiple=True, help="A candidate text (repeat).")
@click.option("--docs", "docs_file", default=None, help="File with one candidate per line.")
@spec_option("rerank", "top_n", "--top-n")
@spec_option("rerank", "top_k", "--top-k")
@spec_option("rerank", "mode", "--mode")
@spec_option("rerank", "decider", "--decider")
@task_options
def rerank(query: str, docs: tuple[str, ...], docs_file: str | None, top_n: int | None, top_k: int | None,
           mode: str, decider: str | None, model: str | None, url: str | None, llama_server: str | None,
           as_json: bool) -> None:
    """Rank candidates against QUERY (BM25 + embedding, fused); print the best first."""
    candidates = list(docs)
    if docs_file:
        candidates += [line for line in read_text(None, docs_file).splitlines() if line.strip()]
    with client_for(model, url, llama_server) as client:
        result = client.rerank(query, candidates, top_n=top_n, top_k=top_k, mode=mode, decider=decider)
    render(result, as_json, lambda r: "\n".join(f"{x.score:.3f}\t{x.index}\t{x.text[:80]}" for x in r.results))


@click.command()
@click.argument("text", required=False)
@click.option("--file", default=None, help="Read the text from this file.")
@spec_option("redact", "style", "--style")
@spec_option("redact", "use_model", "--no-model", help="Rules only (no names/addresses/organisations).")
@click.option("--type", "types", multiple=True, help="Only these entity types (repeat).")
@spec_option("redact", "salt", "--salt")
@task_options
def redact(text: str | None, file: str | None, style: str, use_model: bool, types: tuple[str, ...], salt: str,
           model: str | None, url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Find and redact PII in TEXT (Chinese and English)."""
    body = read_text(text, file)
    if not use_model and not (url or model):
        result = run_sync(redact_flow(body, style=style, use_model=False, types=list(types) or None, salt=salt),
                          lambda *a: None)
    else:
        with client_for(model, url, llama_server) as client:
            result = client.redact(body, style=style, use_model=use_model, types=list(types) or None, salt=salt)
    render(result, as_json, lambda r: r.text)


@click.command()
@click.argument("text", required=False)
@click.option("--policy", "policies", multiple=True, help="A policy the text must not violate (repeat).")
@spec_option("guard", "decider", "--decider", help="The screening decider.")
@click.option("--no-decider", is_flag=True, help="Heuristics + the chat model only (the old guard).")
@spec_option("guard", "use_model", "--use-model")
@spec_option("guard", "flag_at", "--flag-at")
@spec_option("guard", "block_at", "--block-at")
@task_options
def guard(text: str | None, policies: tuple[str, ...], decider: str, no_decider: bool, use_model: bool,
          flag_at: float | None, block_at: float | None, model: str | None, url: str | None,
          llama_server: str | None, as_json: bool) -> None:
    """Screen TEXT for prompt injection (and policies): allow, flag or block."""
    body = read_text(text)
    chosen = None if no_decider else decider
    if chosen and not policies and not use_model and not url and not _decider_needs_engine(chosen):
        # the shipped guard reads no engine: none is started
        result = run_sync(guard_flow(body, decider=load_decider(chosen), flag_at=flag_at, block_at=block_at),
                          lambda *a: None)
    else:
        with client_for(model, url, llama_server, chosen) as client:
            result = client.guard(body, decider=chosen, flag_at=flag_at, block_at=block_at,
                                  policies=list(policies) or None, use_model=use_model)
    render(result, as_json, lambda r: f"{r.verdict}\t{r.score:.3f}\t{'; '.join(r.reasons)}")
    if result.verdict == "block":
        sys.exit(EXIT_BLOCKED)  # a pipeline step can stop on it (`tiankong guard … && next-step`)


EXIT_BLOCKED = 1  # `tiankong guard` exit status when the verdict is block (flag and allow: 0)


def _decider_needs_engine(ref: str) -> bool:
    from ..deciders import engine_needs

    return engine_needs(load_decider(ref)).engine


@click.command()
@click.argument("text", required=False)
@click.option("--file", default=None, help="Read the text from this file.")
@spec_option("compress", "budget_tokens", "--budget")
@spec_option("compress", "chunk_tokens", "--chunk-tokens")
@spec_option("compress", "question", "--question")
@spec_option("compress", "mode", "--mode")
@task_options
def compress(text: str | None, file: str | None, budget_tokens: int, chunk_tokens: int, question: str | None,
             mode: str, model: str | None, url: str | None, llama_server: str | None, as_json: bool) -> None:
    """The sentences of a long TEXT that matter, within a token budget."""
    body = read_text(text, file)
    with client_for(model, url, llama_server) as client:
        result = client.compress(body, budget_tokens=budget_tokens, chunk_tokens=chunk_tokens, question=question,
                                 mode=mode)
    render(result, as_json, lambda r: "\n".join(f"- {p}" for p in r.points))


@click.command()
@click.argument("text", required=False)
@click.option("--file", default=None, help="Read the text from this file.")
@spec_option("summarize", "words", "--words")
@spec_option("summarize", "chunk_tokens", "--chunk-tokens")
@task_options
def summarize(text: str | None, file: str | None, words: int, chunk_tokens: int, model: str | None,
              url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Summarize TEXT in at most --words words."""
    body = read_text(text, file)
    with client_for(model, url, llama_server) as client:
        result = client.summarize(body, words=words, chunk_tokens=chunk_tokens)
    render(result, as_json, lambda r: r.summary)


@click.command()
@click.argument("text", required=False)
@click.option("--file", default=None, help="Read the text from this file.")
@click.option("--schema", "schema_file", default=None, help="JSON Schema for the metadata (default: keywords, "
              "topic, language).")
@spec_option("tag", "max_keywords", "--max-keywords")
@task_options
def tag(text: str | None, file: str | None, schema_file: str | None, max_keywords: int, model: str | None,
        url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Keywords and metadata for TEXT as JSON."""
    schema = read_json(schema_file) if schema_file else None
    body = read_text(text, file)
    with client_for(model, url, llama_server) as client:
        result = client.tag(body, schema=schema, max_keywords=max_keywords)
    emit_json({"data": result.data, "attempts": result.attempts} if as_json else result.data)


@click.command()
@click.argument("text", required=False)
@click.option("--file", default=None, help="Read the text from this file.")
@click.option("--questions", "questions_file", default=None,
              help="JSON file: [{id, type, question, labels?, schema?}, …] (type: choice, yes_no, score, extract).")
@click.option("--yes-no", "yes_no", multiple=True, help="A yes/no question (repeatable; ids q1, q2, …).")
@task_options
def ask(text: str | None, file: str | None, questions_file: str | None, yes_no: tuple[str, ...], model: str | None,
        url: str | None, llama_server: str | None, as_json: bool) -> None:
    """Answer many questions about TEXT, reading it once."""
    questions = list(read_json(questions_file)) if questions_file else []
    questions += [{"id": f"q{len(questions) + i + 1}", "type": "yes_no", "question": q} for i, q in enumerate(yes_no)]
    body = read_text(text, file)
    with client_for(model, url, llama_server) as client:
        result = client.ask(body, questions)
    render(result, as_json, lambda r: "\n".join(_answer_line(a) for a in r.answers))


def _answer_line(answer: Any) -> str:
    if answer.type == "extract":
        return f"{answer.id}\t{json.dumps(answer.data, ensure_ascii=False)}"
    extra = f"\tP(yes)={answer.probability:.3f}" if answer.probability is not None else \
        f"\tscore={answer.score:.2f}" if answer.score is not None else ""
    return f"{answer.id}\t{answer.label}{extra}\t{_scores(answer.scores or {})}"


COMMANDS = [classify, route, rewrite, rerank, redact, guard, compress, summarize, tag, ask]

#: task arguments the CLI reads under another name (files, repeated flags); every other argument is an option
#: of the same name (``tiankong.cli.spec_options``) — a test holds both to the registry
CLI_NAMES = {
    "classify": {"text": "text", "labels": "labels", "descriptions": "describe", "examples": "examples_file"},
    "route": {"text": "text", "routes": "routes_file"},
    "rewrite": {"query": "query"}, "rerank": {"query": "query", "documents": "docs"},
    "redact": {"text": "text"}, "guard": {"text": "text"}, "compress": {"text": "text"},
    "summarize": {"text": "text"}, "tag": {"text": "text", "schema_": "schema_file"},
    "ask": {"text": "text", "questions": "questions_file"},
}
