"""The arguments of every registered task: Pydantic models (unknown fields refused, every default, limit and help
text declared once). ``tasks/specs.py`` pairs each with its flow; HTTP bodies, OpenAPI, the CLI's options, batch
jobs and eval items are read through them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from ..dedupe.parts import cosines_said
from ..structured.tools import MAX_TOOLS
from .ask import MAX_QUESTIONS
from .guard import MAX_POLICIES
from .route import Route
from .sql import MAX_DDL_CHARS


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

    @field_validator("labels")
    @classmethod
    def _two_labels(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) < 2:
            raise ValueError("labels must be at least two distinct labels (or give a decider instead)")
        return value

    @model_validator(mode="after")
    def _labels_or_decider(self) -> ClassifyArgs:
        if self.labels is None and self.decider is None:
            raise ValueError("give labels (at least two) or a decider (see `tiankong deciders list`)")
        if self.decider is not None and (self.examples or self.descriptions or self.multi_label
                                         or self.calibrate is not None or self.instructions):
            raise ValueError("a decider answers on its own: examples, descriptions, instructions, multi_label and "
                             "calibrate apply to prompting only (leave them out, or leave out decider)")
        # each was taken and did nothing (a read-only sweep, 2026-12-07)
        if self.multi_label and (self.examples or self.instructions or self.calibrate):
            raise ValueError("multi_label asks one yes/no question per label (with the descriptions): examples, "
                             "instructions and calibrate apply to single-label prompting (leave them out)")
        if self.threshold is not None and not self.multi_label and self.decider is None:
            raise ValueError("threshold is multi_label's P(yes) or a decider's abstain level: a single-label answer "
                             "with labels takes none (add multi_label, or leave it out)")
        return self


class RouteArgs(TaskArgs):
    text: str = TEXT
    routes: list[Route] = Field(min_length=1, max_length=64, description="[{name, description, target}, …].")
    threshold: float | None = Field(None, ge=0.0, le=1.0, description="Escalate below this confidence (default: "
                                    "the decider's tuned threshold, else [route] threshold of the config, else "
                                    "0.6).")
    redline: bool = Field(True, description="Escalate red-line requests (maths, reasoning, planning).")
    escalate_target: str = Field("upstream", min_length=1, max_length=200,
                                 description="The target an escalated request goes to.")
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
    salt: str = Field("", max_length=256, description="Style hash: the HMAC key (one salt, stable tags); "
                      "none: this installation's own secret (`redact-key`, data dir).")

    @model_validator(mode="after")
    def _salt_hashes(self) -> RedactArgs:
        if self.salt and self.style != "hash":  # taken and ignored: the placeholders were plain
            raise ValueError("salt keys the hash style's tags: add style hash (--style hash), or leave salt out")
        return self


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
    semantic: float | None = Field(None, gt=0.0, le=1.0, description="Cosine of the embedding part's vectors "
                                   f"that merges (default: the part's; merge / floor: {cosines_said()}).")
    semantic_low: float | None = Field(None, gt=0.0, le=1.0, description="Semantic pairs in [semantic_low, "
                                       "semantic) are uncertain (default: the part's floor; = semantic: no band).")
    shingle: int | None = Field(None, ge=1, le=64, description="Characters per shingle (default: 3 for CJK, "
                                "else 5).")
    keep: str = Field("first", max_length=200, description="Kept record: first, longest, most-complete, "
                      "field:NAME.")
    stages: list[Literal["exact", "near", "semantic"]] = Field(["exact", "near", "semantic"], min_length=1,
                                                               description="The stages that run.")
    decider: str | None = Field(None, max_length=200, description="A decider (labels same/different) decides "
                                "the uncertain pairs.")
    part: str = Field("", max_length=200, description="The catalog's embedding part of every record ('': per "
                      "record, all-minilm-l6-v2:f16, or multilingual-e5-small:q4_0 for Chinese).")


class ExtractArgs(TaskArgs):
    text: str = TEXT
    # a JSON Schema object (or its text) over HTTP and in job files; a Pydantic model class from Python
    schema_: Annotated[Any, WithJsonSchema({"type": ["object", "string"]})] = Field(
        None, alias="schema", description="The JSON Schema the answer must be valid against.")
    instructions: str | None = Field(None, description="Extra instructions for the model.")

    @model_validator(mode="after")
    def _schema(self) -> ExtractArgs:
        if not self.schema_:
            raise ValueError("extract needs a schema (a JSON Schema object; in a batch job: schema = {...} or "
                             "--schema FILE)")
        return self
