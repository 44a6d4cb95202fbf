"""The task registry: every pipeline task declared once as a ``TaskSpec``.

A spec names the task, holds a Pydantic model of its arguments (defaults, limits, help text), builds its
sans-I/O flow from validated arguments and turns the result into JSON. Everything else derives from it:

* ``POST /v1/tasks/<task>`` validates its body with ``spec.args`` (plus ``model``) and runs ``spec.flow``;
* ``GET /openapi.json`` documents those bodies;
* the CLI's options take their defaults, choices and help from the fields (``tiankong.cli.task_cmds``);
* ``tiankong batch`` (and so ``tiankong eval``) builds ``spec.args`` from the job's keys;
* ``Client``/``AsyncClient`` keep explicit, typed signatures that a test holds to the specs.

Adding a task: write its flow and result type, add an arguments model and a ``TaskSpec`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator

from ..deciders.registry import load_decider
from ..dedupe.core import Dedupe, DedupeOptions, Record, dedupe_flow
from ..errors import ConfigError
from ..structured.flow import Flow, Structured
from ..structured.tools import MAX_TOOLS, ToolCalls, call_flow, parse_tool_choice, parse_tools
from .ask import MAX_QUESTIONS, Answers, Question, ask_flow
from .classify import Classification, classify_flow, decide_flow, decider_labels
from .compress import Compression, Summary, compress_flow, summarize_flow
from .guard import MAX_POLICIES, GuardVerdict, guard_flow
from .redact import Redaction, redact_flow
from .rerank import Reranking, rerank_flow
from .rewrite import Rewrite, rewrite_flow
from .route import Route, RouteDecision, check_routes, route_flow
from .sql import MAX_DDL_CHARS, SqlQuery, schema_from_ddl, sql_flow
from .tag import tag_flow

A = TypeVar("A", bound="TaskArgs")
R = TypeVar("R")


class TaskArgs(BaseModel):
    """Arguments of one task: unknown fields are refused, every limit is checked before the engine is asked."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


TEXT = Field(description="The text (UTF-8, not empty).")
QUERY = Field(description="The query (not empty).")
DECIDER = Field(None, max_length=200, description="A tuned decider (`tiankong deciders list`) answers instead.")


class ClassifyArgs(TaskArgs):
    text: str = TEXT
    labels: list[str] | None = Field(None, max_length=256, description="The labels (at least two).")
    decider: str | None = DECIDER
    descriptions: dict[str, str] | None = Field(None, description="A description per label.")
    examples: list[dict[str, Any]] | None = Field(None, max_length=64,
                                                  description="Few-shot examples: [{text, label}, …].")
    instructions: str | None = Field(None, description="Extra instructions for the model.")
    multi_label: bool = Field(False, description="Every label with P(yes) ≥ threshold.")
    threshold: float | None = Field(None, ge=0.0, le=1.0, description="Multi-label: P(yes) needed (default 0.5); "
                                    "with a decider: abstain below this confidence.")
    calibrate: bool | None = Field(None, description="Contextual calibration (default: on when there are no "
                                   "examples).")

    @model_validator(mode="after")
    def _labels_or_decider(self) -> ClassifyArgs:
        if self.labels is None and self.decider is None:
            raise ValueError("give labels (at least two) or a decider (see `tiankong deciders list`)")
        if self.decider is not None and (self.examples or self.descriptions or self.multi_label
                                         or self.calibrate is not None or self.instructions):
            raise ValueError("a decider answers on its own: examples, descriptions, instructions, multi_label and "
                             "calibrate apply to prompting only (leave them out, or leave out decider)")
        return self


class RouteArgs(TaskArgs):
    text: str = TEXT
    routes: list[Route] = Field(min_length=1, max_length=64, description="[{name, description, target}, …].")
    threshold: float = Field(0.6, ge=0.0, le=1.0, description="Escalate below this confidence.")
    redline: bool = Field(True, description="Escalate red-line requests (maths, reasoning, planning).")
    escalate_target: str = Field("upstream", description="The target an escalated request goes to.")
    decider: str | None = Field(None, max_length=200, description="A tuned decider over the route names makes "
                                "the local decision.")


class RewriteArgs(TaskArgs):
    query: str = QUERY
    mode: Literal["rewrite", "hyde", "both"] = Field("rewrite", description="Queries, a hypothetical answer "
                                                     "passage, or both.")
    n: int = Field(3, ge=1, le=8, description="Most queries to write.")


