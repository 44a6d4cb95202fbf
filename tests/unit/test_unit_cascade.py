"""Issue 43, the confidence cascade's threshold where it is used (no engine: scripted engines, a tfidf decider):

* ``[route] threshold`` is a validated config key; ``tiankong cascade eval --write`` sets it in the config file
  (comments and other keys kept, an invalid file refused) or in a decider's registry entry (a new version);
* ``route`` with no threshold uses the decider's, else the configured one (the gateway's own inside
  ``configured_threshold``, else the user's config file), else 0.6 — an explicit threshold still wins; a decider
  with a threshold makes classify abstain below it;
* ``cascade_eval`` for ``--task route`` (records labelled by route name) and for a tuned decider as the small side
  fills the score table from each side's answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from helpers.scripted import ScriptedEngine, scored
from tiankong import AsyncClient, Client
from tiankong.cascade import cascade_eval, write_config_threshold, write_decider_threshold, write_threshold
from tiankong.cascade.run import Record, records_sha256
from tiankong.config import TiankongConfig, load_config
from tiankong.deciders.registry import load_decider
from tiankong.errors import ConfigError
from tiankong.tasks.route import DEFAULT_THRESHOLD, configured_threshold, escalation_threshold

URL = "http://engine.test"
ROUTES = [{"name": "chat", "description": "small talk", "target": "task:chat"},
          {"name": "code", "description": "programming", "target": "task:code"}]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's config file (config.toml in the user config dir), not there yet."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("TIANKONG_CONFIG", raising=False)
    return tmp_path / "config" / "tiankong" / "config.toml"


def unsure_route(threshold: float | None = None, decider: str | None = None, redline: bool = False) -> Any:
    """A route whose local decision is chat at confidence 0.55 (below the default 0.6, above 0.5)."""
    engine = ScriptedEngine().on("/completion", scored({"chat": 0.55, "code": 0.45}))
    with Client(URL, transport=engine.transport()) as client:
        return client.route("hello there", ROUTES, threshold=threshold, redline=redline, decider=decider)


# --- the config key and writing it ----------------------------------------------------------------------------


def test_route_threshold_is_a_validated_config_key(tmp_path: Path) -> None:
    assert TiankongConfig().route.threshold is None
    assert TiankongConfig.model_validate({"route": {"threshold": 0.69}}).route.threshold == 0.69
    for bad in ({"threshold": 1.5}, {"threshold": -0.1}, {"threshold": "high"}, {"treshold": 0.5}):
        path = tmp_path / "bad.toml"
        path.write_text("[route]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in bad.items()))
        with pytest.raises(ConfigError, match="route"):
            load_config(path)


def test_writing_the_threshold_creates_the_config_file(config: Path) -> None:
    assert write_config_threshold(0.6880362821745378) == config
    assert load_config(config).route.threshold == 0.6880362821745378  # exactly: a midpoint between two confidences


def test_writing_the_threshold_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    original = ("# my gateway\n[server]\nport = 9000  # not 8080\n\n[route]\n# measured last week\nthreshold = 0.5\n"
                "\n[engine]\nslots = 3\n")
    path.write_text(original)
    write_config_threshold(0.72, path)
    text = path.read_text()
    assert "# my gateway" in text and "# not 8080" in text and "# measured last week" in text
    loaded = load_config(path)
    assert loaded.route.threshold == 0.72 and loaded.server.port == 9000 and loaded.engine.slots == 3
    assert text.count("threshold") == 1
    dotted = tmp_path / "dotted.toml"
    dotted.write_text("route.threshold = 0.3\n")
    write_config_threshold(0.4, dotted)
    assert load_config(dotted).route.threshold == 0.4


def test_an_invalid_config_file_is_not_edited(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[server]\nprot = 9000\n")
    with pytest.raises(ConfigError, match="server.prot"):
        write_config_threshold(0.7, path)
    assert path.read_text() == "[server]\nprot = 9000\n"
    with pytest.raises(ConfigError, match="outside"):
        write_config_threshold(1.2, tmp_path / "new.toml")
    assert not (tmp_path / "new.toml").exists()


# --- route's default: argument, decider, configured, 0.6 ------------------------------------------------------


def test_route_without_a_threshold_uses_the_config_file(config: Path) -> None:
    default = unsure_route()
    assert default.escalated and default.threshold == DEFAULT_THRESHOLD and default.threshold_from == "default"
    write_config_threshold(0.5)
    configured = unsure_route()
    assert not configured.escalated and configured.threshold == 0.5
    assert configured.threshold_from == f"config {config}"
    assert configured.to_json()["threshold"] == 0.5
    explicit = unsure_route(threshold=0.6)  # the caller's threshold still wins
    assert explicit.escalated and explicit.threshold_from == "argument"
    write_config_threshold(0.58)  # the file is read again when it changes
    assert unsure_route().escalated


def test_the_gateways_own_config_wins_over_the_users_file(config: Path) -> None:
    write_config_threshold(0.5)
    with configured_threshold(None, "gateway config [route]"):  # a gateway whose config sets none: 0.6
        assert escalation_threshold(None) == (DEFAULT_THRESHOLD, "default")
    with configured_threshold(0.9, "gateway config [route]"):
        assert escalation_threshold(None) == (0.9, "gateway config [route]")
        assert escalation_threshold(0.2) == (0.2, "argument")
    assert escalation_threshold(None) == (0.5, f"config {config}")


def test_a_tiankong_config_that_names_no_file_is_an_error_not_the_default_threshold(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch
                                                                                     ) -> None:
    """``tiankong serve`` refuses a TIANKONG_CONFIG naming nothing (a typo); route quietly used 0.6 instead."""
    monkeypatch.setenv("TIANKONG_CONFIG", str(tmp_path / "cofnig.toml"))
    with pytest.raises(ConfigError, match="TIANKONG_CONFIG names .*cofnig.toml"):
        escalation_threshold(None)
    with pytest.raises(ConfigError, match="TIANKONG_CONFIG"):
        unsure_route()


def test_the_gateway_task_route_uses_its_configured_threshold(config: Path) -> None:
    from tiankong.gateway.task_routes import run_task

    write_config_threshold(0.1)  # the user's file: never read inside the gateway

    async def route(body: dict[str, Any], threshold: float | None) -> dict[str, Any]:
        engine = ScriptedEngine().on("/completion", scored({"chat": 0.55, "code": 0.45}))
        async with AsyncClient(URL, transport=engine.transport()) as client:
            return await run_task(client, "route", body, threshold)

    body = {"text": "hello there", "routes": ROUTES, "redline": False}
    low = asyncio.run(route(body, 0.5))
    assert not low["escalated"] and low["threshold"] == 0.5 and low["threshold_from"] == "gateway config [route]"
    unset = asyncio.run(route(body, None))
    assert unset["escalated"] and unset["threshold"] == DEFAULT_THRESHOLD
    explicit = asyncio.run(route({**body, "threshold": 0.6}, 0.5))
    assert explicit["escalated"] and explicit["threshold_from"] == "argument"


def test_a_bad_configured_file_is_a_clear_error(config: Path) -> None:
    config.parent.mkdir(parents=True)
    config.write_text("[route]\nthreshold = 2\n")
    with pytest.raises(ConfigError, match="route.threshold"):
        unsure_route()
    assert not unsure_route(threshold=0.5).escalated  # an explicit threshold needs no config


# --- a tuned decider as the small side --------------------------------------------------------------------------

SPAM = ["WINNER you have won a free prize call now", "URGENT claim your cash prize text WIN now",
        "free entry win a prize reply WIN", "you won a free cruise claim now", "cash prize waiting call to claim",
        "free ringtones text WIN to claim", "claim your free prize now urgent", "win cash now free entry",
        "prize draw winner call now free", "urgent you won cash claim today", "free free free win a prize",
        "congratulations winner claim your free cash"]
HAM = ["are we still meeting for lunch tomorrow", "can you feed the cat tonight", "see you at the weekend",
       "thanks for the birthday wishes", "running late, start without me", "what time is the meeting",
       "call me when you get home", "dinner at mum's on sunday?", "i left my keys at your place",
       "the train is delayed again", "happy anniversary, love you", "lunch was great, thanks"]


@pytest.fixture
def spam_decider(tmp_path: Path) -> str:
    """A tfidf decider (no engine) registered as ``spam``."""
    from tiankong.tuning import tune_classify

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n"
                            for rows, lab in ((SPAM, "spam"), (HAM, "ham")) for t in rows))
    report = tune_classify(data, name="spam", methods=["tfidf"], folds=3)
    assert report.chosen == "tfidf"
    return "spam"


HELD_OUT = [("free cash prize, call now to claim", "spam"), ("win a free holiday, text WIN", "spam"),
            ("urgent: your prize is waiting", "spam"), ("see you at lunch", "ham"),
            ("the cat is fed, see you tonight", "ham"), ("meeting moved to friday", "ham")]


def labelled(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows))
    return path


def large_client(answers: dict[str, dict[str, float]]) -> Any:
    """``client_for``: a scripted engine answering each record's text with its own probabilities."""
    def reply(body: Any) -> Any:
        text = json.dumps(body.get("prompt")) if isinstance(body, dict) else ""
        for needle, probs in answers.items():
            if json.dumps(needle)[1:-1] in text:
                return scored(probs)(body)
        return scored({label: 1 / len(probs) for label in probs})(body)  # the content-free prompt: uniform

    return lambda model: Client(URL, transport=ScriptedEngine().on("/completion", reply).transport())


