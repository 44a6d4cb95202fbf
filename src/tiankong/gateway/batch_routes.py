"""The OpenAI Batch API on the gateway: ``/v1/files`` and ``/v1/batches`` (the openai SDK's ``files`` and
``batches``), run by ``batch_runner.BatchRunner`` on the engines' idle slots.

Every file and batch belongs to the API key that created it (its hash; "" on a keyless loopback gateway): a
key lists, reads, downloads, deletes and cancels only its own — another key's id is answered 404, the same as
an id that does not exist. Errors are OpenAI-shaped; an upload that is not a valid batch input is a 400 naming
its bad lines.
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

from ..batch.batches import BatchStore, check_metadata, window_s
from ..batch.batches import public as batch_object
from ..batch.files import FileInUse, FileStore
from ..batch.files import public as file_object
from ..batch.openai_fmt import ENDPOINTS
from ..config import BatchesSettings
from ..errors import ConfigError, TiankongError
from ..paths import data_dir
from .batch_runner import BatchRunner
from .body import read_json
from .keys import ApiKey
from .responses import error_response

Authenticate = Callable[[Request], tuple[ApiKey | None, Response | None]]
BATCH_FIELDS = {"input_file_id", "endpoint", "completion_window", "metadata"}
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and headers around the file
UPLOAD_TIMEOUT_S = 600.0


class BatchApi:
    """The stores, the runner and the routes of the Batch API."""

    def __init__(self, settings: BatchesSettings, callers: dict[str, ApiKey], *, concurrency: Callable[[], int],
                 timeout_s: float, max_body_bytes: int) -> None:
        self.settings = settings
        root = Path(settings.dir) if settings.dir else data_dir() / "batches"
        self.files = FileStore(root, max_bytes=settings.max_file_bytes, max_requests=settings.max_requests)
        self.store = BatchStore(root)
        self.runner = BatchRunner(self.files, self.store, callers, concurrency=concurrency,
                                  engine_wait_s=settings.engine_wait_s, timeout_s=timeout_s)
        self.max_body_bytes = max_body_bytes

    def summary(self, handles: list[Any]) -> dict[str, Any]:
        """What ``/ui`` shows: lines in flight and waiting on the engines, lines pending, the running batch."""
        running = self.runner.running
        return {"in_flight": sum(h.admission.batch_in_flight for h in handles),
                "waiting": sum(h.admission.batch_waiting for h in handles), "pending": self.runner.pending(),
                "by_status": self.store.status_counts(),
                "running": {"id": running, "request_counts": self.runner.counts_of(running)} if running else None}

    def routes(self, authenticate: Authenticate) -> list[Route]:
        def owned(handler: Callable[[Request, str], Any]) -> Callable[[Request], Any]:
            async def endpoint(request: Request) -> Response:
                key, refusal = authenticate(request)
                if refusal is not None or key is None:
                    assert refusal is not None
                    return refusal
                if key.batch:  # a batch line cannot start or read batches
                    return error_response(403, "batch lines cannot call the Batch API", "invalid_request_error",
                                          "forbidden")
                try:
                    result: Response = await handler(request, key.hash)
                except TiankongError as exc:
                    return error_response(exc.http_status, exc.one_line(), exc.type, param=exc.param)
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
            record = await asyncio.to_thread(self.files.upload, file.file, filename=file.filename or "",
                                             purpose=purpose, owner=owner)
        finally:
            await form.close()
        return JSONResponse(record)

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
        batch = self.store.create(owner=owner, endpoint=endpoint, input_file_id=file_id, completion_window=window,
                                  metadata=metadata, total=requests)
        self.runner.submit(batch["id"])
        return JSONResponse(batch)

    async def list_batches(self, request: Request, owner: str) -> Response:
        raw = request.query_params.get("limit", "20")
        if not raw.isdigit():
            raise _param(ConfigError("limit must be a whole number from 1 to 100"), "limit")
        page = self.store.listing(owner, after=request.query_params.get("after"), limit=int(raw))
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


def _param(exc: TiankongError, param: str) -> TiankongError:
    exc.param = param
    return exc
