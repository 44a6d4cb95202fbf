"""CLI verbs end to end: run (arg and stdin), chat, extract, doctor — with one-line errors on bad input."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.cli.task_cmds import render
from tiankong.client._shared import Usage
from tiankong.engine import EngineProcess
from tiankong.models import DEFAULT_MODEL, TEST_MODEL
from tiankong.structured.tools import ToolCalls
from tiankong.tasks.cli_part import calls_line


def test_run_prompt_json_and_stdin(smol_engine: EngineProcess) -> None:
    proc = run_cli("run", "--url", smol_engine.url, "--max-tokens", "8", "--json", "Name a fruit.")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["text"] and data["usage"]["completion_tokens"] > 0 and data["finish_reason"] in ("stop", "length")
    piped = run_cli("run", "--url", smol_engine.url, "--max-tokens", "8", "-", input="Name a fruit.")
    assert piped.returncode == 0 and piped.stdout.strip() == data["text"].strip()
    # plain text cut at the limit says so on stderr (--json has finish_reason); a whole answer says nothing
    cut = run_cli("run", "--url", smol_engine.url, "--max-tokens", "2", "Write a long story about the sea.")
    assert cut.returncode == 0 and cut.stdout.strip() and "cut short" in cut.stderr and "--max-tokens" in cut.stderr
    whole = run_cli("run", "--url", smol_engine.url, "--max-tokens", "64", "--json", "Say OK.")
    if json.loads(whole.stdout)["finish_reason"] == "stop":
        plain = run_cli("run", "--url", smol_engine.url, "--max-tokens", "64", "Say OK.")
        assert plain.returncode == 0 and "cut short" not in plain.stderr


def test_a_task_answer_cut_at_its_token_limit_warns_in_plain_output(capsys: pytest.CaptureFixture[str]) -> None:
    """``call``'s reply in words stops at 512 tokens: plain output printed it as if whole."""
    cut = ToolCalls([], "a reply that", {}, 1, Usage(10, 512), finish_reason="length")
    render(cut, False, calls_line)
    out, err = capsys.readouterr()
    assert out.strip() == "a reply that" and "cut short" in err
    render(ToolCalls([], "a reply.", {}, 1, Usage(10, 3), finish_reason="stop"), False, calls_line)
    assert capsys.readouterr().err == ""


def test_run_with_embedded_engine() -> None:
    proc = run_cli("run", "--model", TEST_MODEL, "--max-tokens", "6", "--json", "Hello")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["usage"]["completion_tokens"] > 0