def test_cascade_eval_with_a_decider_as_the_small_side(tmp_path: Path, spam_decider: str) -> None:
    data = labelled(tmp_path / "held_out.jsonl", HELD_OUT)
    decider = load_decider(spam_decider)
    # the large model is right on every record, fairly sure
    right = {t: {lab: 0.8, ("ham" if lab == "spam" else "spam"): 0.2} for t, lab in HELD_OUT}
    result = cascade_eval(data, None, "large-model", decider=spam_decider, client_for=large_client(right))
    assert result.decider == decider.ref and result.small == f"decider {decider.ref}"
    assert result.labels == decider.labels
    assert result.curve.always_large == 1.0 and result.curve.n == len(HELD_OUT)
    # the small side's confidence is the decider's own probability of its top label
    for record, answer in zip(result.records, result.small_answers, strict=True):
        assert answer.confidence == pytest.approx(max(Client(URL).classify(record.text, decider=spam_decider,
                                                                           threshold=0.0).scores.values()))
    assert all(a.label in ("spam", "ham") for a in result.large_answers) and not result.warnings
    with pytest.raises(ConfigError, match="labels"):
        cascade_eval(data, None, "large-model", decider=spam_decider, labels=["spam", "eggs"],
                     client_for=large_client(right))


def test_writing_a_deciders_threshold_makes_a_new_version_that_route_and_classify_use(
        tmp_path: Path, spam_decider: str, config: Path) -> None:
    before = load_decider(spam_decider)
    data = labelled(tmp_path / "held_out.jsonl", HELD_OUT)
    right = {t: {lab: 0.8, ("ham" if lab == "spam" else "spam"): 0.2} for t, lab in HELD_OUT}
    result = cascade_eval(data, None, "large-model", decider=spam_decider, client_for=large_client(right))
    said = write_threshold(result, data)
    after = load_decider(spam_decider)
    assert after.version == before.version + 1 and str(after.version) in said
    assert after.params["threshold"] == result.route_threshold
    assert after.params["threshold_source"]["from"] == before.ref and after.state == before.state
    assert "threshold" not in load_decider(before.ref).params  # the measured version is left as it was
    assert not config.exists()  # a decider's threshold does not go into the config
    # classify with the decider abstains below its threshold; an explicit threshold wins
    with Client(URL) as client:  # tfidf: no engine is called
        write_decider_threshold(spam_decider, 0.999, {"data": "hand-set"})
        unsure = client.classify("see you at lunch", decider=spam_decider)
        assert unsure.abstained and unsure.labels == []
        assert not client.classify("see you at lunch", decider=spam_decider, threshold=0.0).abstained
    # route with the decider escalates below the decider's threshold (config and default are not used)
    routes = [{"name": "spam", "target": "task:bin"}, {"name": "ham", "target": "task:inbox"}]
    write_config_threshold(0.0)
    with Client(URL) as client:
        decision = client.route("see you at lunch", routes, decider=spam_decider, redline=False)
    assert decision.escalated and decision.threshold == 0.999
    assert decision.threshold_from == f"decider {load_decider(spam_decider).ref}"


