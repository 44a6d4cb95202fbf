"""A GGUF file's metadata (its header and tensor table, read by ``gguf_header``: no arrays built)."""

from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidModelFile
from .gguf_header import GGUF_MAGIC, ArrayInfo, GGUFHeader, read_header_file

#: llama.cpp ``general.file_type`` values → quantization names.
FILE_TYPES = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 10: "q2_k",
    11: "q3_k_s", 12: "q3_k_m", 13: "q3_k_l", 14: "q4_k_s", 15: "q4_k_m", 16: "q5_k_s", 17: "q5_k_m",
    18: "q6_k", 19: "iq2_xxs", 20: "iq2_xs", 21: "q2_k_s", 22: "iq3_xs", 23: "iq3_xxs", 24: "iq1_s",
    25: "iq4_nl", 26: "iq3_s", 27: "iq3_m", 28: "iq2_s", 29: "iq2_m", 30: "iq4_xs", 31: "iq1_m",
    32: "bf16", 36: "tq1_0", 37: "tq2_0", 38: "mxfp4",
}


@dataclass
class GGUFInfo:
    path: str
    architecture: str
    name: str
    parameters: int
    tensor_bytes: int
    file_bytes: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    head_dim_v: int
    embedding: int
    context_length: int
    sliding_window: int | None
    sliding_window_pattern: list[bool] = field(default_factory=list)
    file_type: str = "unknown"
    chat_template: bool = False
    vocab_size: int = 0
    tokenizer_model: str = ""
    basename: str = ""
    size_label: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("sliding_window_pattern")
        data["swa_layers"] = sum(self.sliding_window_pattern)
        return data


def _array_len(value: Any) -> int:
    if isinstance(value, ArrayInfo):
        return value.count
    return len(value) if isinstance(value, list) else 0


def _per_layer(value: Any, layers: int, *, mean: bool) -> int:
    """A head count that may be one number or one per layer (LFM2's hybrid layers write ``head_count_kv`` 0 for
    its convolution layers; OpenELM varies it by layer): the largest, or with ``mean`` the mean over the layers
    rounded up — the plan sizes the KV cache as layers × kv_heads, so this holds every layer's cache, not less."""
    if isinstance(value, ArrayInfo):
        raise InvalidModelFile(f"a per-layer head count of {value.count} entries", hint="check the GGUF file")
    if not isinstance(value, list):
        return int(value or 0)
    counts = [int(v) for v in value] or [0]
    return -(-sum(counts) // max(layers, len(counts))) if mean else max(counts)


def read_gguf(path: str | Path) -> GGUFInfo:
    """Metadata of a GGUF file; ``InvalidModelFile`` if it is not one or is truncated."""
    path = Path(path)
    check_magic(path)
    try:
        header = read_header_file(path)
    except OSError as exc:
        raise InvalidModelFile(f"cannot read {path}: {exc.strerror or exc}", hint="check the path") from None
    except (ValueError, struct.error) as exc:
        raise InvalidModelFile(f"{path} is truncated or damaged ({exc})", hint="re-download or re-convert it") from None
    return _info_from_header(header, path)


def check_magic(path: Path) -> None:
    """``InvalidModelFile`` unless ``path`` starts as a GGUF file does."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise InvalidModelFile(f"cannot read {path}: {exc.strerror}", hint="check the path") from None
    if magic != GGUF_MAGIC:
        raise InvalidModelFile(
            f"{path} is not a GGUF file (magic {magic!r})",
            hint="tiankong runs llama.cpp GGUF models; convert others with llama.cpp's convert_hf_to_gguf.py",
        )


def _info_from_header(header: GGUFHeader, path: Path) -> GGUFInfo:
    values = header.values
    arch = str(values.get("general.architecture", "unknown"))
    file_bytes = path.stat().st_size
    layers = int(values.get(f"{arch}.block_count", 0) or 0)
    heads = _per_layer(values.get(f"{arch}.attention.head_count", 0), layers, mean=False)
    kv_heads = _per_layer(values.get(f"{arch}.attention.head_count_kv", heads), layers, mean=True) or heads
    embedding = int(values.get(f"{arch}.embedding_length", 0) or 0)
    head_dim = int(values.get(f"{arch}.attention.key_length", 0) or (embedding // heads if heads else 0))
    window = values.get(f"{arch}.attention.sliding_window")
    file_type = values.get("general.file_type")
    return GGUFInfo(
        path=str(path), architecture=arch, name=str(values.get("general.name", path.stem)),
        parameters=sum(math.prod(t.dims) for t in header.tensor_list),
        tensor_bytes=sum(header.tensor_bytes(t) or 0 for t in header.tensor_list), file_bytes=file_bytes,
        layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        head_dim_v=int(values.get(f"{arch}.attention.value_length", head_dim) or head_dim),
        embedding=embedding, context_length=int(values.get(f"{arch}.context_length", 0) or 0),
        sliding_window=int(window) if window else None,
        sliding_window_pattern=_swa_pattern(values, arch, layers, bool(window)),
        file_type=FILE_TYPES.get(int(file_type), str(file_type)) if file_type is not None else "unknown",
        chat_template="tokenizer.chat_template" in values,
        vocab_size=_array_len(values.get("tokenizer.ggml.tokens")),
        tokenizer_model=str(values.get("tokenizer.ggml.model", "")),
        basename=str(values.get("general.basename", "")),
        size_label=str(values.get("general.size_label", "")),
    )


def _swa_pattern(values: dict[str, Any], arch: str, layers: int, has_window: bool) -> list[bool]:
    """Which layers use the sliding window (llama.cpp's per-architecture defaults)."""
    if not has_window:
        return [False] * layers
    explicit = values.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(explicit, list) and len(explicit) == layers:
        return [bool(x) for x in explicit]
    period = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}.get(arch, 0)
    if isinstance(explicit, int) and explicit > 0:
        period = explicit
    if period <= 0:
        return [True] * layers
    return [(i + 1) % period != 0 for i in range(layers)]
