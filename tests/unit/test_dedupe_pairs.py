"""``probe-pair``'s comparisons of a pair's halves (``dedupe/pairs.py``): the ``digits`` column, and a decider that
reads exactly the columns it was fitted on (pure functions: no engine)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tiankong.deciders import methods
from tiankong.dedupe.pairs import COLUMNS, LEGACY_COLUMNS, lexical, select
from tiankong.errors import ConfigError

DIGITS = COLUMNS.index("digits") - 1  # lexical() has every column but the cosine
NUMBERS = COLUMNS.index("numbers") - 1


@pytest.mark.parametrize(("a", "b", "numbers", "digits"), [
    # the same phone and street number; one side adds cross streets: not the same set, every shared digit kept
    ("carnegie deli 854 7th ave. between 54th and 55th sts. new york 212/757-2245",
     "carnegie deli 854 seventh ave. new york city 212-757-2245", 0.0, 1.0),
    # another phone: the street number and the area code are shared (6 of the side with fewer's 13 digits)
    ("uncle nicks 747 9th ave. new york 212/315-1726", "uncle nicks 747 ninth ave. new york city 212-245-7992",
     0.0, 6 / 13),
    ("no numbers here", "none here either", 1.0, 1.0),
    ("room 12", "room twelve", 0.0, 0.0),
])
def test_digits_counts_the_shared_numbers_of_the_side_with_fewer(a: str, b: str, numbers: float,
                                                                   digits: float) -> None:
    row = lexical(a, b)
    assert len(row) == len(COLUMNS) - 1
    assert row[NUMBERS] == numbers
    assert row[DIGITS] == pytest.approx(digits)


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every column in which only ``digits`` separates the labels (0: same, 1: different)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.4, 0.6, size=(n, len(COLUMNS)))
    y = np.arange(n) % 2
    x[:, COLUMNS.index("digits")] = np.where(y == 0, 0.95, 0.2)
    return x, y


def test_a_pair_decider_stores_its_columns_and_one_saved_before_reads_the_first_six() -> None:
    x, y = _pairs(40)
    state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([""] * 40, {"pair": x}), y, 2)
    assert state["columns"] == list(COLUMNS)
    fitted = methods.predict(methods.PAIR_PROBE, state, methods.FeatureSet([""] * 40, {"pair": x}))
    assert (fitted.argmax(axis=1) == y).mean() == 1.0  # it reads the digits column
    # a decider saved before `digits` existed: fitted on six columns, no "columns" in its state
    old = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([""] * 40, {"pair": x[:, :6]}), y, 2)
    old.pop("columns")
    now = methods.predict(methods.PAIR_PROBE, old, methods.FeatureSet([""] * 40, {"pair": x}))
    assert now.shape == (40, 2)
    with_six = methods.predict_linear(old["linear"], x[:, : len(LEGACY_COLUMNS)])
    assert np.allclose(now, with_six)


def test_no_rows_select_to_no_rows_of_the_stored_columns() -> None:
    assert select(np.zeros((0,)), None).shape == (0, len(LEGACY_COLUMNS))
    assert select(np.zeros((0, len(COLUMNS))), list(COLUMNS)).shape == (0, len(COLUMNS))


def test_a_column_this_version_does_not_compute_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="phonetic"):
        select(np.zeros((1, len(COLUMNS))), [*COLUMNS, "phonetic"])


ZH = ["我的订单还没有发货，请尽快处理。", "我买的东西到现在都没寄出来。"]
EN = ["My order has not shipped yet.", "Where is my parcel?"]
E5, MINILM = "multilingual-e5-small:q4_0", "all-minilm-l6-v2:f16"


def test_each_record_is_read_by_the_part_that_reads_it_at_that_parts_cosines() -> None:
    """Chinese records get the multilingual part and its own cosines (e5's crowd near 1: 0.95 merges, CNSD STS-B dev's
    best; the band from 0.93); English and Latin-letter records keep MiniLM's 0.9 / 0.8; a mixed corpus is split by
    record."""
    from tiankong.dedupe import DedupeOptions
    from tiankong.dedupe.parts import semantic_groups

    def groups(texts: list[str], **options: object) -> list[tuple[str, float, float | None, tuple[int, ...]]]:
        found = semantic_groups(texts, DedupeOptions(**options))  # type: ignore[arg-type]
        return [(g.part, g.merge, g.floor, g.rows) for g in found]

    assert groups(ZH) == [(E5, 0.95, 0.93, (0, 1))]
    assert groups(EN) == [(MINILM, 0.9, 0.8, (0, 1))]
    assert groups(["carnegie deli 854 7th ave. new york 212/757-2245"]) == [(MINILM, 0.9, 0.8, (0,))]
    assert groups([EN[0], ZH[0], EN[1], ZH[1]]) == [(MINILM, 0.9, 0.8, (0, 2)), (E5, 0.95, 0.93, (1, 3))]
    assert groups([*EN * 30, ZH[0]])[-1] == (E5, 0.95, 0.93, (60,))  # a late Chinese record is not MiniLM's
    assert groups([ZH[0], EN[0]]) == [(MINILM, 0.9, 0.8, (1,)), (E5, 0.95, 0.93, (0,))]  # by name, not by order
    titles = ["apple iphone 15 pro max 256gb 钛金属", "apple iphone 15 pro max 256gb 原色钛金属 全网通"]
    assert groups(titles) == [(E5, 0.95, 0.93, (0, 1))]  # any CJK character: mixed-script twins stay together
    assert groups(ZH, part=E5) == [(E5, 0.95, 0.93, (0, 1))]
    assert groups([]) == []

    (named,) = semantic_groups([EN[0], ZH[0], EN[1], ZH[1]], DedupeOptions(part=MINILM))
    assert (named.part, named.rows, named.left_out) == (MINILM, (0, 2), 2)  # CJK left out of MiniLM, and said
    assert named.report()["left_out"] == 2


def test_given_cosines_win_and_a_floor_above_the_merge_is_refused() -> None:
    from tiankong.dedupe import DedupeOptions
    from tiankong.dedupe.parts import part_cosines

    assert part_cosines(E5, DedupeOptions(semantic=0.97))[:2] == (0.97, 0.93)
    assert part_cosines(E5, DedupeOptions(semantic=0.85))[:2] == (0.85, None)  # the floor kept under it: no band
    assert part_cosines(E5, DedupeOptions(semantic_low=0.91, part=E5))[:2] == (0.95, 0.91)
    assert part_cosines(MINILM, DedupeOptions(semantic=0.9, semantic_low=0.9)) == (0.9, None, "")  # no band
    assert "multilingual-e5" in part_cosines(E5, DedupeOptions(semantic=0.9, semantic_low=0.8))[2]  # said
    assert part_cosines(E5, DedupeOptions(semantic=0.9, part=E5))[2] == ""  # the part named: the user chose
    with pytest.raises(ConfigError, match="above the merging cosine 0.9"):
        part_cosines(MINILM, DedupeOptions(semantic_low=0.93))
    # refused before any record is read, whatever the records: MiniLM could read one of them (a digits-only record)
    with pytest.raises(ConfigError, match=r"above the merging cosine 0.9 \(all-minilm"):
        DedupeOptions(semantic_low=0.93).check()
    DedupeOptions(semantic_low=0.94, part=E5).check()  # e5 named: its 0.95 is the merge
    with pytest.raises(ConfigError, match="at most semantic"):
        DedupeOptions(semantic=0.8, semantic_low=0.85).check()
    with pytest.raises(ConfigError, match="outside"):
        DedupeOptions(semantic_low=1.5).check()


class _Spread:
    """A Ray job's arithmetic, in place: records which part embeds which texts (every vector alike)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    def vectors(self, texts: list[str], part: str) -> tuple[list[list[float]], str]:
        self.asked.append((part, list(texts)))
        return [[1.0, 0.0, 0.0]] * len(texts), ""

    def search(self, index_bytes: object, queries: object, wanted: int) -> tuple[object, object]:
        from tiankong.dedupe.semantic import search_index

        return search_index(index_bytes, queries, wanted)  # type: ignore[arg-type]


