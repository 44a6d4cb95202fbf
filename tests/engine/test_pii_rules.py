"""Rule-based PII detection and redaction: pure tests (no engine, no model)."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tiankong.errors import ConfigError
from tiankong.tasks.pii_rules import Entity, detect_rules, id_card_valid, luhn_valid, resolve_overlaps, shannon_entropy
from tiankong.tasks.redact import redact_rules
from tiankong.tasks.redaction import redact_text, restore

ROOT = Path(__file__).resolve().parents[2]


def found(text: str) -> list[tuple[str, str]]:
    """(type, text) of every entity, after checking that each offset pair slices out its text."""
    entities = detect_rules(text)
    for entity in entities:
        assert text[entity.start:entity.end] == entity.text
        assert entity.source == "rule"
    return [(e.type, e.text) for e in entities]


def only(text: str, kind: str) -> list[str]:
    return [value for found_kind, value in found(text) if found_kind == kind]


# --- validators --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["110101199003074514", "44030419851231002X", "44030419851231002x",
                                   "110105200002290013", "530102194910011236"])
def test_id_card_checksum_valid(value: str) -> None:
    assert id_card_valid(value)


@pytest.mark.parametrize("value", [
    "110101199003074515",  # wrong check digit
    "110101199002304510",  # 30 February
    "110101209901014513",  # born in the future
    "11010119900307451",  # 17 characters
    "010101199003074514",  # leading zero
])
def test_id_card_invalid(value: str) -> None:
    assert not id_card_valid(value)


def test_luhn() -> None:
    assert luhn_valid("4111111111111111")
    assert luhn_valid("378282246310005")
    assert luhn_valid("6222021234567890128")
    assert not luhn_valid("4111111111111112")
    assert not luhn_valid("4111 1111 1111 1111")
    assert not luhn_valid("")


def test_entropy() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abab") == pytest.approx(1.0)
    assert shannon_entropy("abcdefgh") == pytest.approx(3.0)


# --- identity numbers --------------------------------------------------------------------------------------

def test_id_card_in_chinese_text() -> None:
    text = "客户张三，身份证号110101199003074514，住址不详。"
    assert found(text) == [("ID_CARD", "110101199003074514")]
    assert found("证件：44030419851231002X。") == [("ID_CARD", "44030419851231002X")]


def test_id_card_negatives() -> None:
    assert found("编号110101199003074515。") == []  # bad checksum and no ID keyword: not an ID
    # next to its keyword a bad checksum is still redacted (fail safe), marked unvalidated (test_pii_near_misses)
    assert found("身份证号110101199003074515。") == [("ID_CARD", "110101199003074515")]
    assert found("单号1101011990030745141。") == []  # 19 digits


def test_us_ssn() -> None:
    assert found("SSN on file: 123-45-6789.") == [("ID_CARD", "123-45-6789")]
    assert found("codes 000-12-3456, 666-12-3456, 923-45-6789, 123-00-6789, 123-45-0000") == []
    # without dashes, after an SSN keyword (a bare 9-digit number is an order, a tracking code …)
    assert only("SSN 123456789 on the form", "ID_CARD") == ["123456789"]
    assert only("Social Security No.: 123 45 6789", "ID_CARD") == ["123 45 6789"]
    assert only("my social security number is 219099999.", "ID_CARD") == ["219099999"]
    assert only("order 123456789 shipped", "ID_CARD") == []
    assert only("SSN 923456789 or 000456789", "ID_CARD") == []  # never issued


def test_passports() -> None:
    assert only("护照号码：E12345678，有效期至2030年。", "PASSPORT") == ["E12345678"]
    assert only("护照号EA1234567", "PASSPORT") == ["EA1234567"]
    assert only("Passport no. 232860129, issued 2019.", "PASSPORT") == ["232860129"]
    assert only("passport: S82597919", "PASSPORT") == ["S82597919"]
    assert only("order 232860129 shipped", "PASSPORT") == []  # no keyword, not a CN pattern
    assert only("乘坐G1234次列车，车厢E12", "PASSPORT") == []
    # the mainland's travel permits: 港澳通行证 (C + 8), the old W-numbers, 回乡证, 台胞证 — after their names
    assert only("港澳通行证号码：C12345678，请核对。", "PASSPORT") == ["C12345678"]
    assert only("往来港澳通行证 CA1234567 已过期", "PASSPORT") == ["CA1234567"]
    assert only("回乡证H12345678", "PASSPORT") == ["H12345678"]
    assert only("台胞证号码 12345678", "PASSPORT") == ["12345678"]
    assert only("Home Return Permit no. M87654321", "PASSPORT") == ["M87654321"]
    assert only("工单 C12345678 已关闭", "PASSPORT") == []  # no permit named
    # a bare 通行证 is any pass, and an eight-digit date after a passport word is its validity
    for text in ("停车通行证有效期至20251231", "网易通行证登录失败，错误码 10086001",
                 "游戏通行证第5赛季，订单号 20240315", "passport valid until 20301231"):
        assert only(text, "PASSPORT") == [], text


# --- phones ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("phone", ["13812345678", "+86 138 1234 5678", "+86-13812345678", "8613812345678",
                                   "138-1234-5678", "(+86) 19912345678", "0086 15012345678"])
def test_cn_mobile(phone: str) -> None:
    assert found(f"请拨打{phone}联系我") == [("PHONE", phone)]


@pytest.mark.parametrize("phone", ["010-62345678", "(021)62345678", "0755 2345 6789", "0571-8765432",
                                   "010-62345678转123", "+86 10 62345678"])
def test_cn_landline(phone: str) -> None:
    assert found(f"座机{phone}，工作日") == [("PHONE", phone)]


@pytest.mark.parametrize("phone", ["+1 (415) 555-0132", "415-555-0132", "(415)555-0132", "415.555.0132",
                                   "+1-415-555-0132", "001-415-555-0132x3662", "415-555-0132 ext. 12",
                                   "+44 20 7946 0958", "+44(0)121 496 0668", "+441134960123"])
def test_international_phones(phone: str) -> None:
    assert found(f"Call me at {phone} tomorrow.") == [("PHONE", phone)]


def test_bare_ten_digits_need_a_phone_word() -> None:
    assert found("Phone: 4155550132") == [("PHONE", "4155550132")]
    assert found("Call Ann at the desk or on 4155550132, thanks") == [("PHONE", "4155550132")]
    assert found("Call Mrs. J. Doe on 4155550132") == [("PHONE", "4155550132")]
    assert found("Invoice 4155550132 paid") == []
    assert found("Call me. Invoice 4155550132 paid") == []  # the phone word is in another sentence


@pytest.mark.parametrize("text", [
    "订单号20260913210300已发货",  # timestamp-like order number
    "金额¥12,345.67，共3件",
    "编号12345678901，另号10086123456",  # 11 digits, not 1[3-9]
    "时间 2026-09-13 12:30:45",
    "batch 1234567890123 finished",  # 13 digits, Luhn-invalid
    "手机138123456789",  # 12 digits
    "Total: 1,234,567,890 rows",
    "unix time 1726200000",
    "ref +44 20 7946 0958abc",  # no partial match of a longer token
    "diff +12,345.67",
])
def test_phone_negatives(text: str) -> None:
    assert only(text, "PHONE") == []


def test_fullwidth_digits() -> None:
    text = "手机：１３８１２３４５６７８。"
    assert found(text) == [("PHONE", "１３８１２３４５６７８")]


# --- cards -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("card", ["4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111",
                                  "6222021234567890128", "6222 0212 3456 7890 128", "378282246310005",
                                  "3782 822463 10005", "30569309025904", "4222222222222"])
def test_bank_cards(card: str) -> None:
    assert found(f"卡号{card}，请核对") == [("BANK_CARD", card)]


def test_bank_card_negatives() -> None:
    assert found("card 4111111111111112") == []  # Luhn fails
    assert found("订单20260913210304") == []  # Luhn-valid, but no card starts with 20
    assert found("ref 7000123412341237") == []  # Luhn-valid, no issuer starts with 7
    assert found("card 4111 1111 1111 111") == []  # 15 digits, Luhn fails


# --- e-mail, URLs, IPs -------------------------------------------------------------------------------------

def test_email() -> None:
    assert found("邮箱zhangsan@example.com，谢谢") == [("EMAIL", "zhangsan@example.com")]
    assert found("write to j.doe+tag@mail.example.co.uk.") == [("EMAIL", "j.doe+tag@mail.example.co.uk")]
    assert found("user@localhost and @handle") == []


def test_urls() -> None:
    assert found("访问https://example.com/a?b=1查看") == [("URL", "https://example.com/a?b=1")]
    assert found("see (https://en.wikipedia.org/wiki/Foo_(bar)).") == [
        ("URL", "https://en.wikipedia.org/wiki/Foo_(bar)")]
    assert found("官网www.baidu.com/s?wd=1。") == [("URL", "www.baidu.com/s?wd=1")]
    assert found("go to http://localhost:8080/health, then") == [("URL", "http://localhost:8080/health")]


def test_email_inside_url_is_one_url() -> None:
    text = "link https://user:pw@example.com/x?mail=a@b.com end"
    assert found(text) == [("URL", "https://user:pw@example.com/x?mail=a@b.com")]


def test_ipv4() -> None:
    assert found("从192.168.1.10登录") == [("IP_ADDRESS", "192.168.1.10")]
    assert found("host 8.8.8.8.") == [("IP_ADDRESS", "8.8.8.8")]
    assert found("bad 256.1.1.1 and 1.2.3.4.5 and 01.2.3.4") == []


@pytest.mark.parametrize("text", ["version 1.2.3.4", "v1.2.3.4", "版本1.2.3.4", "ver. 10.0.0.1", "build 4.20.5.1"])
def test_versions_are_not_ips(text: str) -> None:
    assert found(text) == []


def test_ipv6() -> None:
    assert only("src=2001:db8::1: failed", "IP_ADDRESS") == ["2001:db8::1"]
    assert only("addr fe80::1%eth0 up", "IP_ADDRESS") == ["fe80::1%eth0"]
    assert only("mapped ::ffff:10.0.0.1.", "IP_ADDRESS") == ["::ffff:10.0.0.1"]
    assert only("地址467:3b75:7ff2:e341:810d:2e31:4bcb:6b22。", "IP_ADDRESS") == [
        "467:3b75:7ff2:e341:810d:2e31:4bcb:6b22"]


def test_ipv6_negatives() -> None:
    assert found("at 12:30:45, MAC 00:1A:2B:3C:4D:5E, slice x[1::2], std::vector") == []


def test_url_wins_over_ip_inside() -> None:
    assert found("GET http://10.0.0.5:8080/api") == [("URL", "http://10.0.0.5:8080/api")]


# --- secrets -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("token", [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8",
    "github_pat_11ABCDEFG0123456789abc_" + "x" * 20 + "Y9z8W7",
    "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "xoxb-123456789012-123456789012-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
])
def test_known_tokens(token: str) -> None:
    assert found(f"泄露的凭证 {token} 已吊销") == [("SECRET", token)]


def test_pem_private_key() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1b2c3\nabcDEF123==\n-----END RSA PRIVATE KEY-----"
    assert found(f"key:\n{pem}\nend") == [("SECRET", pem)]


@pytest.mark.parametrize(("text", "value"), [
    ("export API_KEY=9f86d081884c7d659a2feaa0c55ad015", "9f86d081884c7d659a2feaa0c55ad015"),
    ('{"client_secret": ")28xD fxv!Q"}', ")28xD fxv!Q"),
    ("password: hunter22.", "hunter22"),
    ("DB_PASSWORD='Xk2!pq9Z'", "Xk2!pq9Z"),
    ("密码：Abc12345，谢谢", "Abc12345"),
    ("API密钥=Zx81kLqP0vW2", "Zx81kLqP0vW2"),
    ("Authorization: Bearer abcdefghijklmnop1234", "abcdefghijklmnop1234"),
    ("SECRET_KEY = I@07@7Le7Q", "I@07@7Le7Q"),
    ("api_key=$W84RHQQc4x", "$W84RHQQc4x"),
    ("api_key=%(I7FuDdVw", "%(I7FuDdVw"),
    ("access_token=m78(i@vU*bV", "m78(i@vU*bV"),
])
def test_secret_assignments(text: str, value: str) -> None:
    assert found(text) == [("SECRET", value)]


@pytest.mark.parametrize("text", [
    "max_tokens=512", "tokens: 1024", "password: ******", "password=${DB_PASSWORD}", "api_key=$API_KEY",
    "token = <your-token>", "secret: none", "pass: true", "tokenizer=qwen2-tokenizer-v1", "bypass=abcdefgh123",
    "use sk-learn-tutorial-notes-and-examples", "password=[SECRET_1]", "api_key=[SECRET:1a2b3c4d]",
    "token = header[7:].strip()", "password = self.settings.db_password", "api_key=config.get_api_key(name)",
    "password: Optional[str] = None", "password = return_value_of_call", "        password = \n    return",
    "password = '%(password)s'",
])
def test_secret_negatives(text: str) -> None:
    assert only(text, "SECRET") == []


# --- mixed text and overlaps -------------------------------------------------------------------------------

def test_mixed_chinese_ticket() -> None:
    text = ("工单#20260913210300：客户李静（身份证号110101199003074514）手机+86 138-1234-5678，"
            "邮箱xiulan25@example.com，卡号6222 0212 3456 7890 128，从192.168.1.10访问https://chao.cn/。")
    assert found(text) == [
        ("ID_CARD", "110101199003074514"), ("PHONE", "+86 138-1234-5678"), ("EMAIL", "xiulan25@example.com"),
        ("BANK_CARD", "6222 0212 3456 7890 128"), ("IP_ADDRESS", "192.168.1.10"), ("URL", "https://chao.cn/"),
    ]


def test_resolve_overlaps_longest_then_specific() -> None:
    a = Entity(0, 11, "PHONE", "x" * 11)
    b = Entity(0, 18, "ID_CARD", "x" * 18)
    c = Entity(0, 18, "BANK_CARD", "x" * 18)
    d = Entity(20, 25, "PERSON", "x" * 5, source="model", score=0.8)
    assert resolve_overlaps([a, c, d, b]) == [b, d]


# --- redaction ---------------------------------------------------------------------------------------------

TICKET = "张三的手机13812345678，备用13812345678，另一部13912345678，邮箱a@example.com。"


def test_mask_keeps_length_and_layout() -> None:
    text = "call +1 415-555-0132 now"
    masked, mapping = redact_text(text, detect_rules(text), "mask")
    assert masked == "call ** ************ now"
    assert len(masked) == len(text) and mapping == {}


def test_placeholders_numbered_per_type_and_reused() -> None:
    redacted, mapping = redact_text(TICKET, detect_rules(TICKET), "placeholder")
    assert redacted == "张三的手机[PHONE_1]，备用[PHONE_1]，另一部[PHONE_2]，邮箱[EMAIL_1]。"
    assert mapping == {"[PHONE_1]": "13812345678", "[PHONE_2]": "13912345678", "[EMAIL_1]": "a@example.com"}
    assert restore(redacted, mapping) == TICKET


def test_placeholder_already_in_text_is_skipped() -> None:
    text = "literal [PHONE_1] and 13812345678"
    redacted, mapping = redact_text(text, detect_rules(text), "placeholder")
    assert redacted == "literal [PHONE_1] and [PHONE_2]"
    assert restore(redacted, mapping) == text


def test_hash_is_deterministic_and_salted() -> None:
    first, mapping = redact_text(TICKET, detect_rules(TICKET), "hash", salt="salt")
    second, _ = redact_text(TICKET, detect_rules(TICKET), "hash", salt="salt")
    salted, _ = redact_text(TICKET, detect_rules(TICKET), "hash", salt="pepper")
    assert first == second != salted
    assert first.count("[PHONE:") == 3 and len(set(mapping)) == 3
    assert all(len(tag) == len("[PHONE:") + 9 for tag in mapping if tag.startswith("[PHONE:"))
    assert restore(first, mapping) == TICKET


def test_hash_without_a_salt_is_refused_and_redact_keys_it_with_the_installation_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unkeyed tag is HMAC("", value): anyone reverses a phone number's tag by hashing all 10^10 numbers."""
    with pytest.raises(ValueError, match="salt"):
        redact_text(TICKET, detect_rules(TICKET), "hash")
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path))
    first = redact_rules(TICKET, style="hash")
    phone = next(e.text for e in first.entities if e.type == "PHONE")
    unkeyed = "[PHONE:" + hmac.new(b"", phone.encode(), hashlib.sha256).hexdigest()[:8] + "]"
    assert unkeyed not in first.text and unkeyed not in first.mapping
    key_file = tmp_path / "redact-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert redact_rules(TICKET, style="hash").text == first.text  # stable on this installation
    key_file.unlink()
    assert redact_rules(TICKET, style="hash").text != first.text  # the secret, not a constant, keys the tags
    # a data dir the key cannot be kept in: one line naming --salt, not an OSError
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(blocker / "data"))
    with pytest.raises(ConfigError, match="--salt"):
        redact_rules(TICKET, style="hash")
    assert redact_rules(TICKET, style="hash", salt="s").text.count("[PHONE:") == 3


