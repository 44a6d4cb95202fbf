"""Task methods for ``Client`` and ``AsyncClient``: same names and parameters, one flow each.

Each method builds a sans-I/O flow (``tiankong.tasks.*``) and runs it with the client's driver; the async
driver sends each batch concurrently, the sync one on a small thread pool, so multi-call steps (rerank
candidates, compress chunks, multi-label questions) fill the engine's slots either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ..client import AsyncBaseClient, BaseClient
from ..deciders.registry import load_decider
from ..structured.drivers import run_async, run_sync
from ..structured.flow import Flow, Structured
from .classify import Classification, classify_flow, decide_flow, decider_labels
from .compress import Compression, Summary, compress_flow, summarize_flow
from .guard import GuardVerdict, guard_flow
from .redact import Redaction, redact_flow
from .rerank import Reranking, rerank_flow
from .rewrite import Rewrite, rewrite_flow
from .route import (
    Route,
    RouteDecision,
    Upstream,
    check_routes,
    check_upstream,
    escalation_text,
    route_flow,
    upstream_key,
)
from .tag import tag_flow

T = TypeVar("T")


class TaskMethods:
    model: str | None

    if TYPE_CHECKING:  # provided by BaseClient
        def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...

    def _run(self, flow: Flow[T]) -> T:
        return run_sync(flow, self._request)

    def classify(self, text: str, labels: list[str] | None = None, *, decider: str | None = None,
                 descriptions: dict[str, str] | None = None, examples: list[dict[str, Any]] | None = None,
                 instructions: str | None = None, multi_label: bool = False, threshold: float | None = None,
                 calibrate: bool | None = None) -> Classification:
        """Label(s) for ``text`` with the probability of every label; ``decider=NAME`` answers with a tuned
        decider (``tiankong tune``), whose labels it uses; ``threshold`` is then an abstain threshold."""
        if decider is not None:
            found = load_decider(decider)
            decider_labels(found.labels, labels, found.ref)
            return self._run(decide_flow(found, text, threshold=threshold))
        return self._run(classify_flow(text, labels or [], descriptions=descriptions, examples=examples,
                                       instructions=instructions, multi_label=multi_label,
                                       threshold=0.5 if threshold is None else threshold, calibrate=calibrate))

    def route(self, text: str, routes: list[Route] | list[dict[str, Any]], *, threshold: float = 0.6,
              redline: bool = True, escalate_target: str = "upstream",
              upstream: Upstream | dict[str, Any] | None = None, max_tokens: int = 512,
              decider: str | None = None) -> RouteDecision:
        """Local routing decision; escalates (``escalated=True``) on low confidence or red-line requests;
        ``decider``: a tuned decider over the route names makes the local decision.

        With ``upstream``, an escalated request is sent there (PII redacted first unless ``redact=False``) and
        its answer is in ``decision.answer``; ``decision.sent_text`` is exactly what left the machine.
        """
        decision = self._run(route_flow(text, check_routes(routes), threshold=threshold, redline=redline,
                                        escalate_target=escalate_target,
                                        decider=load_decider(decider) if decider else None))
        if decision.escalated and upstream is not None:
            target = check_upstream(upstream)
            decision.sent_text, decision.redacted = escalation_text(text, target)
            with BaseClient(target.url, model=target.model, api_key=upstream_key(target)) as remote:
                decision.answer = remote.chat(decision.sent_text, max_tokens=max_tokens).text
        return decision

    def rewrite(self, query: str, *, mode: str = "rewrite", n: int = 3) -> Rewrite:
        """Search queries for ``query`` (``mode="hyde"``: a hypothetical answer passage; ``"both"``)."""
        return self._run(rewrite_flow(query, mode=mode, n=n, model=self.model))

    def rerank(self, query: str, documents: list[str], *, top_k: int | None = None,
               mode: str = "pointwise") -> Reranking:
        """Candidates scored by relevance (P(yes) per candidate, all slots at once) and the top-k."""
        return self._run(rerank_flow(query, documents, top_k=top_k, mode=mode,
                                     model=self.model))

    def redact(self, text: str, *, style: str = "placeholder", use_model: bool = True,
               types: list[str] | None = None, salt: str = "") -> Redaction:
        """PII found by validated rules (and the model for names, addresses, organisations), redacted."""
        return self._run(redact_flow(text, style=style, use_model=use_model, types=types,
                                     salt=salt, model=self.model))

    def guard(self, text: str, *, decider: str | None = "guard", flag_at: float | None = None,
              block_at: float | None = None, policies: list[str] | None = None,
              use_model: bool = False) -> GuardVerdict:
        """allow / flag / block for prompt injection (the ``guard`` decider; ``use_model``: and the chat
        model's judgement; ``decider=None``: heuristics + model) and policies (yes/no questions)."""
        return self._run(guard_flow(text, decider=load_decider(decider) if decider else None, flag_at=flag_at,
                                    block_at=block_at, policies=policies, use_model=use_model))

    def compress(self, text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024,
                 question: str | None = None) -> Compression:
        """Key points of a long text within a token budget (map over chunks in parallel, reduce)."""
        return self._run(compress_flow(text, budget_tokens=budget_tokens,
                                       chunk_tokens=chunk_tokens, question=question, model=self.model))

    def summarize(self, text: str, *, words: int = 80, chunk_tokens: int = 1024) -> Summary:
        """A summary of at most ``words`` words (long texts are compressed first)."""
        return self._run(summarize_flow(text, words=words, chunk_tokens=chunk_tokens,
                                        model=self.model))

    def tag(self, text: str, *, schema: Any = None, max_keywords: int = 8) -> Structured[Any]:
        """Keywords and metadata (default schema: keywords, topic, language) or your own schema."""
        return self._run(tag_flow(text, schema=schema, max_keywords=max_keywords,
                                  model=self.model))


class AsyncTaskMethods:
    model: str | None

    if TYPE_CHECKING:  # provided by AsyncBaseClient
        async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...

    async def _run(self, flow: Flow[T]) -> T:
        return await run_async(flow, self._request)

    async def classify(self, text: str, labels: list[str] | None = None, *, decider: str | None = None,
                       descriptions: dict[str, str] | None = None, examples: list[dict[str, Any]] | None = None,
                       instructions: str | None = None, multi_label: bool = False, threshold: float | None = None,
                       calibrate: bool | None = None) -> Classification:
        if decider is not None:
            found = load_decider(decider)
            decider_labels(found.labels, labels, found.ref)
            return await self._run(decide_flow(found, text, threshold=threshold))
        return await self._run(classify_flow(text, labels or [], descriptions=descriptions, examples=examples,
                                             instructions=instructions, multi_label=multi_label,
                                             threshold=0.5 if threshold is None else threshold,
                                             calibrate=calibrate))

    async def route(self, text: str, routes: list[Route] | list[dict[str, Any]], *, threshold: float = 0.6,
                    redline: bool = True, escalate_target: str = "upstream",
                    upstream: Upstream | dict[str, Any] | None = None, max_tokens: int = 512,
                    decider: str | None = None) -> RouteDecision:
        decision = await self._run(route_flow(text, check_routes(routes), threshold=threshold, redline=redline,
                                              escalate_target=escalate_target,
                                              decider=load_decider(decider) if decider else None))
        if decision.escalated and upstream is not None:
            target = check_upstream(upstream)
            decision.sent_text, decision.redacted = escalation_text(text, target)
            async with AsyncBaseClient(target.url, model=target.model, api_key=upstream_key(target)) as remote:
                decision.answer = (await remote.chat(decision.sent_text, max_tokens=max_tokens)).text
        return decision

    async def rewrite(self, query: str, *, mode: str = "rewrite", n: int = 3) -> Rewrite:
        return await self._run(rewrite_flow(query, mode=mode, n=n, model=self.model))

    async def rerank(self, query: str, documents: list[str], *, top_k: int | None = None,
                     mode: str = "pointwise") -> Reranking:
        return await self._run(rerank_flow(query, documents, top_k=top_k, mode=mode,
                                           model=self.model))

    async def redact(self, text: str, *, style: str = "placeholder", use_model: bool = True,
                     types: list[str] | None = None, salt: str = "") -> Redaction:
        return await self._run(redact_flow(text, style=style, use_model=use_model, types=types,
                                           salt=salt, model=self.model))

    async def guard(self, text: str, *, decider: str | None = "guard", flag_at: float | None = None,
                    block_at: float | None = None, policies: list[str] | None = None,
                    use_model: bool = False) -> GuardVerdict:
        return await self._run(guard_flow(text, decider=load_decider(decider) if decider else None,
                                          flag_at=flag_at, block_at=block_at, policies=policies,
                                          use_model=use_model))

    async def compress(self, text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024,
                       question: str | None = None) -> Compression:
        return await self._run(compress_flow(text, budget_tokens=budget_tokens,
                                             chunk_tokens=chunk_tokens, question=question, model=self.model))

    async def summarize(self, text: str, *, words: int = 80, chunk_tokens: int = 1024) -> Summary:
        return await self._run(summarize_flow(text, words=words, chunk_tokens=chunk_tokens,
                                              model=self.model))

    async def tag(self, text: str, *, schema: Any = None, max_keywords: int = 8) -> Structured[Any]:
        return await self._run(tag_flow(text, schema=schema, max_keywords=max_keywords,
                                        model=self.model))
