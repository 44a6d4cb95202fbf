"""Data cleaning on a client: ``dedupe`` (small inputs, at most ``MAX_DEDUPE_RECORDS``) and ``normalize``.

Both run the library here (``tiankong.dedupe``, ``tiankong.normalize``); the client's engine answers what needs a
model: a decider for dedupe's uncertain band, the extraction of the fields no normalising rule resolves. The
embedding part of the semantic stage runs on its own engine, as in ``tiankong dedupe``. For files and large inputs
use ``tiankong.dedupe.dedupe_file`` / ``tiankong.normalize.normalize_file`` (or the CLI).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..dedupe.core import DEFAULTS, Dedupe, DedupeOptions, Record  # light: no numpy, no faiss
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..normalize import Normalized, NormalizeOptions

#: the stages a call runs by default (the spec's default, a list as in the HTTP body)
ALL_STAGES = ["exact", "near", "semantic"]


@dataclass
class Normalization:
    """``normalize``'s result: one ``Normalized`` per record (input order) and the report."""

    records: list[Normalized]
    report: dict[str, Any]


def _options(options: DedupeOptions | None, given: dict[str, Any]) -> DedupeOptions:
    """The options of a call: the task's parameters (the spec's names and defaults), or ``options`` (which also
    holds the key normalisation and the embedding part) when no parameter differs from its default."""
    changed = {k: v for k, v in given.items() if v != (ALL_STAGES if k == "stages" else getattr(DEFAULTS, k))}
    if options is not None:
        if changed:
            raise ConfigError(f"dedupe got options= and {', '.join(sorted(changed))}",
                              hint="give the thresholds once: as parameters or in options")
        return options
    return DedupeOptions(**{**given, "stages": tuple(given["stages"])})


def _records(records: Sequence[Record | Mapping[str, Any]], field: str, id_field: str) -> list[Record]:
    from ..tasks.specs import MAX_DEDUPE_RECORDS

    if len(records) > MAX_DEDUPE_RECORDS:
        raise ConfigError(f"{len(records)} records is more than a client call takes ({MAX_DEDUPE_RECORDS})",
                          hint="use tiankong.dedupe.dedupe_file or `tiankong dedupe --input FILE`")
    out = []
    for index, record in enumerate(records):
        if isinstance(record, Record):
            out.append(record)
            continue
        rid, text = record.get(id_field), record.get(field)
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            raise ConfigError(f"record {index + 1} has no string or integer {id_field!r}", hint="give each an id")
        if not isinstance(text, str):
            problem = f"has no text field {field!r}" if text is None else \
                f"has a {type(text).__name__} in {field!r}, not text"  # it said "no text field" for a number
            raise ConfigError(f"record {index + 1} {problem}", hint=f"pass field= or give {field} as text")
        out.append(Record(rid, text, dict(record)))
    return out


def _normalizer_options(options: NormalizeOptions | None, rules_only: bool) -> NormalizeOptions:
    from dataclasses import replace

    from ..normalize import NormalizeOptions

    base = options or NormalizeOptions()
    return replace(base, mode="rules") if rules_only else base


class CleaningMethods:
    """``Client.dedupe`` and ``Client.normalize``."""

    if TYPE_CHECKING:  # provided by BaseClient and Client
        def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...
        def extract(self, text: str, schema: Any) -> Any: ...

    def dedupe(self, records: Sequence[Record | Mapping[str, Any]], *, near: float = 0.7,
               near_low: float | None = None, semantic: float | None = None, semantic_low: float | None = None,
               shingle: int | None = None, keep: str = "first",
               stages: Sequence[str] = ALL_STAGES, decider: str | None = None,  # noqa: B006 (never mutated)
               part: str = "", options: DedupeOptions | None = None, field: str = "text",
               id_field: str = "id") -> Dedupe:
        """Clusters of exact, near and semantic duplicates among ``records`` (``Record``s or ``{id, text, …}``
        dicts; the parameters are ``POST /v1/tasks/dedupe``'s, or ``options``); the uncertain band goes to the
        decider on this client's engine."""
        from ..dedupe import dedupe_flow
        from ..structured.drivers import run_sync

        chosen = _options(options, dict(near=near, near_low=near_low, semantic=semantic, semantic_low=semantic_low,
                                        shingle=shingle, keep=keep, stages=list(stages), decider=decider,
                                        part=part))
        return run_sync(dedupe_flow(_records(records, field, id_field), chosen), self._request)

    def normalize(self, records: Sequence[Mapping[str, Any]], schema: dict[str, Any], *,
                  options: NormalizeOptions | None = None, rules_only: bool = False) -> Normalization:
        """``records`` brought to ``schema``: the rules first, this client's model only where no rule resolves."""
        from ..normalize import normalize_records

        chosen = _normalizer_options(options, rules_only)
        results, report = normalize_records([dict(r) for r in records], schema, chosen,
                                            None if chosen.mode == "rules" else self.extract)
        return Normalization(results, report)


class AsyncCleaningMethods:
    """``AsyncClient.dedupe`` and ``AsyncClient.normalize`` (same parameters)."""

    if TYPE_CHECKING:  # provided by AsyncBaseClient and AsyncClient
        async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...
        async def extract(self, text: str, schema: Any) -> Any: ...

    async def dedupe(self, records: Sequence[Record | Mapping[str, Any]], *, near: float = 0.7,
                     near_low: float | None = None, semantic: float | None = None, semantic_low: float | None = None,
                     shingle: int | None = None, keep: str = "first",
                     stages: Sequence[str] = ALL_STAGES, decider: str | None = None,  # noqa: B006
                     part: str = "", options: DedupeOptions | None = None, field: str = "text",
                     id_field: str = "id") -> Dedupe:
        from ..dedupe import dedupe_flow
        from ..structured.drivers import run_async

        chosen = _options(options, dict(near=near, near_low=near_low, semantic=semantic, semantic_low=semantic_low,
                                        shingle=shingle, keep=keep, stages=list(stages), decider=decider,
                                        part=part))
        return await run_async(dedupe_flow(_records(records, field, id_field), chosen), self._request)

    async def normalize(self, records: Sequence[Mapping[str, Any]], schema: dict[str, Any], *,
                        options: NormalizeOptions | None = None, rules_only: bool = False) -> Normalization:
        """The rules run in a worker thread; each model extraction is awaited on this loop."""
        from ..normalize import normalize_records

        chosen = _normalizer_options(options, rules_only)
        loop = asyncio.get_running_loop()

        def extract(text: str, schema: dict[str, Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(self.extract(text, schema), loop).result()

        results, report = await asyncio.to_thread(
            normalize_records, [dict(r) for r in records], schema, chosen,
            None if chosen.mode == "rules" else extract)
        return Normalization(results, report)