class RerankArgs(TaskArgs):
    query: str = QUERY
    documents: list[str] = Field(max_length=1000, description="The candidate texts.")
    top_n: int | None = Field(None, ge=1, description="Keep the best N (default: all).")
    top_k: int | None = Field(None, ge=1, description="Alias of top_n.")
    mode: Literal["fusion", "rrf", "bm25", "embedding", "pointwise", "listwise"] = Field(
        "fusion", description="fusion: BM25 and the embedding part combined by a rerank decider (P(relevant)); rrf: "
        "reciprocal-rank fusion of the two; bm25 or embedding alone; pointwise: the chat model's P(yes) per "
        "candidate; listwise: one ranked list from the chat model.")
    decider: str | None = Field(None, max_length=200, description="A rerank decider (`tiankong tune rerank`) "
                                "instead of the shipped one (mode fusion).")

    @model_validator(mode="after")
    def _one_top(self) -> RerankArgs:
        if self.top_n is not None and self.top_k is not None and self.top_n != self.top_k:
            raise ValueError("top_n and top_k are the same setting: give one")
        return self


class RedactArgs(TaskArgs):
    text: str = TEXT
    style: Literal["placeholder", "mask", "hash"] = Field("placeholder", description="How a found entity is "
                                                          "replaced.")
    use_model: bool = Field(True, description="Also ask the model for names, addresses, organisations.")
    types: list[str] | None = Field(None, max_length=16, description="Only these entity types.")
    salt: str = Field("", max_length=256, description="Style hash: the HMAC key (one salt, stable tags).")


class GuardArgs(TaskArgs):
    text: str = TEXT
    decider: str | None = Field("guard", max_length=200, description="The screening decider (null: heuristics "
                                "and the chat model).")
    flag_at: float | None = Field(None, gt=0.0, le=1.0, description="Flag at this score (default: the decider's).")
    block_at: float | None = Field(None, gt=0.0, le=1.0, description="Block at this score (default: the "
                                   "decider's).")
    policies: list[str] | None = Field(None, max_length=MAX_POLICIES, description="Policies the text must not "
                                       "violate (yes/no questions).")
    use_model: bool = Field(False, description="Also ask the chat model (noisy-OR with the decider).")


class CompressArgs(TaskArgs):
    text: str = TEXT
    budget_tokens: int = Field(512, ge=16, le=65536, description="Output token budget.")
    chunk_tokens: int = Field(1024, ge=64, le=65536, description="Tokens per chunk of the map step.")
    question: str | None = Field(None, description="Keep the sentences (points) that help answer this question.")
    mode: Literal["extractive", "abstractive", "hybrid"] = Field(
        "extractive", description="extractive: the text's own best sentences (scored against the question or the "
        "document's centroid by BM25 and the embedding part), kept whole in document order; hybrid: that selection "
        "at twice the budget, shortened by the chat model; abstractive: the chat model's key points (map-reduce).")


class SummarizeArgs(TaskArgs):
    text: str = TEXT
    words: int = Field(80, ge=5, le=1000, description="Most words in the summary.")
    chunk_tokens: int = Field(1024, ge=64, le=65536, description="Tokens per chunk when the text is compressed "
                              "first.")


class TagArgs(TaskArgs):
    text: str = TEXT
    # a JSON Schema object over HTTP; a Pydantic model class from Python
    schema_: Annotated[Any, WithJsonSchema({"type": ["object", "null"]})] = Field(
        None, alias="schema", description="JSON Schema for the metadata (default: keywords, topic, language).")
    max_keywords: int = Field(8, ge=1, le=32, description="Most keywords (default schema).")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: Any) -> Any:
        if value is None or isinstance(value, dict) or (isinstance(value, type) and issubclass(value, BaseModel)):
            return value
        raise ValueError("schema must be a JSON Schema object (or, from Python, a Pydantic model class)")


class QuestionArgs(TaskArgs):
    id: str = Field(min_length=1, max_length=200, description="The answer carries this id.")
    type: Literal["choice", "yes_no", "score", "extract"] = Field(description="How the question is answered.")
    question: str = Field(min_length=1, max_length=2000, description="The question about the text.")
    labels: list[str] | None = Field(None, max_length=64, description="choice: the options (at least two).")
    schema_: Annotated[Any, WithJsonSchema({"type": ["object", "null"]})] = Field(
        None, alias="schema", description="extract: the JSON Schema of the answer.")


class AskArgs(TaskArgs):
    text: str = TEXT
    questions: list[QuestionArgs] = Field(min_length=1, max_length=MAX_QUESTIONS,
                                          description="[{id, type, question, labels?, schema?}, …]; the text is "
                                          "read once for all of them.")


