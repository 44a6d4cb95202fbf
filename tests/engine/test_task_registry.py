"""The task registry is the one declaration of every task: HTTP bodies, OpenAPI, CLI options, batch jobs and the
clients' signatures all agree with it (names, defaults, limits)."""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest
from click.testing import CliRunner

from tiankong import AsyncClient, Client
from tiankong.batch import make_job
from tiankong.batch.job import REGISTERED_TASKS
from tiankong.cli import main, task_cmds
from tiankong.errors import ConfigError
from tiankong.gateway.openapi import build_openapi
from tiankong.tasks.specs import SPECS, TASK_SPECS

COMMANDS = task_cmds.COMMANDS
CLI_NAMES = task_cmds.CLI_NAMES
CLIENT_ONLY = {"route": {"upstream", "max_tokens"},  # the client sends an escalated request itself
               "sql": {"db", "execute", "max_rows"},  # a database file is read by the library only
               "dedupe": {"options", "field", "id_field"}}  # DedupeOptions in full; dict records' keys
#: registered tasks whose command is their own (``cli=None``), held to the spec the same way: field → parameter
OWN_COMMANDS = {"dedupe": {"records": "input_path", "stages": "stages"}}  # records from a file; stages a,b,c


def _key(task: str, field: str) -> str:
    """The name a field has on the wire (its alias, e.g. tag's ``schema``)."""
    return SPECS[task].args.model_fields[field].alias or field