def test_a_mixed_corpus_is_searched_part_by_part_and_never_across() -> None:
    """The groups' vectors go to their own parts (in place or on Ray nodes) and pairs map back to the records; an
    English and a Chinese record are never a semantic pair, although every vector here is the same."""
    from tiankong.dedupe import DedupeOptions, Record, dedupe_flow
    from tiankong.dedupe.files import no_chat_engine
    from tiankong.structured.drivers import run_sync

    spread = _Spread()
    records = [Record("e1", EN[0]), Record("z1", ZH[0]), Record("e2", EN[1]), Record("z2", ZH[1])]
    result = run_sync(dedupe_flow(records, DedupeOptions(stages=("semantic",), spread=spread)), no_chat_engine)
    assert [part for part, _ in spread.asked] == [MINILM, E5]
    assert [len(texts) for _, texts in spread.asked] == [2, 2]
    assert [(a.id, a.cluster) for a in result.records] == [("e1", "e1"), ("z1", "z1"), ("e2", "e1"), ("z2", "z1")]
    stage = result.report["stages"]["semantic"]
    assert stage["merged"] == 2 and set(stage["parts"]) == {MINILM, E5}
    assert stage["parts"][E5]["threshold"] == 0.95 and stage["parts"][MINILM]["threshold"] == 0.9
    # each semantic pair names the part whose cosine its score is (two parts, two scales)
    assert {a.id: [e.part for e in a.evidence] for a in result.records} == {
        "e1": [MINILM], "z1": [E5], "e2": [MINILM], "z2": [E5]}
    assert result.records[0].to_json()["evidence"][0]["part"] == MINILM


