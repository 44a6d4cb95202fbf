"""Task methods for ``Client`` and ``AsyncClient``: same names and parameters, one registered task each.

Each method validates its arguments with the task's spec (``tiankong.tasks.specs``), builds the spec's sans-I/O
flow and runs it with the client's driver; the async driver sends each batch concurrently, the sync one on a
small thread pool, so multi-call steps (rerank candidates, compress chunks, multi-label questions) fill the
engine's slots either way. The signatures are written out (typed, documented); a test holds them to the specs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..client import AsyncBaseClient, BaseClient
from ..client._shared import ServerInfo
from ..errors import ConfigError
from ..structured.drivers import SLOT_GATE, run_async, run_sync
from ..structured.flow import Flow, Structured
from ..structured.tools import ToolCalls
from .ask import Answers
from .classify import Classification
from .compress import Compression, Summary
from .guard import GuardVerdict
from .redact import Redaction
from .remote import extract_body, from_json, remote_body
from .rerank import Reranking
from .rewrite import Rewrite
from .route import EscalationTarget, Route, RouteDecision, check_upstream, escalation_text, upstream_key
from .specs import (
    ASK,
    CALL,
    CLASSIFY,
    COMPRESS,
    GUARD,
    REDACT,
    RERANK,
    REWRITE,
    ROUTE,
    SPECS,
    SQL,
    SUMMARIZE,
    TAG,
    TaskSpec,
)
from .sql import SqlQuery, schema_from_db, sql_flow

T = TypeVar("T")


def _sql(question: str, schema: str | None, db: str | Path | None, dialect: str, execute: bool, max_rows: int,
         model: str | None) -> Flow[SqlQuery]:
    """The sql task's flow over DDL text (the registered task) or a SQLite file (read-only, can run the query)."""
    if (schema is None) == (db is None):
        raise ConfigError("give the database schema once: schema= (CREATE TABLE text) or db= (a SQLite file)")
    if db is None:
        if execute:
            raise ConfigError("execute needs the database file, not only its DDL",
                              hint="give the SQLite file: --db FILE on the command line, db=PATH in Python")
        return SQL.flow({"question": question, "schema": schema, "dialect": dialect}, model)
    SQL.parse({"question": question, "schema": "-", "dialect": dialect})  # the same limits as the task's
    return sql_flow(question, schema_from_db(db), db_path=db, dialect=dialect, execute=execute, max_rows=max_rows,
                    model=model)


def registered(name: str) -> TaskSpec[Any, Any]:
    """The registered task ``name`` (``tasks/specs.py``); an unknown name is a ``ConfigError`` listing them."""
    if name not in SPECS:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(SPECS)}")
    return SPECS[name]


def _decoding_defaults(client: object) -> bool:
    """The client decodes the default way (grammars, fast-forward): what a gateway does with an extract body."""
    return getattr(client, "grammar_support", True) is True and getattr(client, "fast_forward", True) is True