def _resolve(schema: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


@pytest.mark.parametrize("task", sorted(SPECS))
def test_every_argument_is_in_the_openapi_body_with_its_default(task: str) -> None:
    doc = build_openapi()
    body = doc["paths"][f"/v1/tasks/{task}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    props = _resolve(body, doc)["properties"]
    for field, info in SPECS[task].args.model_fields.items():
        key = _key(task, field)
        assert key in props, f"{task}.{key} missing from OpenAPI"
        if info.is_required():
            assert key in _resolve(body, doc).get("required", []), f"{task}.{key} should be required"
        elif info.default is not None:
            assert props[key].get("default") == info.default, f"{task}.{key} default differs"
    assert "model" in props


@pytest.mark.parametrize("task", sorted(SPECS))
def test_every_argument_is_a_cli_option_with_the_same_default(task: str) -> None:
    command = next((c for c in COMMANDS if c.name == task), None) or main.get_command(click.Context(main), task)
    assert command is not None and (SPECS[task].cli is None) == (task in OWN_COMMANDS), task
    params = {p.name: p for p in command.params}
    renamed = CLI_NAMES.get(task, OWN_COMMANDS.get(task, {}))
    for field, info in SPECS[task].args.model_fields.items():
        name = renamed.get(field, field)
        assert name in params, f"tiankong {task} has no option for {field}"
        param = params[name]
        if field in renamed or not isinstance(param, click.Option) or param.multiple:
            continue  # read from a file, a repeated flag or the argument
        assert param.default == info.default, f"tiankong {task} {param.opts}: default {param.default!r}, " \
                                              f"spec {info.default!r}"


@pytest.mark.parametrize("task", REGISTERED_TASKS)
def test_batch_jobs_take_every_argument_in_args_and_default_to_the_spec(task: str) -> None:
    spec = SPECS[task]
    required = {"classify": {"labels": ["a", "b"]}, "route": {"routes": [{"name": "x", "target": "task:x"}]}}
    job = make_job(input="in.jsonl", output="out.jsonl", task=task, args=required.get(task, {}))
    args = job.task_args("some text")
    assert getattr(args, spec.text) == "some text"
    for field, default in spec.defaults().items():
        if field not in required.get(task, {}):
            assert getattr(args, field) == default, f"batch {task}.{field}"
    assert job.model_dump(mode="json", by_alias=True)["args"] == required.get(task, {})  # what OUT.job.json holds


def test_the_batch_task_list_and_the_eval_tasks_are_the_batchable_specs() -> None:
    from tiankong.batch.job import TASKS
    from tiankong.evals.format import TASKS as EVAL_TASKS

    batchable = {name for name, spec in TASK_SPECS.items() if spec.batchable}
    assert set(REGISTERED_TASKS) == batchable - {"extract"}
    assert set(TASKS) == batchable | {"chat"} == set(EVAL_TASKS)
    assert "rerank" not in batchable  # a record holds one text; rerank needs documents per record


def test_a_stored_job_with_flat_task_keys_still_resumes_and_is_written_back_with_args(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """OUT.job.json of a run before ``args`` (flat keys): loaded into ``args``, the same arguments."""
    import json

    from tiankong.batch import build_job

    (tmp_path / "s.json").write_text('{"type": "object"}', encoding="utf-8")
    old = tmp_path / "job.toml"
    old.write_text('input = "in.jsonl"\noutput = "out.jsonl"\ntask = "classify"\nlabels = ["a", "b"]\n'
                   'multi_label = true\nwords = 5\n', encoding="utf-8")
    job = build_job(old)
    assert job.args == {"labels": ["a", "b"], "multi_label": True}  # words: not a classify argument (ignored)
    assert job.task_args("t").multi_label is True
    written = job.model_dump(mode="json", by_alias=True)
    assert "labels" not in written and written["args"]["labels"] == ["a", "b"]
    from tiankong.batch.job import LEGACY_KEYS

    dumped = {key: None for key in LEGACY_KEYS if key != "json_schema"}  # an OUT.job.json of a run before args
    dumped.update(input="in.jsonl", output="out.jsonl", format="jsonl", task="redact", use_model=False, style="mask",
                  max_tokens=256, template=None, system=None, url=["http://127.0.0.1:9"])
    stored = tmp_path / "out.jsonl.job.json"
    stored.write_text(json.dumps(dumped), encoding="utf-8")
    assert build_job(stored).args == {"use_model": False, "style": "mask"}
    extract = tmp_path / "x.toml"
    extract.write_text('input = "i"\noutput = "o"\ntask = "extract"\nschema = "s.json"\n', encoding="utf-8")
    assert build_job(extract).args == {"schema": {"type": "object"}}
    new = tmp_path / "n.toml"
    new.write_text('input = "i"\noutput = "o"\ntask = "tag"\n[args]\nschema = "s.json"\nmax_keywords = 3\n',
                   encoding="utf-8")
    assert build_job(new).task_args("t").max_keywords == 3
    with pytest.raises(ConfigError, match="max_keywords"):
        make_job(input="i", output="o", task="tag", args={"max_keywords": 99})
    with pytest.raises(ConfigError, match="comes from each record"):
        make_job(input="i", output="o", task="tag", args={"text": "x"})


def test_eval_items_take_args_and_old_flat_items_keep_their_cache_key() -> None:
    from tiankong.evals.format import EvalItem

    flat = EvalItem.model_validate({"id": "1", "task": "classify", "input": "hi", "labels": ["a", "b"],
                                    "reference": "a"})
    table = EvalItem.model_validate({"id": "1", "task": "classify", "input": "hi", "args": {"labels": ["a", "b"]},
                                     "reference": "a"})
    assert flat.request() == table.request() == {"task": "classify", "input": "hi", "labels": ["a", "b"]}
    summary = EvalItem.model_validate({"id": "2", "task": "summarize", "input": "x", "reference": "y"})
    assert summary.request() == {"task": "summarize", "input": "x", "words": 80}  # as before args
    more = EvalItem.model_validate({"id": "3", "task": "summarize", "input": "x", "reference": "y",
                                    "args": {"chunk_tokens": 256}})
    assert more.request()["args"] == {"chunk_tokens": 256}
    with pytest.raises(ValueError, match="chunk_tokens"):
        EvalItem.model_validate({"id": "4", "task": "summarize", "input": "x", "reference": "y",
                                 "args": {"chunk_tokens": 1}})
    with pytest.raises(ValueError, match="word"):  # an unknown argument in args is refused, not dropped
        EvalItem.model_validate({"id": "5", "task": "summarize", "input": "x", "reference": "y",
                                 "args": {"word": 10}})
    with pytest.raises(ValueError, match="redact takes no words"):  # a flat key redact does not take: refused
        EvalItem.model_validate({"id": "6", "task": "redact", "input": "x", "reference": "y", "words": 5})


#: the registered tasks with their own, explicit client method (the typed way; any task: ``client.task(NAME)``);
#: extract's is ``extract_result`` (``Client.extract`` returns the data itself: a dict or a model instance)
EXPLICIT = sorted(task for task in SPECS if hasattr(Client, task) and task != "extract")


def test_the_shipped_tasks_keep_their_explicit_client_methods() -> None:
    assert {"classify", "route", "rewrite", "rerank", "redact", "guard", "compress", "summarize", "tag", "ask",
            "call", "sql"} <= set(EXPLICIT)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
@pytest.mark.parametrize("task", EXPLICIT)
def test_client_methods_have_the_specs_parameters_and_defaults(cls: type, task: str) -> None:
    """The defaults are written in the spec and again in the signatures (they are the documentation): held equal."""
    signature = inspect.signature(getattr(cls, task))
    params = {name: p for name, p in signature.parameters.items() if name != "self"}
    spec = SPECS[task]
    wire = {_key(task, f): info for f, info in spec.args.model_fields.items()}
    assert set(params) - CLIENT_ONLY.get(task, set()) == set(wire), f"{cls.__name__}.{task} parameters"
    for name, info in wire.items():
        if not info.is_required():
            assert params[name].default == info.default, f"{cls.__name__}.{task}({name}=…) default"


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_extract_result_has_the_specs_parameters(cls: type) -> None:
    """extract's result-typed method takes the spec's arguments (schema positionally: the spec requires one) plus
    the decoding settings a client has and a body does not carry."""
    params = {name: p for name, p in inspect.signature(cls.extract_result).parameters.items() if name != "self"}
    wire = {_key("extract", f): info for f, info in SPECS["extract"].args.model_fields.items()}
    assert set(params) - {"strict", "max_tokens", "max_attempts"} == set(wire)
    assert params["instructions"].default == wire["instructions"].default


def test_client_task_runs_any_registered_task_by_name() -> None:
    from tiankong.errors import ConfigError as Refused

    with Client("http://127.0.0.1:9") as client:  # never reached: the arguments are refused first
        with pytest.raises(Refused, match="unknown task 'nope'"):
            client.task("nope", text="x")
        with pytest.raises(Refused, match="n"):
            client.task("rewrite", query="q", n=99)


def test_a_limit_declared_once_holds_in_the_library_the_batch_job_and_the_cli() -> None:
    assert SPECS["rewrite"].args.model_fields["n"].metadata  # the bound lives in the spec
    with pytest.raises(ConfigError, match="n"):
        SPECS["rewrite"].flow({"query": "q", "n": 9})
    with pytest.raises(ConfigError, match="n"):
        make_job(input="in.jsonl", output="out.jsonl", task="rewrite", n=9)
    result = CliRunner().invoke(main, ["rewrite", "q", "-n", "9"])
    assert result.exit_code == 2 and "1<=x<=8" in result.output
    with pytest.raises(ConfigError, match="unknown field|Extra inputs"):
        SPECS["summarize"].flow({"text": "t", "word": 10})


def test_the_docs_parameter_tables_are_the_registrys() -> None:
    from pathlib import Path

    from tiankong.tasks.doc_tables import update

    doc = (Path(__file__).parents[2] / "docs" / "tasks.md").read_text(encoding="utf-8")
    assert all(f"<!-- params:{task} -->" in doc for task in SPECS), "a task has no parameter table"
    assert update(doc) == doc, "docs/tasks.md parameter tables are stale: run `make docs`"


def test_every_library_error_and_task_result_is_exported_from_the_package() -> None:
    import importlib
    import pkgutil
    import typing

    import tiankong
    from tiankong.errors import TiankongError

    for module in pkgutil.walk_packages(tiankong.__path__, "tiankong."):
        if not any(part in module.name for part in (".cli", ".gateway", "__main__")):
            importlib.import_module(module.name)
    found: set[type] = set()
    todo = [TiankongError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found and not sub.__module__.startswith(("tiankong.gateway", "tiankong.cli")):
                found.add(sub)
                todo.append(sub)
    # A private base (errors._Remote: the shared constructor of the Remote* classes) is not API.
    public = {c for c in found if not c.__name__.startswith("_")}
    missing = sorted(c.__name__ for c in public if getattr(tiankong, c.__name__, None) is not c)
    assert not missing, f"errors not exported from tiankong: {missing}"
    for task in EXPLICIT:
        result = typing.get_type_hints(getattr(Client, task))["return"]
        result = typing.get_origin(result) or result
        assert getattr(tiankong, result.__name__, None) is result, f"{result.__name__} is not exported"


def test_every_data_printing_command_accepts_json() -> None:
    """Commands without --json print no data: an interactive chat, a server, a worker, a removal, a file writer."""
    no_data = {"chat", "serve", "engine rpc-worker", "models rm", "eval init"}

    def walk(command: click.Command, path: list[str]) -> list[str]:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            subs = [(name, command.get_command(ctx, name)) for name in command.list_commands(ctx)]
            return [p for name, sub in subs if sub is not None for p in walk(sub, [*path, name])]
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        return [] if "--json" in options else [" ".join(path)]

    assert set(walk(main, [])) == no_data


def test_errors_over_http_name_the_field_at_fault() -> None:
    from starlette.testclient import TestClient

    from tiankong.gateway import GatewayState, create_app

    app = create_app(GatewayState(upstream_url="http://127.0.0.1:9", model_name="m"))  # never reached
    with TestClient(app, base_url="http://127.0.0.1") as http:
        bad_n = http.post("/v1/tasks/rewrite", json={"query": "q", "n": 99}).json()["error"]
        assert bad_n["param"] == "n" and bad_n["type"] == "invalid_request_error"
        unknown = http.post("/v1/tasks/summarize", json={"text": "t", "word": 10}).json()["error"]
        assert unknown["param"] == "word"
        budget = http.post("/v1/chat/completions", json={"messages": [], "max_tokens": 0}).json()["error"]
        assert budget["param"] == "max_tokens"
        route = http.post("/v1/tasks/nope", json={}).json()["error"]
        assert route["param"] is None and route["code"] == "not_found"


def test_tiankong_help_loads_no_command_and_no_heavy_library() -> None:
    """``tiankong --help`` lists every command from the table of short helps (the same as the commands' own)
    without importing them, scikit-learn, jsonschema or the HTTP stack (start-up time: benchmarks/cli_startup.py)."""
    import subprocess
    import sys

    from tiankong.cli import COMMANDS as TOP

    probe = ("import sys; from tiankong.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print([m for m in ('sklearn', 'jsonschema', 'httpx', 'numpy', 'tiankong.api', 'tiankong.cli.task_cmds')"
             " if m in sys.modules])")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.strip().endswith("[]"), shown[-300:]
    assert all(name in shown for name in TOP)
    for name, (_, _, short) in TOP.items():
        command = main.get_command(click.Context(main), name)
        assert command is not None and command.get_short_help_str(limit=150) == short, name


def test_the_package_exports_are_lazy_and_complete() -> None:
    import tiankong

    assert set(tiankong.__all__) == {*tiankong._EXPORTS, "__version__"}
    assert all(getattr(tiankong, name) is not None for name in tiankong.__all__)


def test_classify_and_batch_take_labels_the_same_way() -> None:
    from tiankong.cli.batch_cmds import parse_labels

    assert parse_labels("billing, bug", ("other",)) == ["other", "billing", "bug"]
    assert parse_labels(None, ()) is None
    batch = main.get_command(click.Context(main), "batch")
    assert isinstance(batch, click.Group)
    run = batch.get_command(click.Context(batch), "run")
    classify = main.get_command(click.Context(main), "classify")
    assert run is not None and classify is not None
    for command in (run, classify):
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        assert {"-l", "--label", "--labels"} <= options, command.name


def test_models_list_never_cuts_a_name_on_a_narrow_terminal() -> None:
    from tiankong.models import list_models

    shown = CliRunner(env={"COLUMNS": "50"}).invoke(main, ["models", "list"])
    assert shown.exit_code == 0, shown.output
    assert all(record.name in shown.output for record in list_models())


def test_fields_a_local_engine_would_drop_are_refused_by_name() -> None:
    from starlette.testclient import TestClient

    from tiankong.gateway import GatewayState, create_app
    from tiankong.gateway.body import UNHONOURED

    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    app = create_app(GatewayState(upstream_url="http://127.0.0.1:9", model_name="m"))  # never reached
    with TestClient(app, base_url="http://127.0.0.1") as http:
        for field, value in (("functions", [{"name": "f"}]), ("function_call", {"name": "f"}), ("n", 2),
                             ("audio", {"voice": "x"}),
                             ("modalities", ["text", "audio"]), ("store", True)):
            answer = http.post("/v1/chat/completions", json={**chat, field: value})
            error = answer.json()["error"]
            assert answer.status_code == 400 and error["param"] == field and error["code"] == "unsupported_field"
        for field, value in (("best_of", 3), ("echo", True), ("suffix", "end")):
            answer = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, field: value})
            assert answer.status_code == 400 and answer.json()["error"]["param"] == field
    assert {"functions", "n"} <= set(UNHONOURED["/v1/chat/completions"])
    assert "tools" not in UNHONOURED["/v1/chat/completions"]  # served: tests/test_tools.py


def test_every_task_command_is_made_from_its_spec_and_tiankong_help_lists_it() -> None:
    """One command per registered task, its help the spec's summary; ``tiankong --help``'s rows for them are read
    from the registry's source at run time (cli/help_table.py), the same rows as the imported registry's."""
    from tiankong.cli import COMMANDS as TOP
    from tiankong.cli import help_table

    assert [c.name for c in COMMANDS] == [name for name, spec in SPECS.items() if spec.cli is not None]
    for command in COMMANDS:
        cli = SPECS[str(command.name)].cli
        assert cli is not None and command.help == cli.summary
        assert TOP[str(command.name)][:2] == ("task_cmds", command.name)
    source = help_table.SPECS_SOURCE.read_text(encoding="utf-8")
    assert help_table.from_source(source) == help_table.from_registry()  # read without importing, not imported
    assert list(help_table.from_source(source)) == [c.name for c in COMMANDS]
    with pytest.raises(ValueError, match="summary"):  # a summary that is not a literal: told, then imported
        help_table.from_source(source.replace('CliPart(\n        "Classify TEXT', 'CliPart(\n        SUMMARY + "'))


WORDCOUNT_MODULE = '''"""wordcount: how many words a text has, and its commonest ones (a task added by a test)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..structured.flow import Flow
from .args import TEXT, TaskArgs


class WordCountArgs(TaskArgs):
    text: str = TEXT
    top: int = Field(3, ge=1, le=50, description="How many of the commonest words to list.")


@dataclass
class WordCount:
    words: int
    commonest: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"words": self.words, "commonest": self.commonest}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WordCount:
        return cls(int(data["words"]), list(data["commonest"]))


def word_count_flow(a: WordCountArgs, model: str | None) -> Flow[WordCount]:
    words = a.text.lower().split()
    if False:
        yield  # no engine call: the count is the text's own
    return WordCount(len(words), [w for w, _ in Counter(words).most_common(a.top)])


def word_count_line(result: WordCount) -> str:
    return f"{result.words}\\t{' '.join(result.commonest)}"
'''

WORDCOUNT_SPEC = '''WORDCOUNT: TaskSpec[WordCountArgs, WordCount] = TaskSpec(
    "wordcount", WordCountArgs, word_count_flow, "How many words, and the commonest.", batchable=True,
    from_json=WordCount.from_json, cli=CliPart(
        "Count the words of TEXT and list the commonest.", (FILE_TEXT, c.option("top", "--top")), word_count_line))

'''

WORDCOUNT_DOCS = """
### wordcount parameters

<!-- params:wordcount -->
<!-- /params -->
"""

WORDCOUNT_PROBE = '''
import json
from click.testing import CliRunner
from starlette.testclient import TestClient
from tiankong.batch import make_job
from tiankong.batch.job import TASKS
from tiankong.cli import main, help_table
from tiankong.evals.format import TASKS as EVAL_TASKS
from tiankong.gateway import GatewayState, create_app
from tiankong.tasks.doc_tables import update

found = {"help": CliRunner().invoke(main, ["--help"]).output,
         "command": CliRunner().invoke(main, ["wordcount", "--help"]).output,
         "rows": list(help_table.from_source(help_table.SPECS_SOURCE.read_text(encoding="utf-8")))}
app = create_app(GatewayState(upstream_url="http://127.0.0.1:9", model_name="m"))  # the flow calls no engine
with TestClient(app, base_url="http://127.0.0.1") as http:
    found["openapi"] = sorted(http.get("/openapi.json").json()["paths"]["/v1/tasks/wordcount"]["post"])
    answer = http.post("/v1/tasks/wordcount", json={"text": "a b a c", "top": 1})
    found["answer"] = [answer.status_code, answer.json()]
    found["refused"] = http.post("/v1/tasks/wordcount", json={"text": "a", "top": 0}).json()["error"]["param"]
found["batch"] = ["wordcount" in TASKS, make_job(input="i", output="o", task="wordcount", args={"top": 2})
                  .task_args("x").top, "wordcount" in EVAL_TASKS]
path = __import__("sys").argv[1]
with open(path, encoding="utf-8") as handle:
    text = handle.read()
with open(path, "w", encoding="utf-8") as handle:  # `make docs`
    handle.write(update(text))
print(json.dumps(found))
'''


def test_adding_a_task_touches_three_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The dry run of docs/tasks.md's "Adding a task", on a copy of the tree: a new module, its entry in
    tasks/specs.py and its docs section (three files; `make docs` fills its parameter table in that same section)
    make a CLI command listed by `tiankong --help`, `POST /v1/tasks/NAME` in OpenAPI, validated and answered,
    a batch and an eval task."""
    import filecmp
    import json
    import re
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[2]
    shutil.copytree(root / "src" / "tiankong", tmp_path / "src" / "tiankong",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(root / "docs" / "tasks.md", tmp_path / "docs" / "tasks.md")
    tasks = tmp_path / "src" / "tiankong" / "tasks"
    (tasks / "wordcount.py").write_text(WORDCOUNT_MODULE, encoding="utf-8")  # 1. the module
    specs = (tasks / "specs.py").read_text(encoding="utf-8")  # 2. the registry entry
    specs = specs.replace("from .tag import tag_flow\n", "from .tag import tag_flow\nfrom .wordcount import "
                          "WordCount, WordCountArgs, word_count_flow, word_count_line\n", 1)
    specs = specs.replace("#: every registered task by name", WORDCOUNT_SPEC + "#: every registered task by name", 1)
    specs, added = re.subn(r"(SPECS: dict\[str, TaskSpec\[Any, Any\]\] = \{spec\.name: spec for spec in \(.*?)\)\}",
                           r"\1, WORDCOUNT)}", specs, count=1, flags=re.S)
    assert added == 1 and "from .wordcount import" in specs and "WORDCOUNT: TaskSpec" in specs
    (tasks / "specs.py").write_text(specs, encoding="utf-8")
    with (tmp_path / "docs" / "tasks.md").open("a", encoding="utf-8") as docs:  # 3. its docs section
        docs.write(WORDCOUNT_DOCS)

    probe = subprocess.run([sys.executable, "-c", WORDCOUNT_PROBE, str(tmp_path / "docs" / "tasks.md")],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**__import__("os").environ, "PYTHONPATH": str(tmp_path / "src")})
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert "wordcount" in found["help"] and "Count the words of TEXT" in found["help"]
    command = " ".join(found["command"].split())
    assert "--top INTEGER RANGE" in command and "[default: 3; 1<=x<=50]" in command
    assert found["rows"][-1] == "wordcount"
    assert found["openapi"] == ["requestBody", "responses", "summary"]
    assert found["answer"] == [200, {"words": 4, "commonest": ["a"]}]
    assert found["refused"] == "top"
    assert found["batch"] == [True, 2, True]
    docs = (tmp_path / "docs" / "tasks.md").read_text(encoding="utf-8")
    assert "| `top` | `int` | `3` | ≥ 1, ≤ 50 | How many of the commonest words to list. |" in docs

    def changed(left: Path, right: Path, prefix: str = "") -> list[str]:
        cmp = filecmp.dircmp(left, right, ignore=["__pycache__"])
        found = [prefix + name for name in cmp.diff_files + cmp.left_only + cmp.right_only]
        for sub in cmp.common_dirs:
            found += changed(left / sub, right / sub, f"{prefix}{sub}/")
        return found

    touched = changed(root / "src" / "tiankong", tmp_path / "src" / "tiankong", "src/tiankong/")
    touched += ["docs/tasks.md"] if not filecmp.cmp(root / "docs" / "tasks.md", tmp_path / "docs" / "tasks.md",
                                                     shallow=False) else []
    assert sorted(touched) == ["docs/tasks.md", "src/tiankong/tasks/specs.py", "src/tiankong/tasks/wordcount.py"]


def test_an_engine_free_answer_refuses_an_engine_call_by_name() -> None:
    from tiankong.cli.task_hooks import NO_ENGINE, EngineNeeded

    with pytest.raises(EngineNeeded, match="POST /completion"):
        NO_ENGINE("POST", "/completion", {})
    shown = CliRunner().invoke(main, ["redact", "--no-model", "--json", "mail me at a.b@example.com"])
    assert shown.exit_code == 0, shown.output
    import json

    answer = json.loads(shown.output)  # rules only, no engine started
    assert "a.b@example.com" not in answer["text"] and answer["entities"]


def test_extract_is_a_registered_task_on_every_surface_with_its_own_input_and_answer() -> None:
    """extract's command reads --schema from a file (a file, named in errors), keeps --strict and --evidence;
    its route (the generic task route, the spec's http part) answers bad bodies as before; the metrics read the
    attempts of its answer (at its top level, beside the decoding evidence)."""
    from starlette.testclient import TestClient

    from tiankong.gateway import GatewayState, create_app
    from tiankong.gateway.metrics import RequestRecord

    assert SPECS["extract"].http is not None and "extract" in build_openapi()["paths"]["/v1/tasks/extract"]["post"][
        "summary"].lower()
    shown = " ".join(CliRunner().invoke(main, ["extract", "--help"]).output.split())
    assert "--schema FILE JSON Schema file. [required]" in shown
    assert "--strict" in shown and "--json, --evidence" in shown
    missing = CliRunner().invoke(main, ["extract", "--url", "http://127.0.0.1:9", "--schema", "/nonexistent.json",
                                        "x"])
    assert missing.exit_code == 1 and "cannot read schema file /nonexistent.json" in missing.output
    app = create_app(GatewayState(upstream_url="http://127.0.0.1:9", model_name="m"))  # never reached
    with TestClient(app, base_url="http://127.0.0.1") as http:
        for body, says in (({"text": "", "schema": {}}, "'text' must be a non-empty string"),
                           ({"text": "x"}, "'schema' is required"),
                           ({"text": "x", "schema": {}, "instructions": 5}, "'instructions' must be a string")):
            answer = http.post("/v1/tasks/extract", json=body)
            assert answer.status_code == 400 and says in answer.json()["error"]["message"]
    call = RequestRecord("/v1/tasks/extract")
    call.note_answer({"data": {}, "attempts": 2, "usage": {"prompt_tokens": 1}, "tiankong": {"path": "grammar"}})
    assert call.attempts == 2 and call.usage == {"prompt_tokens": 1}