class _Angled(_Spread):
    """Each group's second vector at ``cosine`` to its first (a pair inside the part's band)."""

    def __init__(self, cosines: dict[str, float]) -> None:
        super().__init__()
        self.cosines = cosines

    def vectors(self, texts: list[str], part: str) -> tuple[list[list[float]], str]:
        self.asked.append((part, list(texts)))
        c = self.cosines[part]
        return [[1.0, 0.0, 0.0], [c, (1 - c * c) ** 0.5, 0.0]], ""


def test_band_pairs_name_the_part_that_scored_them(tmp_path) -> None:
    """An uncertain English pair (MiniLM 0.85: band 0.8–0.9) and an uncertain Chinese one (e5 0.94: band
    0.93–0.95) are left apart, and the evidence and the rows to label say which part's cosine each score is."""
    from tiankong.dedupe import DedupeOptions, Record, dedupe_flow
    from tiankong.dedupe.files import band_lines, no_chat_engine
    from tiankong.structured.drivers import run_sync

    records = [Record("e1", EN[0]), Record("z1", ZH[0]), Record("e2", EN[1]), Record("z2", ZH[1])]
    spread = _Angled({MINILM: 0.85, E5: 0.94})
    result = run_sync(dedupe_flow(records, DedupeOptions(stages=("semantic",), spread=spread)), no_chat_engine)
    assert [a.cluster for a in result.records] == ["e1", "z1", "e2", "z2"]  # nothing merged
    rows = {(r["a_id"], r["b_id"]): r for r in map(json.loads, band_lines(result, records))}
    assert set(rows) == {("e1", "e2"), ("z1", "z2")}
    assert rows[("e1", "e2")]["part"] == MINILM and rows[("z1", "z2")]["part"] == E5
    assert abs(rows[("e1", "e2")]["score"] - 0.85) < 1e-3 and abs(rows[("z1", "z2")]["score"] - 0.94) < 1e-3
    assert all(not e.merged and e.part for a in result.records for e in a.evidence)


def _parts_asked(flow: object, answer: object) -> list[str | None]:
    """The parts of the calls a flow yields, every call answered with ``answer(call)``."""
    asked: list[str | None] = []
    gen = flow
    reply = None
    try:
        while True:
            calls = gen.send(reply)  # type: ignore[attr-defined]
            asked += [c.part for c in calls]
            reply = [answer(c) for c in calls]  # type: ignore[operator]
    except StopIteration:
        return asked


def _engine(call: object) -> object:
    path = call.path  # type: ignore[attr-defined]
    if path == "/props":
        return {"default_generation_settings": {"n_ctx": 512}}
    if path == "/tokenize":
        return {"tokens": [1, 2]}
    body = call.body  # type: ignore[attr-defined]
    return {"data": [{"index": i, "embedding": [1.0, float(i % 2)]} for i in range(len(body["input"]))]}


def test_a_pair_deciders_cosine_is_read_by_its_recorded_part_at_tuning_and_at_use() -> None:
    from tiankong.deciders.registry import Decider
    from tiankong.deciders.runtime import features_flow
    from tiankong.dedupe import pair_text
    from tiankong.dedupe.pairs import pair_features_flow

    zh = [pair_text(ZH[0], ZH[1])] * 3
    en = [pair_text(EN[0], EN[1])] * 3
    assert set(_parts_asked(pair_features_flow(zh), _engine)) == {E5}  # tuning: the part that reads the pairs
    assert set(_parts_asked(pair_features_flow([*en * 30, *zh]), _engine)) == {E5}  # any Chinese pair: e5
    assert set(_parts_asked(pair_features_flow(en), _engine)) == {MINILM}
    tuned = Decider("zh", "probe-pair", ["different", "same"], {"part": E5, "columns": ["cosine"], "linear": {}})
    assert set(_parts_asked(features_flow(tuned, en), _engine)) == {E5}  # use: the recorded part, any language
    old = Decider("old", "probe-pair", ["different", "same"], {"linear": {}})
    assert set(_parts_asked(features_flow(old, en), _engine)) == {MINILM}  # saved before parts were recorded
    assert _parts_asked(features_flow(old, zh), _engine) == []  # MiniLM cannot read them: cosine 0, no call
    none = Decider("none", "probe-pair", ["different", "same"], {"part": None, "linear": {}})
    assert _parts_asked(features_flow(none, en), _engine) == []


