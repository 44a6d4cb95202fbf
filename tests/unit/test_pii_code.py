"""Identifiers inside code are not redacted as names (``tasks/pii_code.py``); names in code's strings and in prose
are, and so is every rule type."""

from __future__ import annotations

import pytest

from tiankong.tasks.pii_code import code_spans, drop_code_identifiers
from tiankong.tasks.pii_rules import Entity

CODE = """Every error is a `tiankong.TiankongError`; see `get_user()` and `redactTable`.

```python
from tiankong import Client, TiankongError
author = "DeShawn Smith"
try:
    run()
except TiankongError as exc:
    notify('Alice', exc)
```

Contact TiankongError's author Alice Chen at alice.chen@example.com.
"""


def spans(word: str, type_: str = "PERSON", source: str = "tagger") -> list[Entity]:
    """Every occurrence of ``word`` in CODE as an entity of ``type_``."""
    found, at = [], CODE.find(word)
    while at >= 0:
        found.append(Entity(at, at + len(word), type_, word, source, 0.7))
        at = CODE.find(word, at + 1)
    return found


def kept(entities: list[Entity]) -> list[tuple[int, str]]:
    return [(e.start, e.text) for e in drop_code_identifiers(CODE, entities)]


def test_code_spans_are_the_fence_and_the_inline_spans() -> None:
    found = [CODE[a:b] for a, b in code_spans(CODE)]
    assert found[:3] == ["tiankong.TiankongError", "get_user()", "redactTable"]
    assert len(found) == 4 and found[3].startswith("```python") and found[3].rstrip().endswith("```")


def test_identifiers_in_code_are_not_names_and_the_same_word_in_prose_is() -> None:
    tiankong_error = spans("TiankongError")  # in the inline path, the import, the except, the closing prose
    assert len(tiankong_error) == 4
    assert [text for _, text in kept(tiankong_error)] == ["TiankongError"]  # the prose one only (fail safe)
    assert kept(spans("tiankong.TiankongError", "ADDRESS", "model")) == []
    assert kept(spans("get_user()", "ORG", "model")) == []
    assert [text for _, text in kept(spans("redactTable"))] == ["redactTable"]  # inline and bare: may be a name


@pytest.mark.parametrize("word", ["DeShawn Smith", "DeShawn", "Alice", "Alice Chen"])
def test_names_in_code_strings_and_prose_stay_redacted(word: str) -> None:
    entities = spans(word)
    assert entities and kept(entities) == [(e.start, e.text) for e in entities]


def test_rule_types_in_code_stay_and_text_without_code_is_untouched() -> None:
    email = [Entity(0, 9, "EMAIL", "`a@b.com`", "rule", 1.0)]
    assert drop_code_identifiers("`a@b.com`", email) == email
    plain = "Send TiankongError to getUser now."
    names = [Entity(5, 18, "PERSON", "TiankongError", "tagger", 0.7), Entity(22, 29, "PERSON", "getUser", "model", 0.8)]
    assert drop_code_identifiers(plain, names) == names
    unclosed = "```\nexcept TiankongError:\n"  # no closing fence: not known to be code
    assert drop_code_identifiers(unclosed, [Entity(11, 24, "PERSON", "TiankongError", "tagger", 0.7)])


def _one(text: str, word: str) -> bool:
    """Whether the first ``word`` in ``text``, tagged a person, is dropped as code."""
    at = text.index(word)
    return not drop_code_identifiers(text, [Entity(at, at + len(word), "PERSON", word, "tagger", 0.7)])


@pytest.mark.parametrize(("text", "word"), [
    ("```python\nexcept Exception as e:\n    pass\n```", "Exception"),  # after a keyword: no inner capital needed
    ("```python\nfrom confection import Config\n```", "Config"),
    ("```py\napp = typer.Typer()\n```", "Typer"),  # an attribute, a call: the tagger's span is the word alone
    ("```js\nuser = User(name=1)\n```", "User"),
    ("Call ``getUser()`` first.", "getUser"),  # a double-backtick inline span
    ("````python\nclient = OpenAI(\n`````", "OpenAI"),  # closed by a longer fence (CommonMark)
])
def test_what_code_shows_as_code_is_dropped(text: str, word: str) -> None:
    assert _one(text, word)


@pytest.mark.parametrize(("text", "word"), [
    ("```python\n# TODO(jdoe) AliceChen fixes this\nx = 1\n```", "AliceChen"),  # a comment is prose
    ("```js\nx = 1  // ask MariaLopez before running\n```", "MariaLopez"),
    ('```python\ndef f():\n    """Maintainer:\n    AliceChen, see notes."""\n```', "AliceChen"),  # a docstring
    ("```python\nAuthor: jane_doe\n```", "jane_doe"),  # a handle is not code
    ("```bash\nssh alice99@host\n```", "alice99"),
])
def test_names_in_comments_docstrings_and_handles_stay_redacted(text: str, word: str) -> None:
    assert not _one(text, word)


@pytest.mark.parametrize(("text", "word"), [
    ("```\nReviewed by Smith.\n```", "Smith"),  # an untagged fence is prose; a full stop is not an attribute
    ("```text\nAuthor: Kowalski.\n```", "Kowalski"),
    ("```log\n2024-01-02 login ok user=Kowalski.\n```", "Kowalski"),
    ("```python\nprint(1)  # Reviewed by Smith.\n```", "Smith"),
    ("```yaml\nreviewer: McDonald\n```", "McDonald"),  # a data format's bare value is data
    ("```\nreviewer: DiCaprio\n```", "DiCaprio"),
    ("Please ask `McDonald` about it.", "McDonald"),  # inline: a bare capitalised word may be a name
    ("```\neveryone except Mary came\n```", "Mary"),
    ("```java\n/**\n * Maintained by Kowalski.\n */\nclass A {}\n```", "Kowalski"),
    ("```html\n<!-- author: Kowalski. -->\n```", "Kowalski"),
    ("```js\nconst s = `\nDear Kowalski.\n`;\n```", "Kowalski"),
    ("```python\nx = 1  # meet Anna(\n```", "Anna"),
])
def test_what_a_review_found_letting_names_through_stays_redacted(text: str, word: str) -> None:
    """A read-only review of the first shipped rule found each of these names dropped as code."""
    assert not _one(text, word)
