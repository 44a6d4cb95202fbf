"""A remote gateway's Batch API from the CLI (``tiankong batch submit|status|fetch|cancel --url URL``).

The same calls the openai SDK makes (``files.create``, ``batches.create|retrieve|cancel``, ``files.content``),
over httpx, so the CLI needs no SDK. Any OpenAI-compatible Batch API answers them; a tiankong gateway also
takes ``/v1/tasks/<task>`` lines.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ..client.answers import check_response, connect_error
from ..errors import ConfigError

FINAL = ("completed", "failed", "cancelled", "expired")


class BatchService:
    """One gateway's ``/v1/files`` and ``/v1/batches``."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> BatchService:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise connect_error(self.url, exc) from None
        check_response(response.status_code, response.text)
        return response

    def submit(self, input: str | Path, *, endpoint: str | None = None, window: str = "24h",
               metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """Upload a batch input file and start a batch on it; the batch object."""
        path = Path(input)
        if not path.is_file():
            raise ConfigError(f"no input file {path}", hint="pass --input requests.jsonl (OpenAI batch lines)")
        endpoint = endpoint or first_url(path)
        with path.open("rb") as handle:
            uploaded = self._call("POST", "/v1/files", files={"file": (path.name, handle, "application/jsonl")},
                                  data={"purpose": "batch"}).json()
        body: dict[str, Any] = {"input_file_id": uploaded["id"], "endpoint": endpoint, "completion_window": window}
        if metadata:
            body["metadata"] = metadata
        batch: dict[str, Any] = self._call("POST", "/v1/batches", json=body).json()
        return batch

    def status(self, batch_id: str) -> dict[str, Any]:
        batch: dict[str, Any] = self._call("GET", f"/v1/batches/{batch_id}").json()
        return batch

    def cancel(self, batch_id: str) -> dict[str, Any]:
        batch: dict[str, Any] = self._call("POST", f"/v1/batches/{batch_id}/cancel", json={}).json()
        return batch

    def wait(self, batch_id: str, *, poll_s: float = 2.0, timeout_s: float | None = None,
             on_poll: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll until the batch is completed, failed, cancelled or expired (or ``timeout_s`` passed)."""
        started = time.monotonic()
        while True:
            batch = self.status(batch_id)
            if on_poll is not None:
                on_poll(batch)
            if batch["status"] in FINAL or (timeout_s is not None and time.monotonic() - started >= timeout_s):
                return batch
            time.sleep(poll_s)

    def fetch(self, batch_id: str, output: str | Path, errors: str | Path | None = None) -> dict[str, Any]:
        """Download a finished batch's output (and error) file; what was written where."""
        batch = self.status(batch_id)
        if batch["status"] not in FINAL:
            raise ConfigError(f"batch {batch_id} is {batch['status']}, not finished yet",
                              hint=f"wait for it: tiankong batch status {batch_id} --url {self.url} --wait")
        out = Path(output)
        err = Path(errors) if errors else out.with_name(out.name + ".errors.jsonl")
        written: dict[str, Any] = {"batch": batch_id, "status": batch["status"],
                                   "request_counts": batch.get("request_counts")}
        for key, target in (("output_file_id", out), ("error_file_id", err)):
            file_id = batch.get(key)
            if not file_id:
                if key == "error_file_id" and target.is_file():
                    target.unlink()  # an earlier fetch's errors: beside this output they read as this batch's
                    written["removed"] = str(target)
                continue
            self._download(file_id, target)
            written[key.removesuffix("_id")] = str(target)
        return written

    def _download(self, file_id: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        try:
            with self._http.stream("GET", f"/v1/files/{file_id}/content") as response:
                if response.status_code >= 400:
                    response.read()
                    check_response(response.status_code, response.text)
                with part.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
        except httpx.HTTPError as exc:
            raise connect_error(self.url, exc) from None
        part.replace(target)


def first_url(path: Path) -> str:
    """The ``url`` of the first request line (a batch's lines share one endpoint)."""
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    url = json.loads(raw).get("url")
                except (ValueError, AttributeError):
                    break
                if isinstance(url, str):
                    return url
                break
    raise ConfigError(f"{path} does not start with an OpenAI batch line {{custom_id, method, url, body}}",
                      hint="or pass --endpoint")