def test_redact_model_entities_overlaps_dropped() -> None:
    text = "Ann Lee (ann@example.com) lives at 1 Main St"
    entities = [*detect_rules(text), Entity(0, 7, "PERSON", "Ann Lee", "model", 0.8),
                Entity(9, 12, "PERSON", "ann", "model", 0.8), Entity(35, 44, "ADDRESS", "1 Main St", "model", 0.8)]
    redacted, mapping = redact_text(text, entities, "placeholder")
    assert redacted == "[PERSON_1] ([EMAIL_1]) lives at [ADDRESS_1]"
    assert restore(redacted, mapping) == text


def test_redact_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        redact_text("abc", [Entity(2, 9, "PHONE", "c")], "mask")
    with pytest.raises(ValueError):
        redact_text("abc", [], "shred")
    assert redact_text("abc", [], "placeholder") == ("abc", {})
    assert restore("abc", {}) == "abc"


def test_redacted_text_has_no_rule_entities_left() -> None:
    redacted, _ = redact_text(TICKET, detect_rules(TICKET), "placeholder")
    assert detect_rules(redacted) == []


# --- the benchmark generator -------------------------------------------------------------------------------

def _benchmark() -> ModuleType:
    pytest.importorskip("faker")
    path = ROOT / "benchmarks" / "tasks" / "redact_data.py"
    spec = importlib.util.spec_from_file_location("redact_data", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["redact_data"] = module
    spec.loader.exec_module(module)
    return module


def test_benchmark_set_is_deterministic_and_scored() -> None:
    bench = _benchmark()
    records = bench.build_set(40, 7)
    assert records == bench.build_set(40, 7)
    assert {r["lang"] for r in records} == {"zh", "en"}
    for record in records:
        for entity in record["entities"]:
            assert 0 <= entity["start"] < entity["end"] <= len(record["text"])
    table = bench.score(records, records, bench.RULE_TYPES)
    assert table["ALL"]["f1"] == 1.0
    empty = bench.score(records, [{"id": r["id"], "entities": []} for r in records], ["EMAIL"])
    assert empty["EMAIL"]["recall"] == 0.0


@pytest.mark.parametrize("text, phone", [
    ("手机：138–0013–8000。", "138–0013–8000"), ("手机：138—0013—8000。", "138—0013—8000"),
    ("手机：138\u00a00013\u00a08000。", "138\u00a00013\u00a08000"), ("电话：0755–26881234。", "0755–26881234"),
    ("call +1 415\u2013555\u20132671 today", "+1 415\u2013555\u20132671"),
])
def test_phones_written_with_dashes_and_spaces_of_word_processors_are_found(text: str, phone: str) -> None:
    """En and em dashes, no-break spaces between the digit groups: the number went out unredacted (and `route`
    sent it upstream in the clear)."""
    assert only(text, "PHONE") == [phone]


def test_an_id_after_its_keyword_stays_an_id_when_it_happens_to_pass_luhn() -> None:
    """310104198512123456 (a bad checksum) passes Luhn: typed BANK_CARD, `types=["ID_CARD"]` left it in the clear."""
    assert [(e.type, e.validated) for e in detect_rules("身份证号是310104198512123456。")] == [("ID_CARD", False)]
    assert only("卡号 6222020200112233445 ", "BANK_CARD") == ["6222020200112233445"]
    # a real card after an ID word is still a card (only an ID-shaped number is held to the keyword)
    for text in ("ID number: 4111111111111111", "证件号码 4111111111111111"):
        assert [(e.type, e.validated) for e in detect_rules(text)] == [("BANK_CARD", True)], text
