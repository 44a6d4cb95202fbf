"""`tiankong bench speed|ladder`: tiny real runs on SmolLM2 (one engine at a time, 1 thread), the knee rule on
synthetic step tables, the PNG/SVG/HTML writers, and bad input (a URL that is not an OpenAI-compatible server,
bad levels, a prompt longer than the context). Nothing is timed: structure, validity and ordering only.
"""

from __future__ import annotations

import csv
import http.server
import json
import math
import struct
import xml.dom.minidom
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, run_cli
from helpers.cloud_like import serve_handler
from tiankong.bench import Knee, StepResult, find_knee
from tiankong.bench.chart import Chart, Marker, Panel, Series, to_html, to_png, to_svg
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.errors import ConfigError
from tiankong.models import TEST_MODEL

# --- knee rule (pure) -----------------------------------------------------------------------------


def step(concurrency: int, tok_per_s: float, p99_s: float, errors: int = 0, requests: int = 8) -> StepResult:
    completed = requests - errors
    return StepResult(concurrency=concurrency, requests=requests, completed=completed, errors=errors, wall_s=1.0,
                      completion_tokens=int(tok_per_s), req_per_s=completed / 1.0, tok_per_s=tok_per_s,
                      ttft_p50_s=0.1, ttft_p99_s=0.2, latency_p50_s=p99_s / 2, latency_p99_s=p99_s)


def test_knee_where_throughput_flattens_and_p99_climbs() -> None:
    steps = [step(1, 50, 1.0), step(2, 90, 1.1), step(4, 150, 1.3), step(8, 160, 2.6), step(16, 158, 5.0)]
    knee = find_knee(steps)
    assert isinstance(knee, Knee)
    assert knee.found and knee.concurrency == 4 and knee.recommended == 2  # floor(0.7 × 4)
    assert knee.metric == "tok_per_s"


def test_knee_ignores_input_order_and_uses_the_cap_fraction() -> None:
    steps = [step(32, 402, 9.0), step(8, 300, 1.2), step(1, 60, 1.0), step(16, 400, 2.0), step(2, 110, 1.05),
             step(4, 200, 1.1)]
    knee = find_knee(steps)
    assert knee.concurrency == 16 and knee.recommended == 11  # floor(0.7 × 16)
    assert find_knee(steps, cap_fraction=0.5).recommended == 8


def test_flat_throughput_without_a_p99_climb_is_not_a_knee() -> None:
    steps = [step(1, 100, 1.0), step(2, 104, 1.02), step(4, 190, 1.1), step(8, 195, 2.5)]
    knee = find_knee(steps)
    assert knee.concurrency == 4  # 1→2 is flat but p99 held; 4→8 is the bend


def test_no_knee_when_throughput_keeps_growing() -> None:
    steps = [step(1, 50, 1.0), step(2, 95, 1.05), step(4, 180, 1.2), step(8, 330, 1.5)]
    knee = find_knee(steps)
    assert not knee.found and knee.concurrency is None and knee.recommended == 8


def test_failed_requests_end_the_climb() -> None:
    knee = find_knee([step(1, 50, 1.0), step(2, 95, 1.05), step(4, 180, 1.2, errors=3)])
    assert knee.found and knee.concurrency == 2 and knee.recommended == 1
    first = find_knee([step(1, 0, math.nan, errors=8), step(2, 0, math.nan, errors=8)])
    assert not first.found and first.recommended == 1


def test_requests_per_second_when_no_tokens_are_reported() -> None:
    steps = [step(c, 0.0, p) for c, p in ((1, 1.0), (2, 1.1), (4, 2.5))]
    for s, rate in zip(steps, (1.0, 1.9, 2.0), strict=True):
        s.req_per_s = rate
    knee = find_knee(steps)
    assert knee.metric == "req_per_s" and knee.concurrency == 2 and knee.recommended == 1


def test_no_steps_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        find_knee([])


