"""``verify``: size, sha256, GGUF header, chat template, and one real short generation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidModelFile, ModelNotInstalled, TiankongError
from .gguf_meta import read_gguf
from .registry import broken_record, resolve, resolve_installed, sha256_file


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class VerifyReport:
    name: str
    path: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append(Check(name, ok, detail))
        return ok

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "ok": self.ok,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks]}


def verify_model(name: str, *, generate: bool = True, llama_server: str | None = None) -> VerifyReport:
    """Run every check; stops at the first failure that makes later checks meaningless."""
    try:
        record = resolve_installed(name)
    except (ModelNotInstalled, InvalidModelFile):  # a broken entry (a file cut short, a damaged manifest): checked
        broken = broken_record(name) or broken_record(_full_name(name))
        if broken is None or not broken.path.is_file():
            raise
        record = broken
    report = VerifyReport(record.name, str(record.path))
    expected_bytes = record.catalog.bytes if record.catalog else record.bytes
    expected_sha = record.catalog.sha256 if record.catalog else record.sha256
    actual = record.path.stat().st_size
    size_ok = report.add("size", not expected_bytes or actual == expected_bytes,
                         f"{actual} bytes" + (f" (expected {expected_bytes})" if expected_bytes else ""))
    if expected_sha:
        digest = sha256_file(record.path)
        report.add("sha256", digest == expected_sha,
                   digest if digest == expected_sha else f"{digest} (expected {expected_sha})")
    try:
        info = read_gguf(record.path)
    except TiankongError as exc:
        report.add("gguf", False, exc.one_line())
        return report
    report.add("gguf", True, f"{info.architecture}, {info.parameters / 1e6:.0f}M parameters, {info.file_type}")
    wants_template = record.catalog.chat_template if record.catalog else info.chat_template
    report.add("chat_template", info.chat_template == wants_template,
               "present" if info.chat_template else "absent (completion-only model)")
    if generate and size_ok and report.ok:
        if record.catalog is not None and record.catalog.kind == "embedding":
            _embedding_check(report, record.path, llama_server, info.embedding)
        else:
            _generation_check(report, record.path, llama_server)
    return report


def _full_name(name: str) -> str:
    """A catalog model's full name for a short one (``smollm2`` → ``smollm2-135m-instruct:q4_0``)."""
    try:
        return resolve(name).name
    except TiankongError:
        return name


def _embedding_check(report: VerifyReport, path: Any, llama_server: str | None, dims: int) -> None:
    """A retrieval part: one sentence embedded, of the model's width, near-duplicates closer than unrelated text."""
    import httpx

    from ..engine.launcher import launch
    from ..engine.settings import engine_config, engine_keys

    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."]
    try:
        config = engine_config(engine_keys(ctx=512, slots=1, embeddings=True, pooling="mean"), path, batch=512,
                               ubatch=512)
        with launch(config, llama_server) as engine:
            answer = httpx.post(f"{engine.url}/v1/embeddings", json={"input": texts}, timeout=60).json()
            vectors = [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]
        near, far = _cos(vectors[0], vectors[1]), _cos(vectors[0], vectors[2])
        ok = all(len(v) == dims for v in vectors) and near > far
        report.add("embedding", ok, f"{len(vectors[0])} dims; cosine {near:.3f} (paraphrase) vs {far:.3f} (unrelated)")
    except (TiankongError, httpx.HTTPError, ValueError, KeyError) as exc:
        detail = exc.one_line() if isinstance(exc, TiankongError) else str(exc)
        report.add("embedding", False, detail)


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
    return dot / norm if norm else 0.0


def _generation_check(report: VerifyReport, path: Any, llama_server: str | None) -> None:
    import httpx

    from ..engine.launcher import launch  # engine is a sibling layer; import lazily
    from ..engine.settings import engine_config, engine_keys

    try:
        config = engine_config(engine_keys(ctx=512, slots=1), path)
        with launch(config, llama_server) as engine:
            body = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0, "seed": 42}
            answer = httpx.post(f"{engine.url}/completion", json=body, timeout=60).json()
            text = str(answer.get("content", ""))
            tokens = int(answer.get("tokens_predicted", 0))
            report.add("generation", tokens > 0, f"{tokens} tokens in {engine.ready_seconds:.1f} s start-up: {text!r}")
    except (TiankongError, httpx.HTTPError, ValueError) as exc:
        detail = exc.one_line() if isinstance(exc, TiankongError) else str(exc)
        report.add("generation", False, detail)
