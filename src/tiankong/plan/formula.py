"""The memory formula: a model's shape and a server configuration in, bytes out (pure, no I/O).

It mirrors what the pinned llama.cpp allocates on the CPU (see ``docs/plan.md``):

* weights: every tensor's bytes (the GGUF file is memory-mapped; all of it becomes resident), plus a second,
  anonymous copy of the tensors the CPU backend *repacks* into interleaved layouts (Q4_0/Q4_K/IQ4_NL/MXFP4
  matrices on x86 with AVX2);
* KV cache: ``n_ctx`` is padded to 256; without ``--kv-unified`` each slot gets its own stream of
  ``pad256(n_ctx / slots)`` cells, with it one stream of ``n_ctx`` cells shared by all slots. Sliding-window
  layers hold only ``pad256(min(cells, window × (slots if unified else 1) + n_ubatch))`` cells per stream;
* compute buffer (flash attention, which ``-fa auto`` enables on the CPU): activations proportional to
  ``n_ubatch`` plus the f16 attention mask ``n_ubatch × cells per stream`` (calibrated, see the benchmark);
* output buffer: logits for one token per slot; process overhead: the binary, the tokenizer, the heap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: The bounds ``serve`` and the config file hold a server to (``config.EngineKeys`` reads them from here), so a
#: plan is never made for a configuration serve would refuse: llama-server reads -c as a 32-bit int and fails past
#: 2**24 with "stoi"; under 64 tokens it cannot hold a chat template.
MIN_CTX = 64
MAX_CTX = 2**24
MAX_SLOTS = 256
#: Bytes per KV-cache element (ggml block size / block bytes).
KV_BYTES_PER_ELEMENT: dict[str, float] = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
    "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
}
#: The KV types ``tiankong plan`` offers and the budget search tries, most precise first.
PLAN_KV_TYPES = ("f16", "q8_0", "q4_0")
#: Tensor types the CPU backend repacks, by CPU family (ggml-cpu/repack.cpp in the pinned source).
REPACK_TYPES: dict[str, frozenset[str]] = {
    "x86": frozenset({"q4_0", "q4_k", "iq4_nl", "mxfp4"}),
    "arm": frozenset({"q4_0", "q4_k", "q5_k", "q6_k", "iq4_nl", "mxfp4", "q8_0"}),
    "none": frozenset(),
}
CTX_PAD = 256
#: Calibrated on llama-server (benchmarks/plan_accuracy.py, both catalog models, 1–8 busy slots): resident
#: bytes of the binary and its libraries, the fixed heap, the heap per vocabulary entry (token tables, BPE
#: merges, piece cache), and per slot in use: a fixed part and per vocabulary entry (sampler candidates).
BINARY_BYTES = 12 * 2**20
HEAP_BYTES = 7_900 * 2**10
TOKENIZER_BYTES_PER_TOKEN = 314
SLOT_BYTES = 134 * 2**10
SLOT_BYTES_PER_TOKEN = 14

@dataclass(frozen=True)
class ModelSpec:
    """The shape of one GGUF model, as far as memory is concerned."""

    name: str
    path: str
    architecture: str
    file_type: str
    weights_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    head_dim_v: int
    embedding: int
    ffn_length: int
    vocab_size: int
    context_length: int
    sliding_window: int | None = None
    swa_layers: int = 0
    #: bytes of matrix tensors (not ``token_embd``) with rows % 8 == 0, by ggml type name (repack candidates)
    matmul_bytes_by_type: dict[str, int] = field(default_factory=dict)

    @property
    def full_layers(self) -> int:
        return self.layers - self.swa_layers if self.sliding_window else self.layers


@dataclass(frozen=True)
class PlanConfig:
    """A llama-server configuration (defaults match ``tiankong serve``)."""

    ctx: int = 4096
    slots: int = 2
    kv_type: str = "f16"
    kv_unified: bool = False
    ubatch: int = 512
    batch: int = 2048
    repack: str = "x86"
    draft_kv_type: str = "f16"

    @property
    def n_ubatch(self) -> int:
        """llama.cpp caps the batch at the (unpadded) context and the micro-batch at the batch."""
        return min(self.ubatch, self.batch, self.ctx)

    def with_(self, **changes: Any) -> PlanConfig:
        return replace(self, **changes)


@dataclass(frozen=True)
class KVLayout:
    """How many cells llama.cpp allocates: per stream, for full and sliding-window layers."""

    n_ctx: int
    ctx_per_slot: int
    streams: int
    cells_full: int
    cells_swa: int


@dataclass
class ModelMemory:
    """The memory of one model (target or draft) in one configuration."""

    weights_bytes: int
    repack_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    compute_bytes: int
    output_bytes: int
    layout: KVLayout

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.repack_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes


def pad(value: int, to: int = CTX_PAD) -> int:
    return -(-value // to) * to


def kv_layout(spec: ModelSpec, config: PlanConfig) -> KVLayout:
    """Cells per stream, as ``llama_context`` and ``llama_kv_cache_iswa`` size them."""
    n_ctx = pad(config.ctx)
    if config.kv_unified:
        streams, per_stream = 1, n_ctx
    else:
        streams, per_stream = config.slots, pad(max(1, n_ctx // config.slots))
        n_ctx = per_stream * config.slots
    cells_swa = 0
    if spec.sliding_window and spec.swa_layers:
        window = spec.sliding_window * (config.slots if config.kv_unified else 1) + config.n_ubatch
        cells_swa = pad(min(per_stream, window))
    return KVLayout(n_ctx=n_ctx, ctx_per_slot=per_stream, streams=streams, cells_full=per_stream, cells_swa=cells_swa)


def kv_bytes_per_token(spec: ModelSpec, kv_type: str, layers: int | None = None) -> int:
    """K and V bytes for one token over ``layers`` layers (all layers by default)."""
    per_layer = spec.kv_heads * (spec.head_dim + spec.head_dim_v) * KV_BYTES_PER_ELEMENT[kv_type]
    return round(per_layer * (spec.layers if layers is None else layers))


def kv_bytes(spec: ModelSpec, layout: KVLayout, kv_type: str) -> int:
    full = kv_bytes_per_token(spec, kv_type, spec.full_layers) * layout.cells_full
    swa = kv_bytes_per_token(spec, kv_type, spec.swa_layers) * layout.cells_swa if layout.cells_swa else 0
    return (full + swa) * layout.streams


def compute_bytes(spec: ModelSpec, layout: KVLayout, config: PlanConfig, kv_type: str) -> int:
    """The CPU compute buffer with flash attention: activations per ubatch token plus the f16 KQ mask."""
    embd_tensors = 4 if kv_type in ("f16", "bf16", "f32") else 3
    activations = 4 * config.n_ubatch * (embd_tensors * spec.embedding + 3 * spec.ffn_length)
    mask = 2 * config.n_ubatch * (layout.cells_full + layout.cells_swa)
    return activations + mask


def repack_bytes(spec: ModelSpec, repack: str) -> int:
    types = REPACK_TYPES.get(repack, frozenset())
    return sum(size for name, size in spec.matmul_bytes_by_type.items() if name in types)


def model_memory(spec: ModelSpec, config: PlanConfig, kv_type: str) -> ModelMemory:
    layout = kv_layout(spec, config)
    return ModelMemory(
        weights_bytes=spec.weights_bytes, repack_bytes=repack_bytes(spec, config.repack),
        kv_bytes=kv_bytes(spec, layout, kv_type), kv_bytes_per_token=kv_bytes_per_token(spec, kv_type),
        compute_bytes=compute_bytes(spec, layout, config, kv_type),
        output_bytes=4 * spec.vocab_size * config.slots, layout=layout,
    )


def overhead_bytes(spec: ModelSpec, slots: int, draft: ModelSpec | None = None) -> int:
    """The process itself: binary and libraries, heap, tokenizer tables and per-slot samplers (per vocabulary)."""
    vocab = spec.vocab_size + (draft.vocab_size if draft else 0)
    per_slot = SLOT_BYTES + SLOT_BYTES_PER_TOKEN * vocab
    return BINARY_BYTES + HEAP_BYTES + TOKENIZER_BYTES_PER_TOKEN * vocab + slots * per_slot


def estimate_ffn_length(
    parameters: int, layers: int, embedding: int, vocab: int, heads: int, kv_heads: int, head_dim: int,
    head_dim_v: int,
) -> int:
    """The feed-forward width, from the parameter count (a gated FFN has 3 × embd × n_ff weights per layer).

    The embedding table is counted once (tied output) or twice; the candidate closest to a multiple of 128
    wins, since every released model uses such a width. Falls back to 4 × embd when neither is plausible.
    """
    if layers <= 0 or embedding <= 0:
        return 4 * max(embedding, 0)
    attention = embedding * (heads * head_dim + kv_heads * (head_dim + head_dim_v)) + heads * head_dim_v * embedding
    candidates = []
    for tables in (1, 2):
        rest = parameters - tables * vocab * embedding - embedding - layers * (attention + 2 * embedding)
        width = rest / (3 * embedding * layers)
        if embedding // 2 <= width <= 16 * embedding:
            candidates.append((abs(width - 128 * round(width / 128)), 128 * round(width / 128)))
    return min(candidates)[1] if candidates else 4 * embedding