class TaskMethods:
    model: str | None

    if TYPE_CHECKING:  # provided by BaseClient
        def _limited(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...
        def server(self) -> ServerInfo: ...

    def _run(self, flow: Flow[T]) -> T:
        return run_sync(flow, self._limited)  # at most the server's slots in flight (client/sync.py)

    def _task(self, spec: TaskSpec[Any, T], **args: Any) -> T:
        """A tiankong gateway gets the task as one call (``tasks/remote.py``); an engine, the flow's calls; a task
        with its own way on a client (extract's decoding settings), that way."""
        parsed = spec.parse(args)
        if spec.client_call is not None:
            return spec.client_call(self, parsed)  # type: ignore[no-any-return]
        body = remote_body(spec, parsed, self.model) if self.server().gateway else None
        if body is not None:
            return from_json(spec.name, self._limited("POST", f"/v1/tasks/{spec.name}", body))  # type: ignore[no-any-return]
        return self._run(spec.flow(parsed, self.model))

    def _gateway_extract(self, text: str, schema: Any, instructions: str | None, *, strict: bool,
                         max_tokens: int | None, max_attempts: int) -> Structured[Any] | None:
        """``extract`` at a tiankong gateway: one ``/v1/tasks/extract`` call within its slots, like the tasks
        (``tasks/remote.py``); ``None``: not a gateway, or arguments its body cannot carry (then the flow runs
        here)."""
        body = extract_body(text, schema, instructions, self.model, strict=strict, max_tokens=max_tokens,
                            max_attempts=max_attempts, decoding_defaults=_decoding_defaults(self))
        if body is None or not self.server().gateway:
            return None
        return from_json("extract", self._limited("POST", "/v1/tasks/extract", body))  # type: ignore[no-any-return]

    def task(self, name: str, **args: Any) -> Any:
        """Any registered task by name with its arguments as keywords (the body ``POST /v1/tasks/NAME`` takes);
        a task's own method, where it has one, is the typed way to the same answer."""
        return self._task(registered(name), **args)

    def classify(self, text: str, labels: list[str] | None = None, *, decider: str | None = None,
                 descriptions: dict[str, str] | None = None, examples: list[dict[str, Any]] | None = None,
                 instructions: str | None = None, multi_label: bool = False, threshold: float | None = None,
                 calibrate: bool | None = None) -> Classification:
        """Label(s) for ``text`` with the probability of every label; ``decider=NAME`` answers with a tuned
        decider (``tiankong tune``), whose labels it uses; ``threshold`` is then an abstain threshold."""
        return self._task(CLASSIFY, text=text, labels=labels, decider=decider, descriptions=descriptions,
                          examples=examples, instructions=instructions, multi_label=multi_label,
                          threshold=threshold, calibrate=calibrate)

    def route(self, text: str, routes: list[Route] | list[dict[str, Any]], *, threshold: float | None = None,
              redline: bool = True, escalate_target: str = "upstream",
              upstream: EscalationTarget | dict[str, Any] | None = None, max_tokens: int = 512,
              decider: str | None = None) -> RouteDecision:
        """Local routing decision; escalates (``escalated=True``) on low confidence or red-line requests;
        ``decider``: a tuned decider over the route names makes the local decision. ``threshold`` (default: the
        decider's tuned one, else ``[route] threshold`` of the config, else 0.6): escalate below it.

        With ``upstream``, an escalated request is sent there (PII redacted first unless the upstream's ``redact``
        is false) and its answer is in ``decision.answer``; ``decision.sent_text`` is exactly what left the machine.
        """
        decision: RouteDecision = self._task(ROUTE, text=text, routes=routes, threshold=threshold, redline=redline,
                                             escalate_target=escalate_target, decider=decider)
        if decision.escalated and upstream is not None:
            target = check_upstream(upstream)
            decision.sent_text, decision.redacted = escalation_text(text, target)
            with BaseClient(target.url, model=target.model, api_key=upstream_key(target)) as remote:
                decision.answer = remote.chat(decision.sent_text, max_tokens=max_tokens).text
        return decision

    def rewrite(self, query: str, *, mode: str = "rewrite", n: int = 3) -> Rewrite:
        """Search queries for ``query`` (``mode="hyde"``: a hypothetical answer passage; ``"both"``)."""
        return self._task(REWRITE, query=query, mode=mode, n=n)

    def rerank(self, query: str, documents: list[str], *, top_n: int | None = None, top_k: int | None = None,
               mode: str = "fusion", decider: str | None = None) -> Reranking:
        """Candidates ranked by relevance, best first, and the top-n (``top_k`` is an alias). Default: BM25 and the
        embedding part combined by the shipped rerank decider (or ``decider``, from ``tiankong tune rerank``) into
        P(relevant); ``mode="pointwise"``: the chat model's P(yes) per candidate."""
        return self._task(RERANK, query=query, documents=documents, top_n=top_n, top_k=top_k, mode=mode,
                          decider=decider)

    def redact(self, text: str, *, style: str = "placeholder", use_model: bool = True,
               types: list[str] | None = None, salt: str = "") -> Redaction:
        """PII found by validated rules (and the model for names, addresses, organisations), redacted."""
        return self._task(REDACT, text=text, style=style, use_model=use_model, types=types, salt=salt)

    def guard(self, text: str, *, decider: str | None = "guard", flag_at: float | None = None,
              block_at: float | None = None, policies: list[str] | None = None,
              use_model: bool = False) -> GuardVerdict:
        """allow / flag / block for prompt injection (the ``guard`` decider; ``use_model``: and the chat
        model's judgement; ``decider=None``: heuristics + model) and policies (yes/no questions)."""
        return self._task(GUARD, text=text, decider=decider, flag_at=flag_at, block_at=block_at, policies=policies,
                          use_model=use_model)

    def compress(self, text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024,
                 question: str | None = None, mode: str = "extractive") -> Compression:
        """What matters of a long text within a token budget: its best sentences against the question (or the
        document's centroid), kept whole in document order (``mode="extractive"``); ``"hybrid"``: then shortened
        by the chat model; ``"abstractive"``: the chat model's key points (map over chunks in parallel, reduce)."""
        return self._task(COMPRESS, text=text, budget_tokens=budget_tokens, chunk_tokens=chunk_tokens,
                          question=question, mode=mode)

    def summarize(self, text: str, *, words: int = 80, chunk_tokens: int = 1024) -> Summary:
        """A summary of at most ``words`` words (long texts are compressed first)."""
        return self._task(SUMMARIZE, text=text, words=words, chunk_tokens=chunk_tokens)

    def ask(self, text: str, questions: list[dict[str, Any]]) -> Answers:
        """Answers to many questions about ``text`` (``[{id, type, question, labels?, schema?}, …]``; type:
        choice, yes_no, score or extract), the text read once: each answer equals asking that question alone."""
        return self._task(ASK, text=text, questions=questions)

    def tag(self, text: str, *, schema: Any = None, max_keywords: int = 8) -> Structured[Any]:
        """Keywords and metadata (default schema: keywords, topic, language) or your own schema."""
        return self._task(TAG, text=text, schema=schema, max_keywords=max_keywords)

    def call(self, text: str | list[dict[str, Any]], tools: list[dict[str, Any]], *,
             tool_choice: str | dict[str, Any] = "auto", parallel_tool_calls: bool = True) -> ToolCalls:
        """The next step for a request (or a conversation) with OpenAI-style ``tools``: calls whose arguments are
        valid against the tools' schemas, or a reply in words (``tool_choice`` auto/none), with the decision's
        probabilities."""
        return self._task(CALL, text=text, tools=tools, tool_choice=tool_choice,
                          parallel_tool_calls=parallel_tool_calls)

    def sql(self, question: str, schema: str | None = None, *, db: str | Path | None = None,
            dialect: str = "sqlite", execute: bool = False, max_rows: int = 100) -> SqlQuery:
        """One read-only SELECT answering ``question`` over ``schema`` (DDL text) or ``db`` (a SQLite file): only
        the schema's tables and columns can be written; checked by sqlglot and SQLite's EXPLAIN; ``execute``
        runs it on ``db`` (read-only, at most ``max_rows`` rows)."""
        if db is None and schema is not None and not execute:
            return self._task(SQL, question=question, schema=schema, dialect=dialect)
        return self._run(_sql(question, schema, db, dialect, execute, max_rows, self.model))


class AsyncTaskMethods:
    model: str | None

    if TYPE_CHECKING:  # provided by AsyncBaseClient
        async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...
        async def _limited(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...
        async def server(self) -> ServerInfo: ...

    async def _run(self, flow: Flow[T]) -> T:
        if SLOT_GATE.get() is not None:  # inside a gateway request: its admission holds the slots
            return await run_async(flow, self._request)
        return await run_async(flow, self._limited)

    async def _task(self, spec: TaskSpec[Any, T], **args: Any) -> T:
        parsed = spec.parse(args)
        if spec.client_call is not None:
            return await spec.run_async(self, parsed)
        body = None
        if SLOT_GATE.get() is None and (await self.server()).gateway:
            body = remote_body(spec, parsed, self.model)
        if body is not None:
            return from_json(spec.name, await self._limited("POST", f"/v1/tasks/{spec.name}", body))  # type: ignore[no-any-return]
        return await self._run(spec.flow(parsed, self.model))

    async def _gateway_extract(self, text: str, schema: Any, instructions: str | None, *, strict: bool,
                               max_tokens: int | None, max_attempts: int) -> Structured[Any] | None:
        """``TaskMethods._gateway_extract``; never inside a gateway's own request (its engine is not one)."""
        if SLOT_GATE.get() is not None:
            return None
        body = extract_body(text, schema, instructions, self.model, strict=strict, max_tokens=max_tokens,
                            max_attempts=max_attempts, decoding_defaults=_decoding_defaults(self))
        if body is None or not (await self.server()).gateway:
            return None
        return from_json("extract", await self._limited("POST", "/v1/tasks/extract", body))  # type: ignore[no-any-return]

    async def task(self, name: str, **args: Any) -> Any:
        return await self._task(registered(name), **args)

    async def classify(self, text: str, labels: list[str] | None = None, *, decider: str | None = None,
                       descriptions: dict[str, str] | None = None, examples: list[dict[str, Any]] | None = None,
                       instructions: str | None = None, multi_label: bool = False, threshold: float | None = None,
                       calibrate: bool | None = None) -> Classification:
        return await self._task(CLASSIFY, text=text, labels=labels, decider=decider, descriptions=descriptions,
                                examples=examples, instructions=instructions, multi_label=multi_label,
                                threshold=threshold, calibrate=calibrate)

    async def route(self, text: str, routes: list[Route] | list[dict[str, Any]], *, threshold: float | None = None,
                    redline: bool = True, escalate_target: str = "upstream",
                    upstream: EscalationTarget | dict[str, Any] | None = None, max_tokens: int = 512,
                    decider: str | None = None) -> RouteDecision:
        decision: RouteDecision = await self._task(ROUTE, text=text, routes=routes, threshold=threshold,
                                                   redline=redline, escalate_target=escalate_target,
                                                   decider=decider)
        if decision.escalated and upstream is not None:
            target = check_upstream(upstream)
            decision.sent_text, decision.redacted = escalation_text(text, target)
            async with AsyncBaseClient(target.url, model=target.model, api_key=upstream_key(target)) as remote:
                decision.answer = (await remote.chat(decision.sent_text, max_tokens=max_tokens)).text
        return decision

    async def rewrite(self, query: str, *, mode: str = "rewrite", n: int = 3) -> Rewrite:
        return await self._task(REWRITE, query=query, mode=mode, n=n)

    async def rerank(self, query: str, documents: list[str], *, top_n: int | None = None,
                     top_k: int | None = None, mode: str = "fusion", decider: str | None = None) -> Reranking:
        return await self._task(RERANK, query=query, documents=documents, top_n=top_n, top_k=top_k, mode=mode,
                                decider=decider)

    async def redact(self, text: str, *, style: str = "placeholder", use_model: bool = True,
                     types: list[str] | None = None, salt: str = "") -> Redaction:
        return await self._task(REDACT, text=text, style=style, use_model=use_model, types=types, salt=salt)

    async def guard(self, text: str, *, decider: str | None = "guard", flag_at: float | None = None,
                    block_at: float | None = None, policies: list[str] | None = None,
                    use_model: bool = False) -> GuardVerdict:
        return await self._task(GUARD, text=text, decider=decider, flag_at=flag_at, block_at=block_at,
                                policies=policies, use_model=use_model)

    async def compress(self, text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024,
                       question: str | None = None, mode: str = "extractive") -> Compression:
        return await self._task(COMPRESS, text=text, budget_tokens=budget_tokens, chunk_tokens=chunk_tokens,
                                question=question, mode=mode)

    async def summarize(self, text: str, *, words: int = 80, chunk_tokens: int = 1024) -> Summary:
        return await self._task(SUMMARIZE, text=text, words=words, chunk_tokens=chunk_tokens)

    async def ask(self, text: str, questions: list[dict[str, Any]]) -> Answers:
        return await self._task(ASK, text=text, questions=questions)

    async def tag(self, text: str, *, schema: Any = None, max_keywords: int = 8) -> Structured[Any]:
        return await self._task(TAG, text=text, schema=schema, max_keywords=max_keywords)

    async def call(self, text: str | list[dict[str, Any]], tools: list[dict[str, Any]], *,
                   tool_choice: str | dict[str, Any] = "auto", parallel_tool_calls: bool = True) -> ToolCalls:
        return await self._task(CALL, text=text, tools=tools, tool_choice=tool_choice,
                                parallel_tool_calls=parallel_tool_calls)

    async def sql(self, question: str, schema: str | None = None, *, db: str | Path | None = None,
                  dialect: str = "sqlite", execute: bool = False, max_rows: int = 100) -> SqlQuery:
        if db is None and schema is not None and not execute:
            return await self._task(SQL, question=question, schema=schema, dialect=dialect)
        return await self._run(_sql(question, schema, db, dialect, execute, max_rows, self.model))
