"""A labelled PII evaluation set (zh_CN + en) generated with Faker, and a span scorer.

    .venv/bin/python benchmarks/tasks/redact_data.py --n 1000 --seed 0 --eval [--out redact.jsonl] [--errors 5]

Records: ``{"id", "lang", "text", "entities": [{"start", "end", "type"}]}``. Sentences are tickets, e-mails,
logs and config snippets; slots are filled with Faker identities (names, addresses, organisations, phones,
resident IDs, SSNs, cards, e-mail, IPs, URLs) and generated secrets, next to distractors that must not be
flagged (order numbers, timestamps, amounts, versions, dates). Deterministic for a seed and a Faker version:
nothing depends on today's date (resident IDs take the area code and sequence of ``Faker('zh_CN').ssn()`` and
a seeded date of birth). Needs Faker: ``.venv/bin/pip install faker``.

``--eval`` runs ``tiankong.tasks.pii_rules.detect_rules`` and prints precision/recall/F1 per type, for exact
spans and for overlapping spans of the same type. PERSON, ADDRESS and ORG are model types: the rules find none.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import string
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from faker import Faker
except ImportError:  # pragma: no cover
    sys.exit("redact_data needs Faker: .venv/bin/pip install faker")

RULE_TYPES = ("ID_CARD", "PHONE", "BANK_CARD", "EMAIL", "IP_ADDRESS", "URL", "SECRET", "PASSPORT")
MODEL_TYPES = ("PERSON", "ADDRESS", "ORG")
Spans = list[tuple[int, int, str]]
Slot = tuple[str, Spans]  # filled text and its entities, offsets relative to the slot


class Gen:
    """Seeded slot fillers: Faker for identities, ``random.Random`` for formats, secrets and distractors."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.zh, self.en, self.gb = Faker("zh_CN"), Faker("en_US"), Faker("en_GB")
        for index, fake in enumerate((self.zh, self.en, self.gb)):
            fake.seed_instance(seed * 31 + index)

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def digits(self, n: int) -> str:
        return "".join(self.rng.choice(string.digits) for _ in range(n))

    def chars(self, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    # --- identities ---------------------------------------------------------------------------------------
    def cn_id(self) -> str:
        base = self.zh.ssn()
        born = f"{self.rng.randint(1940, 2007)}{self.rng.randint(1, 12):02d}{self.rng.randint(1, 28):02d}"
        body = base[:6] + born + base[14:17]
        weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
        return body + "10X98765432"[sum(int(d) * w for d, w in zip(body, weights, strict=True)) % 11]

    def cn_mobile(self) -> str:
        number = self.zh.phone_number()
        style = self.rng.random()
        if style < 0.6:
            return number
        if style < 0.75:
            return self.pick("+86 ", "+86-", "+86", "0086 ", "(+86) ") + number
        sep = self.pick("-", " ")
        return f"{number[:3]}{sep}{number[3:7]}{sep}{number[7:]}"

    def cn_landline(self) -> str:
        area = self.pick("010", "021", "020", "0755", "0571", "028", "027", "025", "0512", "0431")
        local = str(self.rng.randint(2, 8)) + self.digits(7)
        return self.pick(f"{area}-{local}", f"({area}){local}", f"{area} {local[:4]} {local[4:]}",
                         f"{area}-{local}转{self.rng.randint(100, 999)}")

    def card(self, lang: str) -> str:
        if lang == "zh":
            number = self.zh.credit_card_number() if self.rng.random() < 0.7 else _luhn_complete("62" + self.digits(16))
        else:
            kinds = ("visa16", "visa13", "visa19", "mastercard", "amex", "discover", "diners", "jcb15", "jcb16")
            number = self.en.credit_card_number(card_type=self.pick(*kinds))
        style = self.rng.random()
        if style < 0.6:
            return number
        sep = " " if style < 0.85 else "-"
        sizes = (4, 6, 5) if len(number) in (14, 15) and number[0] == "3" else (4, 4, 4, 4, 3)
        parts, cursor = [], 0
        for size in sizes:
            parts.append(number[cursor:cursor + size])
            cursor += size
        return sep.join(part for part in parts if part)

    def passport(self, lang: str) -> str:
        if lang == "en":
            return self.en.passport_number()
        return self.pick("E" + self.digits(8), "G" + self.digits(8), "E" + self.pick(*"ABCDEFGHJKLMN") + self.digits(7))

    def url(self, lang: str) -> str:
        fake = self.zh if lang == "zh" else self.en
        url = fake.url() if self.rng.random() < 0.5 else self.en.uri()
        return url + (f"?id={self.rng.randint(1, 99999)}" if self.rng.random() < 0.3 else "")

    # --- secrets (the span is the secret value only) ------------------------------------------------------
    def token(self) -> str:
        header = _b64url(b'{"alg":"HS256","typ":"JWT"}')
        payload = _b64url(json.dumps({"sub": self.digits(8), "iat": 1700000000 + self.rng.randint(0, 10**7)}).encode())
        return self.pick(
            "AKIA" + self.chars(16, string.ascii_uppercase + string.digits),
            "ghp_" + self.chars(36), "github_pat_" + self.chars(22) + "_" + self.chars(59),
            "sk-proj-" + self.chars(48, string.ascii_letters + string.digits + "_-"), "sk-" + self.chars(48),
            f"xoxb-{self.digits(12)}-{self.digits(12)}-{self.chars(24)}", "AIza" + self.chars(35),
            "sk_live_" + self.chars(24), f"{header}.{payload}.{self.chars(43, string.ascii_letters + '_-')}")

    def secret(self, lang: str) -> Slot:
        kind = self.rng.random()
        if kind < 0.35:
            value = self.token()
            return value, [(0, len(value), "SECRET")]
        if kind < 0.45:
            body = "\n".join(self.chars(64, string.ascii_letters + string.digits + "+/") for _ in range(3))
            pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
            return pem, [(0, len(pem), "SECRET")]
        value = self.pick(self.chars(32, "0123456789abcdef"), self.en.password(length=self.rng.randint(10, 16)),
                          self.chars(40, string.ascii_letters + string.digits + "+/"))
        keys = ["api_key=", "DB_PASSWORD=", '"client_secret": "', "SECRET_KEY = ", "password: ",
                "Authorization: Bearer ", "access_token="] + (["密码：", "API密钥="] if lang == "zh" else [])
        key = self.pick(*keys)
        if key.startswith("Authorization"):
            value = self.chars(32)
        return key + value + ('"' if key.endswith('"') else ""), [(len(key), len(key) + len(value), "SECRET")]

    # --- distractors --------------------------------------------------------------------------------------
    def order(self) -> str:
        return self.pick(f"2026{self.rng.randint(1, 12):02d}{self.rng.randint(1, 28):02d}{self.digits(8)}",
                         "SO" + self.digits(10), str(self.rng.randint(10**11, 10**12 - 1)), "12" + self.digits(9))

    def amount(self) -> str:
        return f"{self.rng.randint(1, 99999):,}.{self.rng.randint(0, 99):02d}"

    def timestamp(self) -> str:
        hour, minute, second = self.rng.randint(0, 23), self.rng.randint(0, 59), self.rng.randint(0, 59)
        return self.pick(f"2026-09-{self.rng.randint(1, 28):02d} {hour:02d}:{minute:02d}:{second:02d}",
                         f"2026{self.rng.randint(1, 12):02d}{self.rng.randint(10, 28)}{hour:02d}{minute:02d}00")

    def version(self) -> str:
        return ".".join(str(self.rng.randint(0, 20)) for _ in range(self.rng.choice((3, 4))))


def _luhn_complete(body: str) -> str:
    total = 0
    for index, char in enumerate(reversed(body)):
        value = int(char) * (1 if index % 2 else 2)
        total += value - 9 if value > 9 else value
    return body + str(-total % 10)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _slots(g: Gen, lang: str) -> dict[str, Callable[[], Slot]]:
    fake = g.zh if lang == "zh" else g.en

    def typed(kind: str | None, make: Callable[[], str]) -> Callable[[], Slot]:
        def fill() -> Slot:
            value = make()
            return value, ([(0, len(value), kind)] if kind else [])
        return fill

    return {
        "name": typed("PERSON", fake.name), "org": typed("ORG", fake.company),
        "address": typed("ADDRESS", lambda: fake.address().replace("\n", ", ")),
        "phone": typed("PHONE", g.cn_mobile if lang == "zh" else fake.phone_number),
        "landline": typed("PHONE", g.cn_landline), "intl": typed("PHONE", lambda: _uk_phone(g)),
        "id": typed("ID_CARD", g.cn_id if lang == "zh" else g.en.ssn), "card": typed("BANK_CARD", lambda: g.card(lang)),
        "passport": typed("PASSPORT", lambda: g.passport(lang)), "email": typed("EMAIL", fake.email),
        "ip": typed("IP_ADDRESS", lambda: g.pick(g.en.ipv4_public(), g.en.ipv4_private(), g.en.ipv6())),
        "url": typed("URL", lambda: g.url(lang)), "secret": lambda: g.secret(lang),
        "order": typed(None, g.order), "amount": typed(None, g.amount), "ts": typed(None, g.timestamp),
        "version": typed(None, g.version),
        "date": typed(None, lambda: f"{g.rng.randint(1, 12):02d}/{g.rng.randint(26, 35)}"),
    }


def _uk_phone(g: Gen) -> str:
    while True:
        number: str = g.gb.phone_number()
        if number.startswith("+44"):
            return number


TEMPLATES = {
    "zh": [
        "工单#{order}：客户{name}（身份证号{id}）来电反映无法登录，手机{phone}，联系地址：{address}。",
        "您好，我是{org}的{name}，邮箱{email}，座机{landline}，请将退款¥{amount}打到我的银行卡{card}，谢谢！",
        "[{ts}] INFO 用户{name}从{ip}登录，访问{url}，客户端版本{version}。",
        "出差申请：{name}，护照号码{passport}，身份证{id}，紧急联系人电话{phone}。",
        "安全告警：仓库配置中发现{secret}，来源IP {ip}，负责人{name}，请立即轮换。",
        "{name}您好，订单{order}已发货，金额{amount}元，物流查询：{url}，如有疑问请致电{landline}。",
        "报销单 {ts}：{org} {name}，卡号{card}，金额¥{amount}，手机{phone}，邮箱{email}。",
        "{name}的护照{passport}已提交，回执发送至{email}；版本{version}。",
    ],
    "en": [
        "Ticket #{order}: {name} from {org} reports login failures from {ip}. Phone: {phone}, e-mail: {email}.",
        "Hi {name},\nplease update my card on file to {card} (exp {date}). You can reach me at {phone}.\nThanks!",
        "{ts} WARN auth: user={email} src={ip} agent=v{version} leaked {secret}",
        "Shipping to {name}, {address}. SSN on file: {id}. Passport no. {passport}.",
        "Config committed by {name} ({email}) at {ts}:\n{secret}\nbuild {version}",
        "Invoice {order} for ${amount} paid by card {card}; receipt sent to {email}; portal {url}.",
        "Call {name} at {intl} (London office of {org}) or on {phone}, order {order}.",
        "{ts} DEBUG GET {url} from {ip} took 123ms, version {version}, user {name}",
    ],
}


def _fill(template: str, slots: Mapping[str, Callable[[], Slot]]) -> tuple[str, Spans]:
    text, spans = "", Spans()
    for literal, field, _, _ in string.Formatter().parse(template):
        text += literal
        if field:
            value, inner = slots[field]()
            spans.extend((len(text) + s, len(text) + e, kind) for s, e, kind in inner)
            text += value
    return text, spans


def build_set(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` labelled records, half Chinese and half English, deterministic for ``seed``."""
    g = Gen(seed)
    slots = {lang: _slots(g, lang) for lang in TEMPLATES}
    records = []
    for index in range(n):
        lang = "zh" if index % 2 == 0 else "en"
        text, spans = _fill(g.rng.choice(TEMPLATES[lang]), slots[lang])
        records.append({"id": f"{lang}-{index:05d}", "lang": lang, "text": text,
                        "entities": [{"start": s, "end": e, "type": kind} for s, e, kind in spans]})
    return records


def _match_overlap(gold: Sequence[tuple[int, int]], pred: Sequence[tuple[int, int]]) -> int:
    used: set[int] = set()
    hits = 0
    for start, end in gold:
        for index, (p_start, p_end) in enumerate(pred):
            if index not in used and p_start < end and start < p_end:
                used.add(index)
                hits += 1
                break
    return hits


def _prf(tp: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    precision = tp / n_pred if n_pred else 1.0
    recall = tp / n_gold if n_gold else 1.0
    return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall else 0.0)


def score(gold: Iterable[Mapping[str, Any]], predicted: Iterable[Mapping[str, Any]],
          types: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per type (and ``ALL``): support, exact-span P/R/F1 and same-type overlap P/R/F1. Records pair by ``id``."""
    wanted = list(types)
    by_id = {record["id"]: record["entities"] for record in predicted}
    counts = {kind: [0, 0, 0, 0] for kind in [*wanted, "ALL"]}  # gold, predicted, exact hits, overlap hits
    for record in gold:
        for kind in wanted:
            g = sorted((e["start"], e["end"]) for e in record["entities"] if e["type"] == kind)
            p = sorted((e["start"], e["end"]) for e in by_id.get(record["id"], []) if e["type"] == kind)
            row = [len(g), len(p), len(set(g) & set(p)), _match_overlap(g, p)]
            for key in (kind, "ALL"):
                counts[key] = [a + b for a, b in zip(counts[key], row, strict=True)]
    result: dict[str, dict[str, float]] = {}
    for kind, (n_gold, n_pred, exact, overlap) in counts.items():
        precision, recall, f1 = _prf(exact, n_pred, n_gold)
        o_precision, o_recall, o_f1 = _prf(overlap, n_pred, n_gold)
        result[kind] = {"support": n_gold, "predicted": n_pred, "precision": precision, "recall": recall, "f1": f1,
                        "overlap_precision": o_precision, "overlap_recall": o_recall, "overlap_f1": o_f1}
    return result


def _print_table(table: Mapping[str, Mapping[str, float]]) -> None:
    print(f"{'type':<11} {'gold':>5} {'pred':>5} {'P':>6} {'R':>6} {'F1':>6} | {'oP':>6} {'oR':>6} {'oF1':>6}")
    for kind, row in table.items():
        print(f"{kind:<11} {row['support']:>5.0f} {row['predicted']:>5.0f} {row['precision']:>6.3f} "
              f"{row['recall']:>6.3f} {row['f1']:>6.3f} | {row['overlap_precision']:>6.3f} "
              f"{row['overlap_recall']:>6.3f} {row['overlap_f1']:>6.3f}")


def _print_errors(gold: Sequence[Mapping[str, Any]], predicted: Sequence[Mapping[str, Any]], limit: int) -> None:
    shown = 0
    for record, pred in zip(gold, predicted, strict=True):
        g = {(e["start"], e["end"], e["type"]) for e in record["entities"] if e["type"] in RULE_TYPES}
        p = {(e["start"], e["end"], e["type"]) for e in pred["entities"]}
        for start, end, kind in sorted((g - p) | (p - g)):
            if shown >= limit:
                return
            shown += 1
            label = "missed" if (start, end, kind) in g else "extra"
            print(f"{label:<6} {kind:<10} {record['text'][start:end]!r}  in {record['id']}: {record['text']!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the records as JSONL")
    parser.add_argument("--eval", action="store_true", help="score tiankong's rule detectors on the set")
    parser.add_argument("--errors", type=int, default=0, help="print up to N misses/extras")
    args = parser.parse_args(argv)
    records = build_set(args.n, args.seed)
    if args.out:
        with args.out.open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
        print(f"wrote {len(records)} records to {args.out}")
    if args.eval:
        from tiankong.tasks.pii_rules import detect_rules

        predicted = [{"id": r["id"], "entities": [{"start": e.start, "end": e.end, "type": e.type}
                                                  for e in detect_rules(r["text"])]} for r in records]
        _print_table(score(records, predicted, RULE_TYPES))
        _print_errors(records, predicted, args.errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