def test_the_deciders_training_records_are_flagged(tmp_path: Path, spam_decider: str) -> None:
    rows = [(t, "spam") for t in SPAM] + [(t, "ham") for t in HAM]
    assert records_sha256([Record(t, lab) for t, lab in rows]) == load_decider(spam_decider).examples["sha256"]
    data = labelled(tmp_path / "train_again.jsonl", rows)
    right = {t: {lab: 0.8, ("ham" if lab == "spam" else "spam"): 0.2} for t, lab in rows}
    result = cascade_eval(data, None, "large-model", decider=spam_decider, client_for=large_client(right))
    assert result.warnings and "training examples" in result.warnings[0]


# --- --task route ---------------------------------------------------------------------------------------------

CHATS = [("hello, how are you today", "chat"), ("nice weather we are having", "chat"),
         ("fix this python traceback", "code"), ("write a bash loop over files", "code")]


def test_cascade_eval_task_route_scores_routes_local_decision(tmp_path: Path) -> None:
    data = labelled(tmp_path / "routes.jsonl", CHATS)
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(ROUTES))
    # small: right and sure on the first two, wrong and unsure on the last two; large: right on all
    small = {CHATS[0][0]: {"chat": 0.9, "code": 0.1}, CHATS[1][0]: {"chat": 0.8, "code": 0.2},
             CHATS[2][0]: {"chat": 0.6, "code": 0.4}, CHATS[3][0]: {"chat": 0.55, "code": 0.45}}
    large = {t: {lab: 0.7, ("code" if lab == "chat" else "chat"): 0.3} for t, lab in CHATS}
    clients = {"small-model": large_client(small), "large-model": large_client(large)}
    result = cascade_eval(data, "small-model", "large-model", task="route", routes=routes,
                          client_for=lambda model: clients[model](model))
    assert result.task == "route" and result.labels == ["chat", "code"]
    assert [a.label for a in result.small_answers] == ["chat", "chat", "chat", "chat"]
    assert [a.confidence for a in result.small_answers] == pytest.approx([0.9, 0.8, 0.6, 0.55])
    assert result.curve.always_small == 0.5 and result.curve.always_large == 1.0
    # escalating the two least confident reaches always-large: the threshold sits between 0.6 and 0.8
    assert result.curve.chosen.escalated == 0.5 and 0.6 < result.route_threshold < 0.8
    # route's own decision at that threshold keeps exactly the confident half
    with Client(URL, transport=ScriptedEngine().on("/completion", scored(small[CHATS[1][0]])).transport()) as c:
        assert not c.route(CHATS[1][0], ROUTES, threshold=result.route_threshold, redline=False).escalated
    with Client(URL, transport=ScriptedEngine().on("/completion", scored(small[CHATS[2][0]])).transport()) as c:
        assert c.route(CHATS[2][0], ROUTES, threshold=result.route_threshold, redline=False).escalated