def test_a_pair_decider_records_the_part_that_reads_its_pairs() -> None:
    from tiankong.dedupe import pair_text

    x, y = _pairs(40)
    for texts, part in ((ZH, E5), (EN, MINILM)):
        pairs = [pair_text(texts[0], texts[1])] * 40
        state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet(pairs, {"pair": x}), y, 2)
        assert state["part"] == part
    x[:, COLUMNS.index("cosine")] = 0.0  # no part answered at tuning: none recorded, none read at use
    state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([pair_text(*ZH)] * 40, {"pair": x}), y, 2)
    assert state["part"] is None


def test_a_pair_decider_maps_each_pairs_cosine_back_and_zero_for_a_pair_its_part_cannot_read() -> None:
    from tiankong.dedupe import pair_text
    from tiankong.dedupe.pairs import COLUMNS, pair_features_flow

    texts = [pair_text(*ZH), pair_text(*EN), pair_text(*ZH), pair_text(EN[0], EN[0])]
    gen = pair_features_flow(texts, MINILM)
    reply, asked = None, []
    try:
        while True:
            calls = gen.send(reply)
            asked += [c.body for c in calls if c.path == "/v1/embeddings"]
            reply = [_text_engine(c) for c in calls]
    except StopIteration as done:
        rows = done.value
    cosine = [row[COLUMNS.index("cosine")] for row in rows]
    assert [len(b["input"]) for b in asked] == [4]  # the two English pairs' halves only
    assert cosine[0] == cosine[2] == 0.0 and cosine[3] == pytest.approx(1.0) and 0.0 < cosine[1] < 0.99


def _text_engine(call: object) -> object:
    """A part whose vector depends on the text (so a pair's cosine says which halves it came from)."""
    path, body = call.path, call.body  # type: ignore[attr-defined]
    if path == "/props":
        return {"default_generation_settings": {"n_ctx": 512}}
    if path == "/tokenize":
        return {"tokens": [1, 2]}
    return {"data": [{"index": i, "embedding": [1.0, float(len(t) % 7), float(t.count("o"))]}
                     for i, t in enumerate(body["input"])]}


def test_the_batch_fingerprint_holds_the_semantic_stages_rules(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A finished dedupe job runs again once when which part reads which record, or a part's cosines, change."""
    from types import SimpleNamespace

    from tiankong.batch.whole import fingerprint
    from tiankong.dedupe import DedupeOptions, parts

    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "text": "a"}\n', encoding="utf-8")
    job = SimpleNamespace(input=str(source), id_field="id", text_field="text", args={})
    first = fingerprint(job, DedupeOptions())  # type: ignore[arg-type]
    assert fingerprint(job, DedupeOptions()) == first  # type: ignore[arg-type]
    monkeypatch.setattr(parts, "RULES", parts.RULES + " changed")
    assert fingerprint(job, DedupeOptions()) != first  # type: ignore[arg-type]
    assert fingerprint(job, DedupeOptions(stages=("exact",))) == fingerprint(  # type: ignore[arg-type]
        job, DedupeOptions(stages=("exact",)))  # type: ignore[arg-type]


def test_a_pair_decider_that_cannot_read_the_band_says_so() -> None:
    """The band's Chinese pairs before a decider tuned on English (MiniLM): decided on the lexical columns, with a
    note naming the decider, the part and how many pairs it could not read."""
    from tiankong.deciders.registry import Decider, save_decider
    from tiankong.dedupe import DedupeOptions, Record, dedupe_flow
    from tiankong.dedupe.files import no_chat_engine
    from tiankong.structured.drivers import run_sync

    x, y = _pairs(40)
    state = methods.fit(methods.PAIR_PROBE, methods.FeatureSet([""] * 40, {"pair": x}), y, 2)
    assert state["part"] == MINILM
    save_decider(Decider("en-pairs", "probe-pair", ["different", "same"], state))

    class Band(_Spread):  # two Chinese records at cosine 0.94: e5's band [0.93, 0.95)
        def vectors(self, texts: list[str], part: str) -> tuple[list[list[float]], str]:
            self.asked.append((part, list(texts)))
            return [[1.0, 0.0], [0.94, (1 - 0.94 ** 2) ** 0.5]][: len(texts)], ""

    records = [Record("z1", ZH[0]), Record("z2", ZH[1])]
    options = DedupeOptions(stages=("semantic",), decider="en-pairs", spread=Band())
    result = run_sync(dedupe_flow(records, options), no_chat_engine)
    assert result.report["uncertain"]["pairs"] == 1
    assert any("en-pairs" in n and MINILM in n and "cannot read 1 of the 1 pairs" in n for n in result.report["notes"])
