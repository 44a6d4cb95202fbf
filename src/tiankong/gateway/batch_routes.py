"""The OpenAI Batch API on the gateway: ``/v1/files`` and ``/v1/batches`` (the openai SDK's ``files`` and
``batches``), run by ``batch_runner.BatchRunner`` on the engines' idle slots.

Every file and batch belongs to the API key that created it (its hash; "" on a keyless loopback gateway): a
key lists, reads, downloads, deletes and cancels only its own — another key's id is answered 404, the same as
an id that does not exist. Errors are OpenAI-shaped; an upload that is not a valid batch input is a 400 naming
its bad lines; ids in messages are cut to 64 characters.

A gateway shared by several keys: the folder is private (0700, files 0600) and records the owners as the keys'
hashes keyed with a per-installation salt (``keys.owner_id``; records of an older version, with the plain hash,
are rewritten at start-up for the configured keys). Every call counts against the key's ``rpm``; each key has
its own limits on the bytes and files it keeps, its unfinished batches and their pending lines
(``batches.key_max_*``: 429 ``quota_exceeded`` naming the limit); files expire (``batches.file_ttl_s``) and are
removed; ``completion_window`` is one of ``batches.completion_windows``, matched exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..batch.batches import BatchNotFound, BatchStore, check_metadata, window_s
from ..batch.batches import public as batch_object
from ..batch.files import FileInUse, FileNotFound, FileStore, QuotaExceeded, cut_id, migrate_batch_owners, private_dir
from ..batch.files import public as file_object
from ..batch.openai_fmt import ENDPOINTS
from ..config import BatchesSettings
from ..errors import ConfigError, TiankongError
from ..paths import data_dir
from .batch_runner import BatchRunner
from .body import read_json
from .keys import ApiKey, owner_id, owner_salt
from .responses import error_response

Authenticate = Callable[[Request], tuple[ApiKey | None, Response | None]]
Admit = Callable[[ApiKey], Response | None]  # the key's rpm: None, or the 429 to answer
ID_LIMIT = 64
SWEEP_EVERY_S = 60.0
BATCH_FIELDS = {"input_file_id", "endpoint", "completion_window", "metadata"}
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and headers around the file
UPLOAD_TIMEOUT_S = 600.0


class BatchApi:
    """The stores, the runner and the routes of the Batch API."""

    def __init__(self, settings: BatchesSettings, callers: dict[str, ApiKey], *, concurrency: Callable[[], int],
                 timeout_s: float, max_body_bytes: int, key_hashes: Iterable[str] = ()) -> None:
        self.settings = settings
        root = private_dir(Path(settings.dir) if settings.dir else data_dir() / "batches")
        self.salt = owner_salt(root / "owner-salt")
        self.files = FileStore(root, max_bytes=settings.max_file_bytes, max_requests=settings.max_requests,
                               ttl_s=settings.file_ttl_s)
        legacy = {h: owner_id(self.salt, h) for h in key_hashes if h}  # an older version's unsalted owners
        self.files.migrate_owners(legacy)
        migrate_batch_owners(root / "batches", legacy)
        self.store = BatchStore(root)
        self.runner = BatchRunner(self.files, self.store, callers, concurrency=concurrency,
                                  engine_wait_s=settings.engine_wait_s, timeout_s=timeout_s,
                                  turn_s=settings.turn_s)
        self.max_body_bytes = max_body_bytes
        self._locks: dict[str, asyncio.Lock] = {}

    def summary(self, handles: list[Any]) -> dict[str, Any]:
        """What ``/ui`` shows: lines in flight and waiting on the engines, lines pending, the running batch."""
        running = self.runner.running
        return {"in_flight": sum(h.admission.batch_in_flight for h in handles),
                "waiting": sum(h.admission.batch_waiting for h in handles), "pending": self.runner.pending(),
                "by_status": self.store.status_counts(),
                "running": {"id": running, "request_counts": self.runner.counts_of(running)} if running else None}

    def owner(self, key: ApiKey) -> str:
        return owner_id(self.salt, key.hash)

    def routes(self, authenticate: Authenticate, admit: Admit = lambda key: None) -> list[Route]:
        def owned(handler: Callable[[Request, str], Any]) -> Callable[[Request], Any]:
            async def endpoint(request: Request) -> Response:
                key, refusal = authenticate(request)
                if refusal is not None or key is None:
                    assert refusal is not None
                    return refusal
                if key.batch:  # a batch line cannot start or read batches
                    return error_response(403, "batch lines cannot call the Batch API", "invalid_request_error",
                                          "forbidden")
                if (refused := admit(key)) is not None:
                    return refused
                try:
                    _check_ids(request.path_params)
                    result: Response = await handler(request, self.owner(key))
                except TiankongError as exc:
                    return error_response(exc.http_status, exc.one_line(), exc.type, getattr(exc, "code", None),
                                          param=exc.param)
                return result

            return endpoint

        return [
            Route("/v1/files", owned(self.upload), methods=["POST"]),
            Route("/v1/files", owned(self.list_files), methods=["GET"]),
            Route("/v1/files/{file_id}", owned(self.get_file), methods=["GET"]),
            Route("/v1/files/{file_id}", owned(self.delete_file), methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", owned(self.file_content), methods=["GET"]),
            Route("/v1/batches", owned(self.create_batch), methods=["POST"]),
            Route("/v1/batches", owned(self.list_batches), methods=["GET"]),
            Route("/v1/batches/{batch_id}", owned(self.get_batch), methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", owned(self.cancel_batch), methods=["POST"]),
        ]

    # --- files -----------------------------------------------------------------------------------------------

    async def upload(self, request: Request, owner: str) -> Response:
        declared = request.headers.get("content-length", "")
        if not declared.isdigit():
            return error_response(411, "send the upload with a Content-Length", "invalid_request_error",
                                  "length_required")
        if int(declared) > self.settings.max_file_bytes + FORM_OVERHEAD:
            return error_response(413, f"the upload is larger than the limit of {self.settings.max_file_bytes} "
                                  "bytes; split it into several batches", "invalid_request_error", "file_too_large")
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise ConfigError("upload a file as multipart/form-data with the fields file and purpose",
                              hint="client.files.create(file=open('requests.jsonl', 'rb'), purpose='batch')")
        try:
            async with asyncio.timeout(UPLOAD_TIMEOUT_S):
                form = await request.form(max_files=1, max_fields=8)
        except HTTPException as exc:
            raise ConfigError(f"the multipart body could not be read: {exc.detail}") from None
        except TimeoutError:
            return error_response(408, f"the upload did not arrive within {UPLOAD_TIMEOUT_S:g} s",
                                  "invalid_request_error", "body_timeout")
        try:
            file, purpose = form.get("file"), form.get("purpose")
            if not isinstance(file, UploadFile):
                raise _param(ConfigError("the form has no file field", hint="send the JSONL as the field file"),
                             "file")
            if not isinstance(purpose, str):
                raise _param(ConfigError("the form has no purpose field", hint="send purpose=batch"), "purpose")
            async with self._locks.setdefault(owner, asyncio.Lock()):  # a key's uploads one by one: quotas hold
                await asyncio.to_thread(self._room_for_file, owner, int(declared))
                record = await asyncio.to_thread(self.files.upload, file.file, filename=file.filename or "",
                                                 purpose=purpose, owner=owner)
        finally:
            await form.close()
        return JSONResponse(record)

    def _room_for_file(self, owner: str, size: int) -> None:
        """QuotaExceeded when one more file of ``size`` bytes would pass the owner's limits."""
        self.sweep()
        count, stored = self.files.usage(owner)
        limits = self.settings
        if count + 1 > limits.key_max_files:
            raise QuotaExceeded("key_max_files", limits.key_max_files, f"this API key keeps {count} files",
                                "delete files it no longer needs (DELETE /v1/files/{id})")
        if stored + size > limits.key_max_stored_bytes:
            raise QuotaExceeded("key_max_stored_bytes", limits.key_max_stored_bytes,
                                f"this API key keeps {stored} bytes of files and the upload is up to {size} more",
                                "delete files it no longer needs (DELETE /v1/files/{id})")

    def sweep(self) -> list[str]:
        """Remove the expired files (not the inputs of unfinished batches)."""
        return self.files.sweep({str(b["input_file_id"]) for b in self.store.unfinished()})

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.to_thread(self.sweep)
            await asyncio.sleep(SWEEP_EVERY_S)

    async def list_files(self, request: Request, owner: str) -> Response:
        data = await asyncio.to_thread(self.files.listing, owner, request.query_params.get("purpose"))
        return JSONResponse({"object": "list", "data": data, "has_more": False,
                             "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None})

    async def get_file(self, request: Request, owner: str) -> Response:
        return JSONResponse(file_object(self.files.record(request.path_params["file_id"], owner)))

    async def delete_file(self, request: Request, owner: str) -> Response:
        file_id = request.path_params["file_id"]
        self.files.record(file_id, owner)
        for batch in self.store.unfinished():
            if batch["input_file_id"] == file_id:
                raise FileInUse(f"file {file_id} is the input of batch {batch['id']}, which is {batch['status']}",
                                hint=f"cancel it first (POST /v1/batches/{batch['id']}/cancel) or let it finish")
        self.files.delete(file_id, owner)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    async def file_content(self, request: Request, owner: str) -> Response:
        file_id = request.path_params["file_id"]
        self.files.record(file_id, owner)  # a 404 before the stream starts
        return StreamingResponse(self.files.chunks(file_id, owner), media_type="application/octet-stream")

    # --- batches ---------------------------------------------------------------------------------------------

    async def create_batch(self, request: Request, owner: str) -> Response:
        body = await read_json(request, self.max_body_bytes)
        if isinstance(body, JSONResponse):
            return body
        unknown = sorted(set(body) - BATCH_FIELDS)
        if unknown:
            raise _param(ConfigError(f"unknown batch field(s) {unknown}",
                                     hint=f"fields: {', '.join(sorted(BATCH_FIELDS))}"), unknown[0])
        endpoint, file_id = body.get("endpoint"), body.get("input_file_id")
        if endpoint not in ENDPOINTS:
            raise _param(ConfigError(f"endpoint {endpoint!r} is not supported",
                                     hint="use /v1/chat/completions, /v1/completions, /v1/embeddings or "
                                          "/v1/tasks/<task>"), "endpoint")
        if not isinstance(file_id, str):
            raise _param(ConfigError("input_file_id must be the id of an uploaded file"), "input_file_id")
        window = body.get("completion_window", "24h")
        if not isinstance(window, str) or window not in self.settings.completion_windows:
            raise _param(ConfigError(f"completion_window {cut_id(window)!r} is not offered here",
                                     hint=f"use one of {', '.join(self.settings.completion_windows)} "
                                          "(batches.completion_windows)"), "completion_window")
        window_s(window)
        metadata = check_metadata(body.get("metadata"))
        record = self.files.record(file_id, owner)
        if record.get("purpose") != "batch":
            raise _param(ConfigError(f"file {file_id} is not a batch input (purpose {record.get('purpose')})"),
                         "input_file_id")
        urls = record.get("urls") or []
        if urls != [endpoint]:
            raise _param(ConfigError(f"the file's requests go to {', '.join(urls)}, not to the batch's endpoint "
                                     f"{endpoint}", hint="a batch's lines all use its endpoint as url"), "endpoint")
        requests = int(record.get("requests") or 0)
        if requests > self.settings.max_requests:
            raise _param(ConfigError(f"the file holds {requests} requests; a batch takes at most "
                                     f"{self.settings.max_requests}", hint="split it into several batches"),
                         "input_file_id")
        self._room_for_batch(owner, requests)
        batch = self.store.create(owner=owner, endpoint=endpoint, input_file_id=file_id, completion_window=window,
                                  metadata=metadata, total=requests)
        self.runner.submit(batch["id"])
        return JSONResponse(batch)

    def _room_for_batch(self, owner: str, requests: int) -> None:
        mine = [b for b in self.store.unfinished() if b.get("owner", "") == owner]
        limits = self.settings
        if len(mine) + 1 > limits.key_max_open_batches:
            raise QuotaExceeded("key_max_open_batches", limits.key_max_open_batches,
                                f"this API key has {len(mine)} unfinished batches",
                                "wait for one to finish or cancel one (POST /v1/batches/{id}/cancel)")
        pending = sum(_left(self.runner.counts_of(b["id"])) for b in mine)
        if pending + requests > limits.key_max_pending_requests:
            raise QuotaExceeded("key_max_pending_requests", limits.key_max_pending_requests,
                                f"this API key's unfinished batches have {pending} lines to run and this one "
                                f"{requests}", "wait for them to run, or cancel a batch")

    async def list_batches(self, request: Request, owner: str) -> Response:
        raw = request.query_params.get("limit", "20")
        if not raw.isdigit():
            raise _param(ConfigError("limit must be a whole number from 1 to 100"), "limit")
        after = request.query_params.get("after")
        if after is not None and len(after) > ID_LIMIT:
            raise BatchNotFound(f"no batch {cut_id(after)!r} to list after", hint="pass the last id of a page")
        page = self.store.listing(owner, after=after, limit=int(raw))
        page["data"] = [self.runner.describe(record) for record in page["data"]]
        return JSONResponse(page)

    async def get_batch(self, request: Request, owner: str) -> Response:
        return JSONResponse(self.runner.describe(batch_object(self.store.get(request.path_params["batch_id"], owner))))

    async def cancel_batch(self, request: Request, owner: str) -> Response:
        return JSONResponse(batch_object(await self.runner.cancel(request.path_params["batch_id"], owner)))


class BatchCollector(Collector):
    """``/metrics``: batches by status and the request lines still to run (read at scrape time)."""

    def __init__(self, api: BatchApi) -> None:
        self.api = api

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        batches = GaugeMetricFamily("tiankong_batches", "Batch API batches by status", labels=["status"])
        for status, count in sorted(self.api.store.status_counts().items()):
            batches.add_metric([status], count)
        yield batches
        yield GaugeMetricFamily("tiankong_batch_pending_requests", "Request lines of unfinished batches not yet "
                                "answered", value=self.api.runner.pending())


def _left(counts: dict[str, int]) -> int:
    return max(0, counts["total"] - counts["completed"] - counts["failed"])


def _check_ids(params: dict[str, Any]) -> None:
    """An id longer than any the gateway makes is not found, and is not echoed whole."""
    if len(str(params.get("file_id", ""))) > ID_LIMIT:
        raise FileNotFound(f"no file {cut_id(params['file_id'])!r}", hint="list your files: GET /v1/files")
    if len(str(params.get("batch_id", ""))) > ID_LIMIT:
        raise BatchNotFound(f"no batch {cut_id(params['batch_id'])!r}", hint="list your batches: GET /v1/batches")


def _param(exc: TiankongError, param: str) -> TiankongError:
    exc.param = param
    return exc
