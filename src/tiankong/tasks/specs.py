"""The task registry: every pipeline task declared once as a ``TaskSpec``.

A spec names the task, holds a Pydantic model of its arguments (``tasks/args.py``: defaults, limits, help text),
builds its sans-I/O flow from validated arguments and turns the result into JSON. Everything else derives from it:

* ``POST /v1/tasks/<task>`` validates its body with ``spec.args`` (plus ``model``) and runs ``spec.flow``;
* ``GET /openapi.json`` documents those bodies;
* the CLI command ``tiankong <task>`` is made from ``spec.cli`` (``tasks/cli_part.py``; ``tiankong.cli.task_cmds``):
  its inputs, options (defaults, choices and help from the fields) and how the answer reads as a line;
* ``tiankong batch`` runs every ``batchable`` spec over the ``text`` field of each record, with the job's
  ``args`` table parsed by ``spec.args``; ``tiankong eval`` items take the same tasks and ``args``, and the
  scorers read ``answer_text``;
* ``Client``/``AsyncClient`` keep explicit, typed signatures that a test holds to the specs; ``client.task(NAME,
  **args)`` runs any registered task.

Adding a task (docs/tasks.md, "Adding a task"): one module with its arguments model, flow and result type, and one
``TaskSpec`` in ``SPECS`` below (and its docs section; ``make docs`` writes its parameter table). ``tiankong
--help`` reads each command's summary from this file's source (``cli/help_table.py``): keep it a string literal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..deciders.registry import load_decider
from ..dedupe.core import Dedupe, DedupeOptions, Record, dedupe_flow
from ..errors import ConfigError
from ..structured.flow import Flow, Structured
from ..structured.tools import ToolCalls, call_flow, parse_tool_choice, parse_tools
from . import cli_part as c
from . import extract
from .args import (
    MAX_DEDUPE_RECORDS,
    AskArgs,
    CallArgs,
    ClassifyArgs,
    CompressArgs,
    DedupeArgs,
    ExtractArgs,
    GuardArgs,
    RedactArgs,
    RerankArgs,
    RewriteArgs,
    RouteArgs,
    SqlArgs,
    SummarizeArgs,
    TagArgs,
    TaskArgs,
)
from .ask import Answers, Question, ask_flow
from .classify import Classification, classify_flow, decide_flow, decider_labels
from .cli_part import CliInput, CliPart
from .compress import Compression, Summary, compress_flow, summarize_flow
from .guard import GuardVerdict, guard_flow
from .redact import Redaction, redact_flow
from .rerank import Reranking, rerank_flow
from .rewrite import Rewrite, rewrite_flow
from .route import RouteDecision, check_routes, route_flow
from .sentiment import Sentiment, SentimentArgs, sentiment_flow, sentiment_text
from .sql import SqlQuery, schema_from_ddl, sql_flow
from .tag import tag_flow
from .taskspec import HttpPart, TaskSpec, invalid_request

__all__ = ["MAX_DEDUPE_RECORDS", "SPECS", "TASK_SPECS", "TaskArgs", "TaskSpec", "invalid_request"]

def _dedupe(a: DedupeArgs, model: str | None) -> Flow[Dedupe]:
    records = [Record(r.id, r.text, r.model_dump()) for r in a.records]
    options = DedupeOptions(near=a.near, near_low=a.near_low, semantic=a.semantic, semantic_low=a.semantic_low,
                            shingle=a.shingle, keep=a.keep, stages=tuple(a.stages), decider=a.decider, part=a.part)
    return dedupe_flow(records, options)


#: the roles a chat template knows (a `bogus` role or an empty conversation generated text from nothing, as 200)
CONVERSATION_ROLES = ("system", "user", "assistant", "tool")


def _check_conversation(messages: list[Any]) -> None:
    """A conversation for ``call``: objects with a known role, and a user message that says something."""
    example = '[{"role": "user", "content": "What is the weather in Paris?"}]'
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in CONVERSATION_ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise ConfigError(f"text[{i}] must be a message with a role ({', '.join(CONVERSATION_ROLES)}), "
                              f"not {str(role if role is not None else message)[:40]!r}", hint=f"e.g. {example}")
    if not any(m["role"] == "user" and _says_something(m.get("content")) for m in messages):
        raise ConfigError("text has no user message with content", hint=f"pass the request, e.g. {example}")


def _says_something(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and any(isinstance(p, dict) and (p.get("type") != "text"
                                                                       or str(p.get("text", "")).strip())
                                             for p in content)


def _call(a: CallArgs, model: str | None) -> Flow[ToolCalls]:
    tools = parse_tools(a.tools)
    mode, name = parse_tool_choice(a.tool_choice, tools)
    messages = [{"role": "user", "content": a.text}] if isinstance(a.text, str) else a.text
    if isinstance(a.text, str) and not a.text.strip():
        raise ConfigError("text is empty", hint="pass the request the tools should serve")
    if isinstance(a.text, list):
        _check_conversation(a.text)
    return call_flow(messages, tools, tool_choice=mode, function=name, parallel=a.parallel_tool_calls, model=model)


def _sql(a: SqlArgs, model: str | None) -> Flow[SqlQuery]:
    return sql_flow(a.question, schema_from_ddl(a.schema_), dialect=a.dialect, model=model)


def _ask(a: AskArgs, model: str | None) -> Flow[Answers]:
    questions = [Question(q.id, q.type, q.question, q.labels, q.schema_) for q in a.questions]
    return ask_flow(a.text, questions, model=model)


def _classify(a: ClassifyArgs, model: str | None) -> Flow[Classification]:
    if a.decider is not None:
        found = load_decider(a.decider)
        decider_labels(found.labels, a.labels, found.ref)
        return decide_flow(found, a.text, threshold=a.threshold)
    return classify_flow(a.text, a.labels or [], descriptions=a.descriptions, examples=a.examples,
                         instructions=a.instructions, multi_label=a.multi_label,
                         threshold=0.5 if a.threshold is None else a.threshold, calibrate=a.calibrate)


def _route(a: RouteArgs, model: str | None) -> Flow[RouteDecision]:
    return route_flow(a.text, check_routes(a.routes), threshold=a.threshold, redline=a.redline,
                      escalate_target=a.escalate_target, decider=load_decider(a.decider) if a.decider else None)


def _rerank(a: RerankArgs, model: str | None) -> Flow[Reranking]:
    return rerank_flow(a.query, a.documents, top_k=a.top_n if a.top_n is not None else a.top_k, mode=a.mode,
                       decider=load_decider(a.decider) if a.decider else None,
                       model=model)


def _guard(a: GuardArgs, model: str | None) -> Flow[GuardVerdict]:
    return guard_flow(a.text, decider=load_decider(a.decider) if a.decider else None, flag_at=a.flag_at,
                      block_at=a.block_at, policies=a.policies, use_model=a.use_model)




def _tag_json(result: Structured[Any]) -> dict[str, Any]:
    # usage and finish_reason too: a client of the gateway got zeros and None where a local run has them
    return {"data": result.data, "attempts": result.attempts, "finish_reason": result.finish_reason,
            "usage": {"prompt_tokens": result.usage.prompt_tokens, "completion_tokens": result.usage.completion_tokens,
                      "total_tokens": result.usage.total_tokens}}


def _data(answer: dict[str, Any]) -> Any:
    return answer["data"]  # a tag (extract) line holds the metadata (the fields) itself


def _field(key: str) -> Callable[[Any], str | None]:
    return lambda output: output.get(key) if isinstance(output, dict) and isinstance(output.get(key), str) else None


def _queries(output: Any) -> str | None:
    queries = output.get("queries") if isinstance(output, dict) else None
    return "\n".join(str(q) for q in queries) if isinstance(queries, list) else None


TEXT_ARG = c.argument("text")
FILE_TEXT = c.argument("text", file=True)

CLASSIFY: TaskSpec[ClassifyArgs, Classification] = TaskSpec(
    "classify", ClassifyArgs, _classify, "Label(s) with the probability of every label.", batchable=True,
    answer_text=_field("label"), scorer="label", cli=CliPart(
        "Classify TEXT into one (or, with --multi-label, several) of the labels, with probabilities.", (
            TEXT_ARG,
            CliInput("joined", "labels", ("--labels",), dest="label_list", help="Comma-separated labels (the "
                     "full-width ， and 、 separate too), e.g. spam,ham."),
            c.repeat("labels", "-l", "--label", dest="labels", help="A label (repeat; or use --labels a,b).",
                     convert=c.prepend),
            c.option("decider", "--decider", help="Answer with this tuned decider (`tiankong deciders list`)."),
            CliInput("pairs", "descriptions", ("--describe",), dest="describe", metavar="LABEL=TEXT",
                     help="Describe a label (repeat)."),
            c.from_file("json", "examples", "--examples", "examples_file", "JSON file: [{text, label}, …] "
                        "few-shot examples."),
            c.option("instructions", "--instructions"), c.option("multi_label", "--multi-label"),
            c.option("threshold", "--threshold"), c.option("calibrate", "--calibrate/--no-calibrate"),
        ), c.classify_line, engine_decider=True))
ROUTE: TaskSpec[RouteArgs, RouteDecision] = TaskSpec(
    "route", RouteArgs, _route, "A local route, or escalation on low confidence and red-line requests.",
    batchable=True, cli=CliPart(
        "Route TEXT to one of the routes, or escalate it (and, with --upstream-url, answer it there).", (
            TEXT_ARG,
            c.from_file("json", "routes", "--routes", "routes_file", "JSON file: [{name, description, target}, …].",
                        required=True),
            c.option("threshold", "--threshold"),
            c.option("redline", "--no-redline", help="Do not escalate red-line requests (maths, reasoning, …)."),
            c.option("escalate_target", "--escalate-target"),
            c.cli_only("--upstream-url", dest="upstream_url", help="Send escalated requests to this "
                       "OpenAI-compatible server."),
            c.cli_only("--upstream-key-env", dest="upstream_key_env", help="Environment variable holding the "
                       "upstream's API key."),
            c.cli_only("--upstream-model", dest="upstream_model", help="Model name at the upstream."),
            c.cli_only("--no-redact", dest="no_redact", flag=True, help="Send escalated text to the upstream "
                       "without PII redaction."),
            c.option("decider", "--decider"),
        ), c.route_line, engine_decider=True))
REWRITE: TaskSpec[RewriteArgs, Rewrite] = TaskSpec(
    "rewrite", RewriteArgs, lambda a, m: rewrite_flow(a.query, mode=a.mode, n=a.n, model=m),
    "Search queries (and/or a hypothetical answer passage) for a query.", text="query", batchable=True,
    answer_text=_queries, cli=CliPart(
        "Rewrite QUERY for retrieval (and/or write a hypothetical answer passage).",
        (c.argument("query"), c.option("mode", "--mode"), c.option("n", "-n")), c.rewrite_line))
RERANK: TaskSpec[RerankArgs, Reranking] = TaskSpec(
    "rerank", RerankArgs, _rerank, "Candidates scored by relevance, best first.", text="query", cli=CliPart(
        "Rank candidates against QUERY (BM25 + embedding, fused); print the best first.", (
            c.argument("query", required=True, stdin=False),
            c.repeat("documents", "-d", "--doc", dest="docs", help="A candidate text (repeat)."),
            c.from_file("lines", "documents", "--docs", "docs_file", "File with one candidate per line."),
            c.option("top_n", "--top-n"), c.option("top_k", "--top-k"), c.option("mode", "--mode"),
            c.option("decider", "--decider"),
        ), c.rerank_line))
REDACT: TaskSpec[RedactArgs, Redaction] = TaskSpec(
    "redact", RedactArgs, lambda a, m: redact_flow(a.text, style=a.style, use_model=a.use_model, types=a.types,
                                                   salt=a.salt, model=m),
    "PII found (validated rules, and the model for names, addresses, organisations) and redacted.",
    batchable=True, answer_text=_field("text"), cli=CliPart(
        "Find and redact PII in TEXT (Chinese and English).", (
            FILE_TEXT, c.option("style", "--style"),
            c.option("use_model", "--no-model", help="Rules only (no names/addresses/organisations)."),
            c.repeat("types", "--type", dest="types", help="Only these entity types (repeat)."),
            c.option("salt", "--salt"),
        ), lambda r: str(r.text)))
GUARD: TaskSpec[GuardArgs, GuardVerdict] = TaskSpec(
    "guard", GuardArgs, _guard, "allow / flag / block for prompt injection and policies.", batchable=True,
    cli=CliPart(
        "Screen TEXT for prompt injection (and policies): allow, flag or block.", (
            TEXT_ARG,
            c.repeat("policies", "--policy", dest="policies", help="A policy the text must not violate (repeat)."),
            c.option("decider", "--decider", help="The screening decider."),
            c.cli_only("--no-decider", dest="no_decider", flag=True, help="Heuristics + the chat model only (the "
                       "old guard)."),
            c.option("use_model", "--use-model"), c.option("flag_at", "--flag-at"),
            c.option("block_at", "--block-at"),
        ), c.guard_line, engine_decider=True))
COMPRESS: TaskSpec[CompressArgs, Compression] = TaskSpec(
    "compress", CompressArgs, lambda a, m: compress_flow(a.text, budget_tokens=a.budget_tokens,
                                                         chunk_tokens=a.chunk_tokens, question=a.question,
                                                         mode=a.mode, model=m),
    "What matters of a long text within a token budget (its best sentences, or key points).", batchable=True,
    cli=CliPart(
        "The sentences of a long TEXT that matter, within a token budget.", (
            FILE_TEXT, c.option("budget_tokens", "--budget"), c.option("chunk_tokens", "--chunk-tokens"),
            c.option("question", "--question"), c.option("mode", "--mode"),
        ), c.points_line))
SUMMARIZE: TaskSpec[SummarizeArgs, Summary] = TaskSpec(
    "summarize", SummarizeArgs, lambda a, m: summarize_flow(a.text, words=a.words, chunk_tokens=a.chunk_tokens,
                                                            model=m),
    "A summary of at most `words` words.", batchable=True, answer_text=_field("summary"), cli=CliPart(
        "Summarize TEXT in at most --words words.",
        (FILE_TEXT, c.option("words", "--words"), c.option("chunk_tokens", "--chunk-tokens")),
        lambda r: str(r.summary)))
TAG: TaskSpec[TagArgs, Structured[Any]] = TaskSpec(
    "tag", TagArgs, lambda a, m: tag_flow(a.text, schema=a.schema_, max_keywords=a.max_keywords, model=m),
    "Keywords and metadata as JSON.", to_json=_tag_json, batchable=True, record=_data, scorer="json_fields",
    cli=CliPart(
        "Keywords and metadata for TEXT as JSON.", (
            FILE_TEXT,
            c.from_file("json", "schema_", "--schema", "schema_file", "JSON Schema for the metadata (default: "
                        "keywords, topic, language)."),
            c.option("max_keywords", "--max-keywords"),
        ), lambda r: c.json_line(r.data)))
ASK: TaskSpec[AskArgs, Answers] = TaskSpec(
    "ask", AskArgs, _ask, "Many questions about one text (choice, yes/no, score, extract), the text read once.",
    cli=CliPart(
        "Answer many questions about TEXT, reading it once.", (
            FILE_TEXT,
            c.from_file("json", "questions", "--questions", "questions_file", "JSON file: [{id, type, question, "
                        "labels?, schema?}, …] (type: choice, yes_no, score, extract)."),
            c.repeat("questions", "--yes-no", dest="yes_no", help="A yes/no question (repeatable; ids q1, q2, …, "
                     "skipping those a --questions file uses).",
                     convert=c.yes_no_questions),
        ), lambda r: "\n".join(c.answer_line(a) for a in r.answers)))
CALL: TaskSpec[CallArgs, ToolCalls] = TaskSpec(
    "call", CallArgs, _call, "Validated tool calls (or a reply) for a request and OpenAI-style tools.",
    cli=CliPart(
        "Validated tool calls for TEXT (or a reply in words), with the decision's probabilities.", (
            TEXT_ARG,
            c.from_file("json", "tools", "--tools", "tools_file", "JSON file: OpenAI tools [{type: function, "
                        "function: {name, description, parameters}}, …].", required=True),
            c.option("tool_choice", "--tool-choice", help="auto, none, required, or the name of the one function "
                     "to call.", convert=c.tool_choice),
            c.option("parallel_tool_calls", "--parallel-tool-calls/--one-call"),
        ), c.calls_line))
SQL: TaskSpec[SqlArgs, SqlQuery] = TaskSpec(
    "sql", SqlArgs, _sql, "One read-only SELECT for a question, only the schema's tables and columns.",
    text="question", cli=CliPart(
        "One read-only SELECT answering QUESTION; only the schema's tables and columns can be written.", (
            c.argument("question", required=True, stdin=False),
            c.cli_only("--db", dest="db", help="A SQLite file (opened read-only): its schema, and where --execute "
                       "runs."),
            c.from_file("text_file", "schema_", "--ddl", "ddl_file", "A file of CREATE TABLE statements (the "
                        "schema alone)."),
            c.option("dialect", "--dialect"),
            c.cli_only("--execute", dest="execute", flag=True, help="Run the query on --db (read-only) and print "
                       "the rows."),
            c.cli_only("--max-rows", dest="max_rows", default=100, show_default=True, int_range=(1, 1000),
                       help="With --execute: most rows printed."),
        ), c.sql_line))
SENTIMENT: TaskSpec[SentimentArgs, Sentiment] = TaskSpec(
    "sentiment", SentimentArgs, lambda a, m: sentiment_flow(a.text, neutral=a.neutral, aspect=a.aspect),
    "Positive, negative (or neutral) with the probability of each, and a polarity in [-1, 1].", batchable=True,
    answer_text=_field("label"), scorer="label", from_json=Sentiment.from_json, cli=CliPart(
        "The sentiment of TEXT: positive, negative or neutral, with probabilities.",
        (FILE_TEXT, c.option("neutral", "--no-neutral", help="Positive or negative only (no neutral label)."),
         c.option("aspect", "--aspect")),
        sentiment_text))

#: the client's own decoding, an answer with usage and the decoding evidence (its route reads the body itself),
#: a schema file read as text (``tasks/extract.py``)
EXTRACT: TaskSpec[ExtractArgs, Structured[Any]] = TaskSpec(
    "extract", ExtractArgs, extract.extract_flow, "Fields from the text as JSON valid against the schema.",
    to_json=extract.extract_json, batchable=True, record=_data, scorer="json_fields", client_call=extract.client_call,
    http=HttpPart(extract.http_answer, "Schema-validated extraction", extract.BODY, extract.ANSWER), cli=CliPart(
        "Extract fields from TEXT ('-' or absent: stdin) as JSON valid against --schema.", (
            TEXT_ARG,
            CliInput("text_file", "schema_", ("--schema",), dest="schema_file", help="JSON Schema file.",
                     required=True, path="schema file"),
            c.option("instructions", "--instructions"),
            c.cli_only("--strict", dest="strict", flag=True, help="Refuse schemas with keywords the grammar cannot "
                       "enforce."),
        ), extract.extract_line, json_flags=("--json", "--evidence"),
        json_help="Print the full result: {data, attempts, usage, enforced_by_validation, minimal}."))

#: dedupe is a sans-I/O flow like the others (its only calls are the embedding part's and a decider's), served at
#: ``POST /v1/tasks/dedupe`` for small inputs (at most ``MAX_DEDUPE_RECORDS``); ``cli=None``: no command is made
#: from the spec, ``tiankong dedupe`` is its own and reads a file (``cli/dedupe_cmds.py``)
DEDUPE: TaskSpec[DedupeArgs, Dedupe] = TaskSpec(
    "dedupe", DedupeArgs, _dedupe, "Clusters of exact, near and semantic duplicates, a kept record each, and the "
    "evidence of every merge.", text="records")

#: every registered task by name: served at ``POST /v1/tasks/<name>``, a CLI command each
SPECS: dict[str, TaskSpec[Any, Any]] = {spec.name: spec for spec in (
    EXTRACT,
    CLASSIFY, ROUTE, REWRITE, RERANK, REDACT, GUARD, COMPRESS, SUMMARIZE, TAG, ASK, CALL, SQL, SENTIMENT, DEDUPE)}
#: the same (once extract was not in ``SPECS``): batch jobs and eval items run the ``batchable`` ones
TASK_SPECS: dict[str, TaskSpec[Any, Any]] = SPECS
