"""The model's listing of people is not taken on trust (issue 40 item 4).

On public NER sentences (MSRA, CoNLL-2003: ``benchmarks/redact_ner.py``) the 0.5B model lists phrases, common
nouns, titles and places among the "people" — 委员们, 渔翁村夫, 物质, 粒子, 学者, 香港, World Cup — and each
verbatim occurrence was redacted as PERSON. Now only listed strings with a name's form are taken as they are;
the others are asked about like the surname candidates (a yes/no question, kept at P(yes) >= CONFIRM_AT). The
sentences here are the tests' own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tiankong import Client
from tiankong.engine import EngineBinary, EngineConfig, EngineProcess
from tiankong.models import DEFAULT_MODEL
from tiankong.structured.drivers import run_sync
from tiankong.tasks.pii_listing import sure_name
from tiankong.tasks.pii_rules import Entity
from tiankong.tasks.redact import assemble_names, candidate_spans, locate, redact_flow, split_listing


@pytest.mark.parametrize("value", [
    "张文东", "王莲香", "李明", "汉斯", "欧阳娜娜", "司马相如", "克林顿", "米尔斯", "格尔巴德",
    "瓦西里斯·康斯坦塔科普洛斯",
    "Craig Brown", "John A. Smith", "Maria de la Cruz", "Jean-Claude Killy",
])
def test_strings_with_a_names_form_are_sure(value: str) -> None:
    assert sure_name(value)


@pytest.mark.parametrize("value", [
    # phrases and clauses the model listed as people
    "渔翁村夫", "表示一定不辜负", "双方均以星小目开局", "实现这一变化的途径",
    # common nouns, roles and groups
    "委员们", "物质", "粒子", "学者", "歌者", "机会", "全国各族人民", "渔翁村夫",
    # places and organisations
    "香港", "朝鲜半岛", "渥太华公民报", "World Cup", "United States", "South Africa", "New York", "Labor Day",
    # one word, or a title with the name: asked, not taken
    "Ramos", "金融", "克林顿总统", "特使格尔巴德", "",
])
def test_strings_without_a_names_form_are_not_sure(value: str) -> None:
    assert not sure_name(value)


def test_doubtful_listed_people_are_asked_first_and_never_taken_unasked() -> None:
    text = "委员们和渔翁村夫说，张文东和小明都表示同意。"
    listed = [("PERSON", "委员们"), ("PERSON", "渔翁村夫"), ("PERSON", "张文东"), ("PERSON", "小明"),
              ("ORG", "委员会")]
    taken, doubtful = split_listing(listed)
    assert ("PERSON", "张文东") in taken and ("ORG", "委员会") in taken
    assert {v for _, v in doubtful} == {"委员们", "渔翁村夫", "小明"}
    asked = candidate_spans(text, locate(text, taken), locate(text, doubtful))
    assert [c.text for c in asked[:3]] == ["委员们", "渔翁村夫", "小明"]
    assert "张文东" not in {c.text for c in asked}  # taken: covered, never asked
    spans = {(c.start, c.end): c for c in asked}
    # the model says no to the phrases (P(yes) under the bar) and yes to the name
    probabilities: dict[tuple[int, int], float | None] = {
        span: (0.9 if c.text == "小明" else 0.05) for span, c in spans.items()}
    people = {e.text for e in assemble_names(text, [], listed, probabilities) if e.type == "PERSON"}
    assert people == {"张文东", "小明"}
    # fail safe: a doubtful span that could not be asked (None) is still redacted — the name taggers' reading does
    # not veto it either (test_redact_tagger.py)
    unasked = dict.fromkeys(spans)
    assert {"委员们", "渔翁村夫"} <= {e.text for e in assemble_names(text, [], listed, unasked)}


def test_titles_come_off_and_what_cannot_be_a_name_is_dropped() -> None:
    text = "克林顿总统和特使格尔巴德会见了记者，他是second-seeded。"
    listed = [("PERSON", "克林顿总统"), ("PERSON", "特使格尔巴德"), ("PERSON", "second-seeded"),
              ("PERSON", "会见了记者的人都很高兴")]
    taken, doubtful = split_listing(listed)
    assert taken == [("PERSON", "克林顿"), ("PERSON", "格尔巴德")]
    assert doubtful == []
    people = {e.text for e in assemble_names(text, [], listed, {}) if e.type == "PERSON"}
    assert people == {"克林顿", "格尔巴德"}


def test_without_the_name_rules_the_listing_is_taken_whole() -> None:
    """``name_rules=False`` measures the model's listing alone (benchmarks/redact_recall.py): unchanged."""
    text = "委员们表示同意。"
    entities = assemble_names(text, [], [("PERSON", "委员们")], {}, name_rules=False)
    assert [(e.type, e.text) for e in entities] == [("PERSON", "委员们")]


@pytest.fixture(scope="module")
def client(engine_binary: EngineBinary, default_model_path: Path) -> Iterator[Client]:
    """The default model (where the listing's quality matters), 1 slot."""
    config = EngineConfig(model=default_model_path, ctx=4096, slots=1, alias=DEFAULT_MODEL)
    with EngineProcess(config, engine_binary) as engine, Client(engine.url) as c:
        yield c


@pytest.mark.parametrize(("text", "names", "kept"), [
    ("张建华说，这种材料的物质结构很稳定，粒子带正电，学者们都很关心。", ["张建华"], ["物质", "粒子", "学者"]),
    ("Yesterday Maria Lopez said the World Cup final in South Africa was sold out.", ["Maria Lopez"],
     ["World Cup", "South Africa"]),
])
def test_non_names_survive_and_names_are_redacted(client: Client, text: str, names: list[str],
                                                  kept: list[str]) -> None:
    result = run_sync(redact_flow(text), client._request)
    for name in names:
        assert name not in result.text, result.entities
    people: list[Entity] = [e for e in result.entities if e.type == "PERSON"]
    for word in kept:
        assert all(word not in e.text for e in people), people


def test_several_names_in_one_listed_string_are_several_names() -> None:
    """The model lists an enumeration as one "person" (宋健、陈俊生、胡启立): each name is taken on its own."""
    text = "宋健、陈俊生、胡启立和阿沛·阿旺晋美前往看望。Bill Clinton and Hillary Rodham also came."
    listed = [("PERSON", "宋健、陈俊生、胡启立"), ("PERSON", "阿沛·阿旺晋美"),
              ("PERSON", "Bill Clinton and Hillary Rodham")]
    taken, doubtful = split_listing(listed)
    assert {v for _, v in taken} == {"宋健", "陈俊生", "胡启立", "阿沛·阿旺晋美", "Bill Clinton", "Hillary Rodham"}
    assert doubtful == []
    assert split_listing([("PERSON", "陈和生")])[0] == [("PERSON", "陈和生")]  # 和 inside a name is no separator
    people = {e.text for e in assemble_names(text, [], listed, {}) if e.type == "PERSON"}
    assert {"宋健", "陈俊生", "胡启立", "阿沛·阿旺晋美", "Bill Clinton", "Hillary Rodham"} <= people