def test_task_route_bad_input_is_refused_before_any_engine(tmp_path: Path) -> None:
    data = labelled(tmp_path / "routes.jsonl", CHATS + [("book a table", "food")])
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(ROUTES))

    def no_client(model: str) -> Client:
        raise AssertionError("no engine may start")

    cases = [({"routes": routes}, "label 'food' is not one of the route names chat,code"),
             ({}, "needs the routes"),
             ({"routes": routes, "labels": ["chat", "code"]}, "labels from the routes"),
             ({"routes": tmp_path / "missing.json"}, "cannot read"),
             ({"routes": [{"name": "only", "target": "task:x"}]}, "at least two")]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            cascade_eval(data, "small-model", "large-model", task="route", client_for=no_client, **kwargs)
    with pytest.raises(ConfigError, match="--routes is for --task route"):
        cascade_eval(data, "s", "l", routes=routes, client_for=no_client)
    with pytest.raises(ConfigError, match="no small model"):
        cascade_eval(data, None, "l", client_for=no_client)
    with pytest.raises(ConfigError, match="task 'summarize'"):
        cascade_eval(data, "s", "l", task="summarize", client_for=no_client)


def test_tiankong_serve_hands_its_route_section_to_the_gateway() -> None:
    from tiankong.engine.pool import EnginePool
    from tiankong.gateway.serve import gateway_state

    pool = EnginePool.of_url("http://127.0.0.1:9", "model", [], slots=1)  # never reached
    assert gateway_state(TiankongConfig.model_validate({"route": {"threshold": 0.42}}), pool).route_threshold == 0.42
    assert gateway_state(TiankongConfig(), EnginePool.of_url("http://127.0.0.1:9", "m", [], slots=1)) \
        .route_threshold is None