def test_llama_bench_records_become_rows() -> None:
    from tiankong.bench.llamabench import parse_row

    pp = parse_row({"n_prompt": 128, "n_gen": 0, "n_threads": 2, "samples_ts": [100.0, 120.0, 90.0]})
    assert (pp.source, pp.prompt_tokens, pp.runs, pp.pp_tok_s, pp.pp_tok_s_min, pp.tg_tok_s) == (
        "llama-bench", 128, 3, 100.0, 90.0, None)
    tg = parse_row({"n_prompt": 0, "n_gen": 32, "n_threads": 1, "avg_ts": 25.0})
    assert (tg.gen_tokens, tg.tg_tok_s, tg.pp_tok_s, tg.threads) == (32, 25.0, None, 1)


# --- charts -----------------------------------------------------------------------------------------


def assert_png(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks: dict[bytes, bytes] = {}
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    channels = {2: 3, 6: 4}[color]  # RGB or RGBA, 8 bits each
    assert depth == 8 and len(zlib.decompress(chunks[b"IDAT"])) == height * (1 + channels * width)
    assert b"IEND" in chunks
    return width, height


def test_chart_png_svg_html_are_valid() -> None:
    panel = Panel("Throughput", "concurrent requests", "tokens/s",
                  [Series("tokens/s", [(1, 50.0), (2, 90.0), (4, 150.0), (8, math.nan)])], [Marker(3, "cap 3")])
    chart = Chart("tiankong bench ladder: test <&>", "subtitle", [panel, panel])
    width, height = assert_png(to_png(chart))
    assert (width, height) == (chart.width, 56 + 2 * chart.panel_height)
    xml.dom.minidom.parseString(to_svg(chart))  # well-formed, the title escaped
    page = to_html(chart, [{"concurrency": 1, "tok_per_s": 50.0}], ["a note"])
    assert page.startswith("<!doctype html>") and "<svg" in page and "<table>" in page and "&lt;&amp;&gt;" in page


# --- real runs ----------------------------------------------------------------------------------------


def read_outputs(folder: Path, kind: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    for ext in ("json", "csv", "png", "html"):
        assert (folder / f"{kind}.{ext}").is_file(), ext
    assert_png((folder / f"{kind}.png").read_bytes())
    assert "<svg" in (folder / f"{kind}.html").read_text(encoding="utf-8")
    with (folder / f"{kind}.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return json.loads((folder / f"{kind}.json").read_text(encoding="utf-8")), rows


def test_bench_speed_managed(tmp_path: Path) -> None:
    proc = run_cli("bench", "speed", "--model", TEST_MODEL, "--prompt-lengths", "16,48", "--threads", "1",
                   "--ctx", "256", "--repeats", "2", "--gen-tokens", "4", "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows = report["rows"]
    assert [r["prompt_tokens"] for r in rows] == [16, 48]
    for row in rows:
        assert row["source"] == "llama-server" and row["threads"] == 1 and row["ctx"] == 256 and row["runs"] == 2
        for key in ("pp_tok_s", "tg_tok_s", "ttft_s"):
            assert row[f"{key.removesuffix('_s')}_min_s" if key == "ttft_s" else f"{key}_min"] <= row[key]
            assert row[key] > 0
    saved, csv_rows = read_outputs(tmp_path, "speed")
    assert saved["rows"] == rows and len(csv_rows) == 2 and sorted(report["files"]) == sorted(
        str(tmp_path / f"speed.{ext}") for ext in ("json", "csv", "png", "html"))


def test_bench_ladder_managed(tmp_path: Path) -> None:
    proc = run_cli("bench", "ladder", "--model", TEST_MODEL, "--slots", "2", "--slot-ctx", "256", "--threads", "1",
                   "--levels", "1,2", "--requests-per-level", "2", "--max-tokens", "8", "--out", str(tmp_path),
                   "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [s["concurrency"] for s in report["steps"]] == [1, 2]
    for s in report["steps"]:
        assert s["requests"] == 2 and s["completed"] == 2 and s["errors"] == 0
        assert s["completion_tokens"] == 16  # ignore_eos: exactly max_tokens each
        assert 0 < s["ttft_p50_s"] <= s["latency_p50_s"] and s["latency_p50_s"] <= s["latency_p99_s"]
    knee = report["knee"]
    assert knee["recommended"] >= 1 and knee["concurrency"] in (None, 1, 2) and knee["reason"]
    assert report["slots"] == 2 and report["server_kind"] == "llama.cpp"
    _, csv_rows = read_outputs(tmp_path, "ladder")
    assert [int(r["concurrency"]) for r in csv_rows] == [1, 2]


def test_bench_against_a_url(tmp_path: Path, engine_binary: EngineBinary, smol_path: Path) -> None:
    config = EngineConfig(model=smol_path, ctx=512, slots=2, threads=1, alias=TEST_MODEL)
    with EngineProcess(config, engine_binary) as engine:
        ladder = run_cli("bench", "ladder", "--url", engine.url + "/v1", "--levels", "1,2", "--requests-per-level",
                         "2", "--max-tokens", "4", "--out", str(tmp_path / "l"))
        speed = run_cli("bench", "speed", "--url", engine.url, "--prompt-lengths", "8", "--repeats", "1",
                        "--gen-tokens", "2", "--out", str(tmp_path / "s"), "--json")
        with_threads = run_cli("bench", "speed", "--url", engine.url, "--threads", "1")
    assert ladder.returncode == 0, ladder.stderr
    assert "recommended concurrency cap" in ladder.stdout
    assert speed.returncode == 0, speed.stderr
    assert json.loads(speed.stdout)["rows"][0]["ctx"] == 256  # per slot, from the server's /props
    assert_one_line_error(with_threads, "--model")
    read_outputs(tmp_path / "l", "ladder")


# --- bad input ----------------------------------------------------------------------------------------


class _NotOpenAI(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        page = b"<html><body>not an API</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        pass


class _HtmlModels(_NotOpenAI):
    def do_GET(self) -> None:  # noqa: N802
        page = b"<html>models</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


class _Unauthorized(_NotOpenAI):
    def do_GET(self) -> None:  # noqa: N802
        page = b'{"error": {"message": "no key", "type": "authentication_error", "code": 401}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@pytest.fixture
def not_openai() -> Iterator[str]:
    with serve_handler(_NotOpenAI) as url:
        yield url


@pytest.fixture
def html_models() -> Iterator[str]:
    with serve_handler(_HtmlModels) as url:
        yield url


@pytest.fixture
def needs_key() -> Iterator[str]:
    with serve_handler(_Unauthorized) as url:
        yield url


def test_url_that_is_not_an_openai_server(not_openai: str, html_models: str, needs_key: str, tmp_path: Path) -> None:
    out = str(tmp_path)
    assert_one_line_error(run_cli("bench", "ladder", "--url", not_openai, "--out", out), "not an OpenAI-compatible",
                          "404")
    assert_one_line_error(run_cli("bench", "speed", "--url", not_openai, "--out", out), "not an OpenAI-compatible")
    assert_one_line_error(run_cli("bench", "ladder", "--url", html_models, "--out", out), "not an OpenAI-compatible",
                          "JSON")
    assert_one_line_error(run_cli("bench", "ladder", "--url", needs_key, "--out", out), "401", "--api-key")
    assert not list(tmp_path.iterdir())  # nothing written on failure


def test_unreachable_url_and_bad_arguments(tmp_path: Path) -> None:
    from conftest import free_port

    out = str(tmp_path)
    assert_one_line_error(run_cli("bench", "ladder", "--url", f"http://127.0.0.1:{free_port()}", "--out", out),
                          "cannot reach")
    assert_one_line_error(run_cli("bench", "ladder", "--url", "ftp://example", "--out", out), "URL")
    assert_one_line_error(run_cli("bench", "ladder", "--model", TEST_MODEL, "--levels", "1,x", "--out", out),
                          "--levels")
    assert_one_line_error(run_cli("bench", "ladder", "--model", TEST_MODEL, "--levels", "0,2", "--out", out),
                          "--levels")
    assert_one_line_error(run_cli("bench", "ladder", "--out", out), "--model", "--url")
    assert_one_line_error(run_cli("bench", "speed", "--model", TEST_MODEL, "--prompt-lengths", "600", "--ctx", "512",
                                  "--out", out), "ctx 512")
    assert_one_line_error(run_cli("bench", "speed", "--model", "no-such-model", "--out", out), "no-such-model")
