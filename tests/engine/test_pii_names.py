"""Names, addresses and organisations that the rules find or propose (issue 21 row 10).

The sentences here are the tests' own; ``benchmarks/redact_recall.py`` measures recall with other templates and
faker's names, addresses and companies.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tiankong import Client
from tiankong.engine import EngineProcess
from tiankong.structured.drivers import run_sync
from tiankong.tasks.ask import Question, ask_flow
from tiankong.tasks.pii_names import CONFIRM_AT, name_candidates, name_entities
from tiankong.tasks.pii_rules import Entity
from tiankong.tasks.redact import (
    MAX_CONFIRM,
    MODEL_CHUNK_CHARS,
    _chunks,
    confirm_candidates,
    confirm_question,
    redact_flow,
    redact_rules,
)

NOISE = 0.1  # a probability read again from the prompt cache (see the test that uses it)


def found(text: str) -> set[tuple[str, str]]:
    return {(e.type, e.text) for e in name_entities(text)}


@pytest.mark.parametrize(("text", "entity"), [
    ("发票请寄往浙江省杭州市西湖区文三路259号昌地火炬大厦1号楼，谢谢。",
     "浙江省杭州市西湖区文三路259号昌地火炬大厦1号楼"),
    ("仓库在江苏省苏州市工业园区星湖街328号，周一到周五收货。", "江苏省苏州市工业园区星湖街328号"),
    ("他老家在四川省成都市武侯区。", "四川省成都市武侯区"),
    ("门店地址：上海市黄浦区南京东路100号3楼301室", "上海市黄浦区南京东路100号3楼301室"),
    ("新地址是建设路12号院2单元", "建设路12号院2单元"),
    ("Send it to 1600 Amphitheatre Parkway, Mountain View, CA 94043 please.",
     "1600 Amphitheatre Parkway, Mountain View, CA 94043"),
    ("Our office: 221B Baker Street, London.", "221B Baker Street"),
    ("Mail the form to 88 Orchard Knoll Suite 4, Springfield, IL 62701.",
     "88 Orchard Knoll Suite 4, Springfield, IL 62701"),
    ("Ship to PSC 1234, Box 5678, APO AE 09012 for the unit.", "PSC 1234, Box 5678, APO AE 09012"),
])
def test_addresses_with_a_form_are_found(text: str, entity: str) -> None:
    assert ("ADDRESS", entity) in found(text), name_entities(text)


@pytest.mark.parametrize(("text", "entity"), [
    ("本合同由北京字节跳动科技有限公司盖章生效。", "北京字节跳动科技有限公司"),
    ("我们和ABC数据服务有限公司签了约。", "ABC数据服务有限公司"),
    # 和 with nothing to join on its left is the name's first character (generated sets, seeds 11 and 23)
    ("昨天他在群里说，和泰信息有限公司准备搬家。", "和泰信息有限公司"),
    ("商品由和泰网络有限公司发出，请审核。", "和泰网络有限公司"),
    ("萧颖打电话来投诉，说和泰信息有限公司把水管弄坏了。", "和泰信息有限公司"),
    ("甲方和乙方科技有限公司签了约。", "乙方科技有限公司"),  # 和 between two words joins them: not in the name
    ("复旦大学附属中山医院的报告", "复旦大学附属中山医院"),
    ("The invoice from Northwind Traders LLC is overdue.", "Northwind Traders LLC"),
    ("She studied at the University of Edinburgh last year.", "University of Edinburgh"),
])
def test_organisations_with_an_organisation_word_are_found(text: str, entity: str) -> None:
    assert ("ORG", entity) in found(text), name_entities(text)


@pytest.mark.parametrize(("text", "entity"), [
    ("收件人：刘德明，电话另告。", "刘德明"),
    ("这件事王芳说她来处理。", "王芳"),
    ("请转告陈志强先生明天开会。", "陈志强"),
    ("司马相如的文章", "司马相如"),
    ("上官婉儿已确认。", "上官婉儿"),
    ("Please ask Ms. Priya Raman to sign.", "Ms. Priya Raman"),
    ("Dr. Omar Haddad, PhD will review it.", "Dr. Omar Haddad, PhD"),
])
def test_persons_next_to_a_cue_or_with_a_compound_surname_are_found(text: str, entity: str) -> None:
    assert ("PERSON", entity) in found(text), name_entities(text)


def test_surnames_without_a_cue_are_candidates_and_common_words_are_not() -> None:
    candidates = {c.text for c in name_candidates("昨天赵建国把合同寄回来了。")}
    assert "赵建国" in candidates
    both = {c.text for c in name_candidates("孙悦反馈系统坏了")}
    assert {"孙悦反", "孙悦"} <= both  # one given character or two: both are asked
    assert name_candidates("周末我们马上高兴地出发，方法很简单。") == []
    assert found("这个地区和城市很美，市场部和区域经理开会。") == set()


def test_capitalised_english_words_are_candidates() -> None:
    spans = {c.text for c in name_candidates("Last week Maria Lopez and Kenji Watanabe signed; please call J. Doe.")}
    assert {"Maria Lopez", "Kenji Watanabe"} <= spans  # "Last" is small-cased after it: no run
    three = {c.text for c in name_candidates("Yesterday Priya Raman called.")}
    assert {"Yesterday Priya Raman", "Priya Raman"} <= three  # the sentence's first word may not be a name
    assert name_candidates("Thanks Team, see you Monday Morning.") == []
    assert confirm_question("Priya Raman").startswith("Is") and "姓名" in confirm_question("赵建国")


def test_rules_only_redaction_uses_the_name_rules() -> None:
    text = "联系人：刘德明，地址北京市海淀区中关村大街27号。"
    result = redact_rules(text)
    assert "刘德明" not in result.text and "中关村大街27号" not in result.text
    assert {e.type for e in result.entities} == {"PERSON", "ADDRESS"}


def test_long_hostile_texts_take_linear_time() -> None:
    # each would be quadratic (or worse) with unbounded patterns; here they finish (and find next to nothing)
    for text in ["A" * 100_000, "Abc " * 25_000, "一路" * 50_000, "王" * 100_000, "1 " * 50_000]:
        assert len(name_entities(text)) <= 1
        name_candidates(text)


@pytest.fixture(scope="module")
def client(smol_engine: EngineProcess) -> Iterator[Client]:
    with Client(smol_engine.url) as c:
        yield c


def test_candidates_are_kept_as_the_model_answers_their_questions(client: Client) -> None:
    """Every surname candidate nothing else covers is one yes/no question about the text (``ask``: the text read
    once): exactly those whose P(yes) reaches CONFIRM_AT are kept — the answers ``ask`` gives for them."""
    text = "昨天赵建国把合同寄回来了，孙悦反馈系统坏了，钱多多也在群里。"
    candidates = name_candidates(text)
    assert len(candidates) >= 3
    asked = run_sync(ask_flow(text, [Question(str(i), "yes_no", confirm_question(c.text))
                                     for i, c in enumerate(candidates)]), client._request)
    expected = {(c.start, c.end): a.probability for c, a in zip(candidates, asked.answers, strict=True)}
    kept = run_sync(confirm_candidates(text, [], None), client._request)
    spans = {(e.start, e.end) for e in kept}
    # the same question read from the engine's prompt cache, in other batch shapes, moves a SmolLM2 probability by
    # up to ~0.07 on a CPU when the engine is shared with other tests (measured in the full suite): candidates that
    # close to the bar may go either way
    decisive = {span: p or 0.0 for span, p in expected.items() if abs((p or 0.0) - CONFIRM_AT) > NOISE}
    assert decisive
    for span, p in decisive.items():
        assert (span in spans) == (p >= CONFIRM_AT), (span, p, spans)
    for entity in kept:
        assert entity.source == "rule+model"
        assert entity.score == pytest.approx(expected[(entity.start, entity.end)], abs=NOISE)
    # a candidate another entity already covers is not asked
    first = candidates[0]
    covered = Entity(first.start, first.end, "PERSON", first.text, "model")
    again = run_sync(confirm_candidates(text, [covered], None), client._request)
    assert all(e.end <= first.start or e.start >= first.end for e in again)


def test_candidates_past_the_question_cap_are_redacted_unasked(client: Client) -> None:
    names = ["赵建国", "钱学明", "孙立华", "李文博", "周国平", "吴晓东", "郑海涛", "冯志远", "陈晓明", "褚建华",
             "卫东升", "蒋振宇", "沈从文", "韩立新", "杨晓光", "朱永新", "秦少波", "尤金华", "许志强", "何建明"]
    text = "，".join(f"{n}到了" for n in names) + "。"
    assert len(name_candidates(text)) > MAX_CONFIRM
    result = run_sync(redact_flow(text, types=["PERSON"]), client._request)
    for name in names[-3:]:  # the last ones are past the cap: redacted without a question (fail safe)
        assert name not in result.text, result.text


def test_a_candidate_across_two_chunks_is_redacted_unasked(client: Client) -> None:
    """A long text goes to the model in chunks cut at sentence ends; "John A. Smith" can be cut after "A.". No chunk
    holds that candidate whole, so no question can be asked about it: it is kept unasked (fail safe)."""
    filler = "the parcel was late again and the customer wrote to us about it "
    head = (filler * (MODEL_CHUNK_CHARS // len(filler) + 1))[:MODEL_CHUNK_CHARS - 20] + " John A."
    text = head + " Smith signed the form."
    name = "John A. Smith"
    assert not any(name in chunk for chunk in _chunks(text))  # the case under test: the cut is inside the name
    assert any(c.text == name for c in name_candidates(text))
    kept = run_sync(confirm_candidates(text, [], None), client._request)
    assert any(e.text == name and e.source == "rule+model" for e in kept), kept