def test_chat_repl_keeps_history(smol_engine: EngineProcess) -> None:
    script = "My name is Li.\nWhat is my name?\n/exit\n"
    proc = run_cli("chat", "--url", smol_engine.url, "--max-tokens", "8", input=script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(">>> ") == 3


def test_chat_goes_on_past_a_full_context_a_mistyped_command_and_a_message_too_long(smol_engine: EngineProcess
                                                                                     ) -> None:
    """The session ended (status 1, its history lost) once the history outgrew the context; a mistyped command went
    to the model; /reset said nothing (a sweep of 2026-12-08). The oldest turns are dropped to fit; a message too long
    alone is refused and the session goes on."""
    long = "the quick brown fox jumps over the lazy dog " * 130  # ~1,200 tokens: two fill a 2,048-token slot
    script = f"{long}\n{long}\nWhat is 2+2?\n{long * 3}\n/rest\n/reset\nHello\n/exit\n"
    proc = run_cli("chat", "--url", smol_engine.url, "--max-tokens", "4", input=script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(">>> ") == 8  # every line read, the session never ended early
    assert "oldest turns were dropped" in proc.stderr and "shorten the message" in proc.stderr
    assert "unknown command /rest" in proc.stderr and "history cleared" in proc.stderr
    assert "cut short" in proc.stderr  # --max-tokens 4 stops the answers


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def test_extract_from_argument_and_stdin(smol_engine: EngineProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    proc = run_cli("extract", "--url", smol_engine.url, "--schema", str(schema), "Ada Lovelace was 36 years old.")
    assert proc.returncode == 0, proc.stderr
    jsonschema.validate(json.loads(proc.stdout), PERSON)
    piped = run_cli("extract", "--url", smol_engine.url, "--schema", str(schema), "--evidence", "-",
                    input="Ada Lovelace was 36 years old.")
    assert piped.returncode == 0, piped.stderr
    evidence = json.loads(piped.stdout)
    # the same schema-valid shape (not the same digits: llama.cpp's prompt cache makes the second run's prompt
    # evaluation split differently, and CI once saw age 30 vs 31 from it)
    jsonschema.validate(evidence["data"], PERSON)
    assert evidence["data"].keys() == json.loads(proc.stdout).keys()
    assert evidence["attempts"] >= 1 and evidence["usage"]["completion_tokens"] > 0
    assert evidence["enforced_by_validation"] == [] and evidence["minimal"] is False


def test_extract_refuses_bad_schemas_in_one_line(smol_engine: EngineProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = smol_engine.url
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert_one_line_error(run_cli("extract", "--url", url, "--schema", str(broken), "x"), "not valid JSON")
    missing = str(tmp_path / "missing.json")
    assert_one_line_error(run_cli("extract", "--url", url, "--schema", missing, "x"), "cannot read schema file")
    negated = tmp_path / "negated.json"
    negated.write_text(json.dumps({"type": "string", "not": {"const": "x"}}))
    assert_one_line_error(run_cli("extract", "--url", url, "--schema", str(negated), "--strict", "x"), "/not")


def test_doctor_reports_engine_and_models() -> None:
    proc = run_cli("doctor", "--json")
    findings = {f["topic"]: f for f in json.loads(proc.stdout)}
    assert proc.returncode == (0 if all(f["ok"] for f in findings.values()) else 1)  # ≠ 0: something to fix
    assert findings["engine"]["ok"] and findings[f"model {TEST_MODEL}"]["ok"]
    assert {"python", "cpu", "memory", "data dir", "cache dir"} <= set(findings)


def test_doctor_asks_for_the_models_the_user_runs_not_the_default(tmp_path: Path) -> None:
    """A user of another model (TIANKONG_MODEL, or serve's config) was told to pull the default model and doctor
    exited 1; the test model is only ``make test``'s."""
    def findings(env: dict[str, str]) -> tuple[int, dict[str, dict]]:  # type: ignore[type-arg]
        proc = run_cli("doctor", "--json", env=env)
        return proc.returncode, {f["topic"]: f for f in json.loads(proc.stdout)}

    _, other = findings({"TIANKONG_MODEL": TEST_MODEL})
    assert other[f"model {TEST_MODEL}"]["ok"] and f"model {DEFAULT_MODEL}" not in other
    short = TEST_MODEL.split(":")[0]  # as the commands read it: the name without its quant
    assert findings({"TIANKONG_MODEL": short})[1][f"model {short}"]["ok"]
    config = tmp_path / "config.toml"
    config.write_text('[engine]\nmodel = "no-such-model:q4_0"\n')
    code, served = findings({"TIANKONG_MODEL": TEST_MODEL, "TIANKONG_CONFIG": str(config)})
    assert code == 1 and served["config"]["ok"] and not served["model no-such-model:q4_0"]["ok"]
    assert "serve" in served["model no-such-model:q4_0"]["detail"]
    config.write_text('[engine]\nmodle = "x"\n')
    code, broken = findings({"TIANKONG_MODEL": TEST_MODEL, "TIANKONG_CONFIG": str(config)})
    assert code == 1 and not broken["config"]["ok"] and "modle" in broken["config"]["detail"]
    code, empty = findings({"TIANKONG_DATA_DIR": str(tmp_path / "data")})
    assert code == 1 and not empty[f"model {DEFAULT_MODEL}"]["ok"]
    assert empty[f"model {TEST_MODEL}"]["ok"] and "make test" in empty[f"model {TEST_MODEL}"]["detail"]
    # that doctor had no model to smoke-test the build with: the build's recorded result stands (it was replaced
    # by "skipped", and `engine info` then said so — a fresh clone's CI run failed on it)
    info = json.loads(run_cli("engine", "info", "--json").stdout)
    assert info["smoke"] == "ok", info["smoke"]


def test_a_terminated_doctor_takes_its_smoke_engine_with_it() -> None:
    """SIGTERM to `doctor` (or `engine install`) during its smoke test left that llama-server running, owned by
    init: the smoke test started it without the parent-death signal every supervised engine has."""
    import os
    import signal
    import subprocess

    from conftest import TIANKONG, pid_alive, wait_until

    proc = subprocess.Popen([TIANKONG, "doctor"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []

    def engine_started() -> bool:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == proc.pid and b"llama-server" in cmdline:
                children.append(int(entry.name))
                return True
        return False

    try:
        assert wait_until(engine_started, timeout_s=120, step_s=0.05), "doctor started no smoke engine"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert wait_until(lambda: not pid_alive(children[0]), timeout_s=10), "the smoke engine outlived doctor"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in children:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_bad_input_is_one_line_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run_cli("run", "--model", "nosuchmodel", "hi"), "unknown model")
    assert_one_line_error(run_cli("run", "--url", "http://127.0.0.1:9", "hi"), "cannot reach")
    assert_one_line_error(run_cli("models", "add", str(tmp_path / "nope.gguf")), "does not exist")
    assert_one_line_error(run_cli("models", "pull", "gpt-5"), "unknown model")


def test_help_everywhere() -> None:
    every = (["--help"], ["engine", "--help"], ["models", "--help"], ["models", "pull", "--help"],
             ["serve", "--help"], ["run", "--help"], ["chat", "--help"], ["doctor", "--help"], ["extract", "--help"])
    with ThreadPoolExecutor(3) as pool:  # independent processes: run side by side
        for args, proc in zip(every, pool.map(lambda a: run_cli(*a), every), strict=True):
            assert proc.returncode == 0 and "Usage:" in proc.stdout, args


def test_default_model_and_config_come_from_the_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run_cli("run", "hi", env={"TIANKONG_MODEL": "no-such-model-xyz"}), "no-such-model-xyz")
    config = tmp_path / "config.toml"
    config.write_text('[server]\nport = "not a port"\n', encoding="utf-8")
    assert_one_line_error(run_cli("serve", env={"TIANKONG_CONFIG": str(config)}), str(config), "server.port")
    home = tmp_path / "xdg"
    (home / "tiankong").mkdir(parents=True)
    (home / "tiankong" / "config.toml").write_text("[nonsense]\n", encoding="utf-8")
    assert_one_line_error(run_cli("serve", env={"XDG_CONFIG_HOME": str(home)}), "nonsense")
    # a TIANKONG_CONFIG that names nothing (a typo) or a directory is an error, not a run on the defaults
    for missing in (tmp_path / "no-such.toml", home):
        assert_one_line_error(run_cli("serve", env={"TIANKONG_CONFIG": str(missing)}), "cannot read the config",
                              str(missing))


def test_listings_share_one_table_style_with_a_header_row() -> None:
    """Issue 45: `deciders list` and `models list` print the same kind of table, a header row first, at 80
    columns no name is cut (the old `deciders list` printed tab-separated rows without a header)."""
    env = {"COLUMNS": "80"}
    for verb, header, name in ((["deciders", "list"], "method", "guard@1"),
                               (["models", "list"], "installed", TEST_MODEL)):
        proc = run_cli(*verb, env=env)
        assert proc.returncode == 0, proc.stderr
        rows = proc.stdout.splitlines()
        assert rows[0].startswith("┏") and "name" in rows[1] and header in rows[1], proc.stdout
        assert all(len(row) <= 80 for row in rows), proc.stdout
        assert any(name in row for row in rows), proc.stdout
