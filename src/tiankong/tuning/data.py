"""Labelled examples for ``tune``: JSONL or CSV records ``{"text", "label"}``, checked and hashed.

Every problem is reported with the record's number (1-based line for JSONL, row for CSV) so the user can fix
the file: a missing or empty text, a missing label, a label outside ``labels=``, one label only, or fewer than
:data:`MIN_PER_LABEL` examples of a label (cross-validation cannot score a label it sees a few times).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

MIN_PER_LABEL = 10


class ExamplesError(ConfigError):
    """The labelled examples cannot be used as they are (the message names the record and the fix)."""


@dataclass(frozen=True)
class Examples:
    """Checked examples: parallel ``texts`` and ``labels``; ``names`` is the label set in first-seen order."""

    texts: list[str]
    labels: list[str]
    names: list[str]
    source: str = ""

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> dict[str, int]:
        found = Counter(self.labels)
        return {name: found[name] for name in self.names}

    @property
    def sha256(self) -> str:
        """Hash of the examples' content (order-independent), recorded in every artifact made from them."""
        lines = sorted(json.dumps([t, lab], ensure_ascii=False) for t, lab in zip(self.texts, self.labels, strict=True))
        return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()

    def subset(self, indices: Sequence[int]) -> Examples:
        return Examples([self.texts[i] for i in indices], [self.labels[i] for i in indices], self.names, self.source)


def csv_rows(text: str, name: str, error: type[ConfigError] = ConfigError) -> list[dict[str, Any]]:
    """A CSV text's rows (header first), read strictly: a quote left open would swallow every later line into one
    cell without a word; it is ``error`` naming the line instead."""
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    rows: list[dict[str, Any]] = []
    last = 1  # the header's line
    try:
        for row in reader:
            rows.append(row)
            last = reader.line_num
    except csv.Error as exc:  # the row that failed starts after the last one read
        raise error(f"{name}: the row from line {last + 1} is not valid CSV ({exc})",
                    hint='close every quoted cell ("…"), and double a quote inside one ("")') from None
    return rows


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records of a ``.jsonl``/``.json`` (one object per line, or a JSON list) or ``.csv`` file (header row)."""
    file = Path(path)
    try:
        raw = file.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ExamplesError(f"cannot read {file}: {exc.strerror}", hint="check the --data path") from None
    except UnicodeDecodeError as exc:
        raise ExamplesError(f"{file} is not UTF-8 (byte {exc.start})", hint="convert it with iconv first") from None
    if file.suffix.lower() == ".csv":
        return csv_rows(raw, str(file), ExamplesError)
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            raise ExamplesError(f"{file} is not valid JSON: {exc}") from None
        return [row if isinstance(row, dict) else {"_invalid": row} for row in data]
    records: list[dict[str, Any]] = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ExamplesError(f"{file} line {number} is not JSON: {exc}",
                                hint='each line must be an object such as {"text": "…", "label": "…"}') from None
        records.append(row if isinstance(row, dict) else {"_invalid": row, "_line": number})
    return records


def check_examples(records: Iterable[dict[str, Any]], *, labels: Sequence[str] | None = None,
                   min_per_label: int = MIN_PER_LABEL, source: str = "") -> Examples:
    """Examples from records, or an :class:`ExamplesError` naming the first bad record and what to do."""
    texts: list[str] = []
    found: list[str] = []
    allowed = [str(x) for x in labels] if labels else None
    if allowed is not None and len(set(allowed)) != len(allowed):  # a decider tuned on it answered wrong labels
        twice = next(x for x in allowed if allowed.count(x) > 1)
        raise ExamplesError(f"--labels names {twice!r} twice", hint="give each label once")
    seen: dict[str, tuple[int, str]] = {}
    for number, row in enumerate(records, 1):
        where = f"record {number}" + (f" of {source}" if source else "")
        if not isinstance(row, dict) or "_invalid" in row:
            raise ExamplesError(f"{where} is not an object", hint='use {"text": "…", "label": "…"}')
        text, label = row.get("text"), row.get("label")
        if not isinstance(text, str) or not text.strip():
            raise ExamplesError(f"{where} has no text", hint='every record needs a non-empty "text"')
        if label is None or (isinstance(label, str) and not label.strip()) or isinstance(label, (list, dict)):
            raise ExamplesError(f"{where} has no label", hint='every record needs one "label" (a string)')
        name = str(label).strip()
        if allowed is not None and name not in allowed:
            raise ExamplesError(f"{where} has the label {name!r}, which is not one of {allowed}",
                                hint="fix the record or add the label to --labels")
        first = seen.setdefault(text.strip(), (number, name))
        if first[1] != name:  # one text, two answers: no decider can learn both
            raise ExamplesError(f"{where} has the text of record {first[0]} with another label ({name!r}, not "
                                f"{first[1]!r})", hint="keep one label per text (fix or remove one of them)")
        texts.append(text)
        found.append(name)
    names = allowed or list(dict.fromkeys(found))
    examples = Examples(texts, found, names, source)
    counts = examples.counts()
    if len([n for n, c in counts.items() if c]) < 2:
        raise ExamplesError(f"the examples have {len(set(found))} label(s); a decision needs at least two",
                            hint="add examples of the other label(s)")
    few = {n: c for n, c in counts.items() if c < min_per_label}
    if few:
        listed = ", ".join(f"{n!r}: {c}" for n, c in few.items())
        raise ExamplesError(f"too few examples per label ({listed}; at least {min_per_label} each)",
                            hint="label more examples of those labels")
    return examples


def load_examples(path: str | Path, *, labels: Sequence[str] | None = None,
                  min_per_label: int = MIN_PER_LABEL) -> Examples:
    return check_examples(read_records(path), labels=labels, min_per_label=min_per_label, source=str(path))
