"""The GGUF header reader (models/gguf_header.py) on files written byte by byte: what it keeps, what it counts,
and every damaged header a one-line ``InvalidModelFile`` — checked against ``gguf``'s own ``GGUFReader``."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import pytest

from tiankong.errors import InvalidModelFile
from tiankong.models.gguf_header import KEEP_ARRAY, ArrayInfo
from tiankong.models.gguf_meta import read_gguf

pytestmark = pytest.mark.unit

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
TYPE_F32 = 0  # ggml tensor type


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: int, value: Any) -> bytes:
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        item, items = value
        return struct.pack("<IQ", item, len(items)) + b"".join(_value(item, v) for v in items)
    return struct.pack("<" + {U32: "I", I32: "i", F32: "f", BOOL: "?"}[kind], value)


def gguf(kv: list[tuple[str, int, Any]], tensors: list[tuple[str, list[int]]] | None = None, *,
         align: int = 32, pad: bool = True) -> bytes:
    """A GGUF v3 file: the key/values, then f32 tensors of the given shapes (data zeros), aligned."""
    tensors = tensors or []
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, kind, value in kv:
        out += _string(key) + struct.pack("<I", kind) + _value(kind, value)
    offset, data = 0, b""
    for name, dims in tensors:
        out += _string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", TYPE_F32, offset)
        size = 4 * math.prod(dims)
        data += bytes(size) + bytes(-size % align)
        offset += size + (-size % align)
    if pad or tensors:
        out += bytes(-len(out) % align)
    return out + data


ARCH = [("general.architecture", STRING, "gemma3"), ("gemma3.block_count", U32, 6),
        ("gemma3.attention.sliding_window", U32, 512),
        ("gemma3.attention.sliding_window_pattern", ARRAY, (BOOL, [True, True, False, True, True, False]))]


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    return path


def test_short_arrays_are_kept_long_and_string_arrays_counted_as_gguf_reads_them(tmp_path: Path) -> None:
    from gguf import GGUFReader

    from tiankong.models.gguf_header import GGUFHeader

    kv = [*ARCH, ("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", "bb", "ccc"] * 100)),
          ("kept", ARRAY, (U32, list(range(KEEP_ARRAY)))), ("counted", ARRAY, (U32, list(range(KEEP_ARRAY + 1))))]
    path = _write(tmp_path, gguf(kv, [("w", [8, 4]), ("b", [4])]))
    header = GGUFHeader(path.read_bytes()).parse()
    assert header.values["kept"] == list(range(KEEP_ARRAY)) and header.values["counted"] == ArrayInfo(KEEP_ARRAY + 1)
    assert header.values["tokenizer.ggml.tokens"] == ArrayInfo(300)
    info = read_gguf(path)
    assert info.sliding_window_pattern == [True, True, False, True, True, False] and info.sliding_window == 512
    assert info.vocab_size == 300 and info.parameters == 36 and info.layers == 6
    reader = GGUFReader(str(path), "r")
    assert info.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert header.data_end() == max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)


def test_a_file_without_tensors_need_not_be_padded(tmp_path: Path) -> None:
    info = read_gguf(_write(tmp_path, gguf(ARCH, pad=False)))
    assert info.parameters == 0 and info.architecture == "gemma3"


@pytest.mark.parametrize(("damage", "why"), [
    (lambda d: d[:-5], "truncated"),  # the tensor data cut short
    (lambda d: d[:300], "truncated or damaged"),  # cut inside the token strings
], ids=["tensor-data", "inside-an-array"])
def test_a_cut_file_is_one_line_error(tmp_path: Path, damage: Any, why: str) -> None:
    kv = [*ARCH, ("tokenizer.ggml.tokens", ARRAY, (STRING, ["token"] * 100))]
    path = _write(tmp_path, damage(gguf(kv, [("w", [8, 4])])))
    with pytest.raises(InvalidModelFile, match=why):
        read_gguf(path)


@pytest.mark.parametrize("kv", [
    [("general.alignment", U32, 3)], [("general.alignment", U32, 0)], [("general.alignment", F32, 0.5)],
    [("general.alignment", ARRAY, (U32, [32]))], [("nested", ARRAY, (ARRAY, []))], [("x", 99, None)],
], ids=["alignment-3", "alignment-0", "alignment-float", "alignment-array", "nested-array", "unknown-type"])
def test_a_damaged_header_is_invalid_model_file_not_a_traceback(tmp_path: Path, kv: list[Any]) -> None:
    if kv[0][1] == 99:  # a value type GGUF does not have: written by hand
        data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("x") + struct.pack("<I", 99)
    else:
        data = gguf([*ARCH, *kv])
    with pytest.raises(InvalidModelFile, match="truncated or damaged"):
        read_gguf(_write(tmp_path, data))


def test_per_layer_head_counts_are_read_not_a_type_error(tmp_path: Path) -> None:
    """LFM2 writes ``head_count_kv`` per layer (0 for its convolution layers), OpenELM ``head_count`` too: the
    plan's layers × kv_heads must hold every attention layer's cache (6 layers × 8 heads here), not fail."""
    kv_per_layer = [0, 0, 8, 0, 0, 8, 0, 0, 8, 0, 8, 0, 8, 0, 8, 0]
    kv = [("general.architecture", STRING, "lfm2"), ("lfm2.block_count", U32, 16),
          ("lfm2.embedding_length", U32, 1024), ("lfm2.attention.head_count", U32, 16),
          ("lfm2.attention.head_count_kv", ARRAY, (I32, kv_per_layer))]
    info = read_gguf(_write(tmp_path, gguf(kv, [("w", [4])])))
    assert info.heads == 16 and info.head_dim == 64 and info.layers * info.kv_heads == sum(kv_per_layer)
    per_layer_heads = [("general.architecture", STRING, "openelm"), ("openelm.block_count", U32, 3),
                       ("openelm.embedding_length", U32, 768),
                       ("openelm.attention.head_count", ARRAY, (U32, [8, 12, 16])),
                       ("openelm.attention.head_count_kv", ARRAY, (U32, [2, 3, 4]))]
    info = read_gguf(_write(tmp_path, gguf(per_layer_heads, [("w", [4])])))
    assert info.heads == 16 and info.kv_heads == 3 and info.layers * info.kv_heads >= 2 + 3 + 4