class CallArgs(TaskArgs):
    text: str | list[dict[str, Any]] = Field(description="The request, or the conversation as chat messages "
                                             "(tool calls and tool results included).")
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_TOOLS, description="OpenAI tools: [{type: "
                                        "function, function: {name, description, parameters}}, …].")
    tool_choice: str | dict[str, Any] = Field("auto", description="auto, none, required, or {type: function, "
                                              "function: {name}}.")
    parallel_tool_calls: bool = Field(True, description="Allow several calls in one answer.")


class SqlArgs(TaskArgs):
    question: str = Field(min_length=1, max_length=4000, description="The question, in words.")
    schema_: str = Field(alias="schema", min_length=1, max_length=MAX_DDL_CHARS,
                         description="The database schema as DDL text (CREATE TABLE …); over HTTP no file is read.")
    dialect: str = Field("sqlite", max_length=40, description="The dialect of the returned query (sqlglot's "
                         "names); it is checked in SQLite.")


#: most records one /v1/tasks/dedupe body may hold (larger sets: `tiankong dedupe` on a file)
MAX_DEDUPE_RECORDS = 10_000


class DedupeRecordArgs(BaseModel):
    """One record of a dedupe body: its id and text; other fields are kept for the kept rules."""

    model_config = ConfigDict(extra="allow")
    id: str | int = Field(description="Unique within the body.")
    text: str = Field(max_length=100_000, description="The text compared.")


class DedupeArgs(TaskArgs):
    records: list[DedupeRecordArgs] = Field(max_length=MAX_DEDUPE_RECORDS, description="[{id, text, …}, …]; ids "
                                            "unique.")
    near: float = Field(0.7, gt=0.0, le=1.0, description="MinHash Jaccard estimate that merges two records.")
    near_low: float | None = Field(None, gt=0.0, le=1.0, description="Near pairs in [near_low, near) are "
                                   "uncertain.")
    semantic: float = Field(0.9, gt=0.0, le=1.0, description="Cosine of the embedding part's vectors that merges.")
    semantic_low: float | None = Field(0.8, gt=0.0, le=1.0, description="Semantic pairs in [semantic_low, "
                                       "semantic) are uncertain.")
    shingle: int | None = Field(None, ge=1, le=64, description="Characters per shingle (default: 3 for CJK, "
                                "else 5).")
    keep: str = Field("first", max_length=200, description="Kept record: first, longest, most-complete, "
                      "field:NAME.")
    stages: list[Literal["exact", "near", "semantic"]] = Field(["exact", "near", "semantic"], min_length=1,
                                                               description="The stages that run.")
    decider: str | None = Field(None, max_length=200, description="A decider (labels same/different) decides "
                                "the uncertain pairs.")


def _dedupe(a: DedupeArgs, model: str | None) -> Flow[Dedupe]:
    records = [Record(r.id, r.text, r.model_dump()) for r in a.records]
    options = DedupeOptions(near=a.near, near_low=a.near_low, semantic=a.semantic, semantic_low=a.semantic_low,
                            shingle=a.shingle, keep=a.keep, stages=tuple(a.stages), decider=a.decider)
    return dedupe_flow(records, options)


def _call(a: CallArgs, model: str | None) -> Flow[ToolCalls]:
    tools = parse_tools(a.tools)
    mode, name = parse_tool_choice(a.tool_choice, tools)
    messages = [{"role": "user", "content": a.text}] if isinstance(a.text, str) else a.text
    if isinstance(a.text, str) and not a.text.strip():
        raise ConfigError("text is empty", hint="pass the request the tools should serve")
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


def _to_json(result: Any) -> dict[str, Any]:
    return result.to_json()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class TaskSpec(Generic[A, R]):
    """One task: its name, its arguments, how its flow is built and how its result becomes JSON."""

    name: str
    args: type[A]
    build: Callable[[A, str | None], Flow[R]]
    help: str
    text: str = "text"  # the field holding the text the task reads first
    to_json: Callable[[R], dict[str, Any]] = _to_json

    def parse(self, data: dict[str, Any]) -> A:
        """Validated arguments; every problem becomes one ``ConfigError`` naming the field."""
        try:
            return self.args.model_validate(data)
        except ValidationError as exc:
            raise invalid_request(self.name, exc) from None

    def flow(self, args: A | dict[str, Any], model: str | None = None) -> Flow[R]:
        """The task's flow for ``args`` (validated first when given as a dict)."""
        return self.build(args if isinstance(args, self.args) else self.parse(dict(args)), model)

    def defaults(self) -> dict[str, Any]:
        """Every optional field with its default (the documented defaults)."""
        return {name: info.default for name, info in self.args.model_fields.items() if not info.is_required()}


