"""Read a GGUF file's metadata with the ``gguf`` package (header and tensor table only)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidModelFile

GGUF_MAGIC = b"GGUF"

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


def _scalar(reader: Any, key: str, default: Any = None) -> Any:
    fld = reader.fields.get(key)
    if fld is None or not fld.data:
        return default
    value = fld.parts[fld.data[0]]
    if fld.types and fld.types[0].name == "STRING":
        return bytes(value).decode("utf-8", "replace")
    if fld.types and fld.types[0].name == "ARRAY":
        return [_array_item(fld, i) for i in fld.data]
    return value.tolist()[0] if hasattr(value, "tolist") else value


def _array_item(fld: Any, index: int) -> Any:
    value = fld.parts[index]
    return value.tolist()[0] if hasattr(value, "tolist") else value


def _array_len(reader: Any, key: str) -> int:
    fld = reader.fields.get(key)
    return len(fld.data) if fld is not None else 0


def read_gguf(path: str | Path) -> GGUFInfo:
    """Metadata of a GGUF file; ``InvalidModelFile`` if it is not one or is truncated."""
    path = Path(path)
    _check_magic(path)
    from gguf import GGUFReader  # heavy import, only when needed

    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:  # noqa: BLE001 - gguf raises many types on damaged files
        raise InvalidModelFile(
            f"{path} is truncated or damaged ({exc})", hint="re-download or re-convert it"
        ) from None
    return _info_from_reader(reader, path)


def _check_magic(path: Path) -> None:
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


def _info_from_reader(reader: Any, path: Path) -> GGUFInfo:
    arch = str(_scalar(reader, "general.architecture", "unknown"))
    file_bytes = path.stat().st_size
    tensor_end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if tensor_end > file_bytes:
        raise InvalidModelFile(f"{path} is truncated ({file_bytes} of {tensor_end} bytes)", hint="re-download it")
    heads = int(_scalar(reader, f"{arch}.attention.head_count", 0) or 0)
    kv_heads = int(_scalar(reader, f"{arch}.attention.head_count_kv", heads) or heads)
    embedding = int(_scalar(reader, f"{arch}.embedding_length", 0) or 0)
    head_dim = int(_scalar(reader, f"{arch}.attention.key_length", 0) or (embedding // heads if heads else 0))
    layers = int(_scalar(reader, f"{arch}.block_count", 0) or 0)
    window = _scalar(reader, f"{arch}.attention.sliding_window")
    file_type = _scalar(reader, "general.file_type")
    return GGUFInfo(
        path=str(path), architecture=arch, name=str(_scalar(reader, "general.name", path.stem)),
        parameters=sum(int(t.n_elements) for t in reader.tensors),
        tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors), file_bytes=file_bytes,
        layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        head_dim_v=int(_scalar(reader, f"{arch}.attention.value_length", head_dim) or head_dim),
        embedding=embedding, context_length=int(_scalar(reader, f"{arch}.context_length", 0) or 0),
        sliding_window=int(window) if window else None,
        sliding_window_pattern=_swa_pattern(reader, arch, layers, bool(window)),
        file_type=FILE_TYPES.get(int(file_type), str(file_type)) if file_type is not None else "unknown",
        chat_template="tokenizer.chat_template" in reader.fields,
        vocab_size=_array_len(reader, "tokenizer.ggml.tokens"),
        tokenizer_model=str(_scalar(reader, "tokenizer.ggml.model", "")),
        basename=str(_scalar(reader, "general.basename", "")),
        size_label=str(_scalar(reader, "general.size_label", "")),
    )


def _swa_pattern(reader: Any, arch: str, layers: int, has_window: bool) -> list[bool]:
    """Which layers use the sliding window (llama.cpp's per-architecture defaults)."""
    if not has_window:
        return [False] * layers
    explicit = _scalar(reader, f"{arch}.attention.sliding_window_pattern")
    if isinstance(explicit, list) and len(explicit) == layers:
        return [bool(x) for x in explicit]
    period = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4}.get(arch, 0)
    if isinstance(explicit, int) and explicit > 0:
        period = explicit
    if period <= 0:
        return [True] * layers
    return [(i + 1) % period != 0 for i in range(layers)]
