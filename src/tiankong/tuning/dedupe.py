"""``tiankong tune dedupe``: labelled pairs → a decider for dedupe's uncertain band, by the classify tuner.

A pairs file (JSONL, a JSON list or CSV) holds ``{"a": TEXT, "b": TEXT, "label": …}`` rows; the label says whether
the two are the same item: ``same``/``duplicate``/``yes``/``true``/``1`` (or ``True``/``1`` as values) or
``different``/``distinct``/``no``/``false``/``0``. Each pair becomes the text a dedupe decider is shown
(``tiankong.dedupe.pair_text``: ``"A: <a>\\nB: <b>"``) labelled ``same`` or ``different``, and the classify tuner
(``tuning/classify.py``: stratified k-fold CV, calibrated, the best method by its stated rule) makes and registers
the decider. ``tiankong dedupe --decider NAME`` then decides the uncertain pairs with it.

By default only the methods that need no chat engine are scored (``tfidf`` and ``probe-part``, the embedding
part's vectors), because ``tiankong dedupe`` starts no chat engine; with ``model``/``url`` every classify method
is a candidate (such a decider serves a batch job with an engine, or a client).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .data import ExamplesError, read_records

if TYPE_CHECKING:
    from .classify import TuneReport

#: label values that mean "the same item" / "different items" (compared lower-cased)
SAME = ("same", "duplicate", "dup", "yes", "true", "1", "match")
DIFFERENT = ("different", "distinct", "no", "false", "0", "nonmatch", "non-duplicate")
#: the label words a tuned dedupe decider has, and what the prompt-based methods are told they mean
DESCRIPTIONS = {"same": "A and B are the same item (duplicates, maybe worded differently)",
                "different": "A and B are different items"}
ENGINE_FREE = ("tfidf", "probe-part", "probe-pair")


def pair_rows(path: str | Path) -> list[dict[str, str]]:
    """The pairs of ``path`` as classify examples ``{"text": pair_text(a, b), "label": same|different}``; a bad row
    is an ``ExamplesError`` naming it and the fix."""
    from ..dedupe.band import pair_text

    rows = []
    for number, row in enumerate(read_records(path), 1):
        where = f"pair {number} of {path}"
        if not isinstance(row, dict) or "_invalid" in row:
            raise ExamplesError(f"{where} is not an object", hint='use {"a": "…", "b": "…", "label": "same"}')
        a, b = row.get("a"), row.get("b")
        if not isinstance(a, str) or not a.strip() or not isinstance(b, str) or not b.strip():
            raise ExamplesError(f"{where} needs two non-empty texts a and b", hint='{"a": "…", "b": "…", "label": …}')
        # `same` (true/false, 1/0): DESIGN.md's record form {"a", "b", "same"}; `label` the classify one
        given = row.get("label", row.get("same"))
        if given is None:
            raise ExamplesError(f"{where} has no label (nor same)", hint='add "same": true|false (or "label": '
                                '"same"|"different") to each pair')
        label = _label(given)
        if label is None:
            raise ExamplesError(f"{where} has the label {given!r}",
                                hint=f"label each pair same ({', '.join(SAME)}) or different "
                                     f"({', '.join(DIFFERENT)})")
        rows.append({"text": pair_text(a, b), "label": label})
    return rows


def _label(value: Any) -> str | None:
    word = str(value).strip().lower() if isinstance(value, (str, int, bool)) else ""
    return "same" if word in SAME else "different" if word in DIFFERENT else None


def tune_dedupe(data: str | Path, *, name: str, model: str | None = None, url: str | None = None,
                methods: Sequence[str] | None = None, folds: int = 5, save: bool = True,
                llama_server: str | None = None, log: Callable[[str], None] = lambda _: None,
                cache_dir: Path | None = None) -> TuneReport:
    """Tune (and, with ``save``, register) a dedupe decider from labelled pairs (``tiankong tune dedupe``)."""
    from . import tune_classify

    rows = pair_rows(data)
    chosen = list(methods) if methods else None if (model or url) else list(ENGINE_FREE)
    with tempfile.TemporaryDirectory(prefix="tiankong-pairs-") as folder:
        examples = Path(folder) / f"{Path(data).stem}.jsonl"
        examples.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        report = tune_classify(examples, name=name, model=model, url=url, labels=["same", "different"],
                               methods=chosen, folds=folds, descriptions=DESCRIPTIONS, save=save,
                               llama_server=llama_server, log=log, cache_dir=cache_dir)
    report.pairs = True
    return report