def invalid_request(task: str, exc: ValidationError) -> ConfigError:
    """One ``ConfigError`` for every problem of a task's arguments; ``param`` names the first field at fault."""
    error = ConfigError(f"invalid {task} request: {describe(exc)}", hint=f"see docs/tasks.md#{task}")
    first = exc.errors()[0]["loc"] if exc.errors() else ()
    error.param = str(first[0]) if first else None
    return error


def describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        problems.append(f"{where}: {str(error['msg']).removeprefix('Value error, ')}")
    return "; ".join(problems)


def _tag_json(result: Structured[Any]) -> dict[str, Any]:
    return {"data": result.data, "attempts": result.attempts}


CLASSIFY: TaskSpec[ClassifyArgs, Classification] = TaskSpec(
    "classify", ClassifyArgs, _classify, "Label(s) with the probability of every label.")
ROUTE: TaskSpec[RouteArgs, RouteDecision] = TaskSpec(
    "route", RouteArgs, _route, "A local route, or escalation on low confidence and red-line requests.")
REWRITE: TaskSpec[RewriteArgs, Rewrite] = TaskSpec(
    "rewrite", RewriteArgs, lambda a, m: rewrite_flow(a.query, mode=a.mode, n=a.n, model=m),
    "Search queries (and/or a hypothetical answer passage) for a query.", text="query")
RERANK: TaskSpec[RerankArgs, Reranking] = TaskSpec(
    "rerank", RerankArgs, _rerank, "Candidates scored by relevance, best first.", text="query")
REDACT: TaskSpec[RedactArgs, Redaction] = TaskSpec(
    "redact", RedactArgs, lambda a, m: redact_flow(a.text, style=a.style, use_model=a.use_model, types=a.types,
                                                   salt=a.salt, model=m),
    "PII found (validated rules, and the model for names, addresses, organisations) and redacted.")
GUARD: TaskSpec[GuardArgs, GuardVerdict] = TaskSpec(
    "guard", GuardArgs, _guard, "allow / flag / block for prompt injection and policies.")
COMPRESS: TaskSpec[CompressArgs, Compression] = TaskSpec(
    "compress", CompressArgs, lambda a, m: compress_flow(a.text, budget_tokens=a.budget_tokens,
                                                         chunk_tokens=a.chunk_tokens, question=a.question,
                                                         mode=a.mode, model=m),
    "What matters of a long text within a token budget (its best sentences, or key points).")
SUMMARIZE: TaskSpec[SummarizeArgs, Summary] = TaskSpec(
    "summarize", SummarizeArgs, lambda a, m: summarize_flow(a.text, words=a.words, chunk_tokens=a.chunk_tokens,
                                                            model=m),
    "A summary of at most `words` words.")
TAG: TaskSpec[TagArgs, Structured[Any]] = TaskSpec(
    "tag", TagArgs, lambda a, m: tag_flow(a.text, schema=a.schema_, max_keywords=a.max_keywords, model=m),
    "Keywords and metadata as JSON.", to_json=_tag_json)

ASK: TaskSpec[AskArgs, Answers] = TaskSpec(
    "ask", AskArgs, _ask, "Many questions about one text (choice, yes/no, score, extract), the text read once.")
CALL: TaskSpec[CallArgs, ToolCalls] = TaskSpec(
    "call", CallArgs, _call, "Validated tool calls (or a reply) for a request and OpenAI-style tools.")
SQL: TaskSpec[SqlArgs, SqlQuery] = TaskSpec(
    "sql", SqlArgs, _sql, "One read-only SELECT for a question, only the schema's tables and columns.",
    text="question")

# Dedupe is a sans-I/O flow like the others (its only calls are the embedding part's and a decider's), declared
# here in full; it is not yet in SPECS because registering a task also gives it a row in docs/tasks.md's parameter
# tables, a CLI twin in cli/task_cmds.py's COMMANDS (its CLI reads a file: cli/dedupe_cmds.py) and an exported
# result type in tiankong/__init__.py, which tests/test_task_registry.py holds every registered task to; those
# files belong to other work in progress. Adding DEDUPE to the tuple below then serves POST /v1/tasks/dedupe,
# its OpenAPI body and the 400 beyond MAX_DEDUPE_RECORDS with no other change.
DEDUPE: TaskSpec[DedupeArgs, Dedupe] = TaskSpec(
    "dedupe", DedupeArgs, _dedupe, "Clusters of exact, near and semantic duplicates, a kept record each, and the "
    "evidence of every merge.", text="records")

#: every registered task by name
SPECS: dict[str, TaskSpec[Any, Any]] = {spec.name: spec for spec in (
    CLASSIFY, ROUTE, REWRITE, RERANK, REDACT, GUARD, COMPRESS, SUMMARIZE, TAG, ASK, CALL, SQL)}
