"""A fast scan of a GGUF file's tensor table: bytes of matrix tensors by ggml type.

``read_gguf`` gives the hyper-parameters but not the per-tensor types, and which tensors the CPU backend
repacks (a second, anonymous copy) depends on exactly those. This reads only the header with ``struct`` over
an ``mmap`` — skipping the tokenizer arrays instead of decoding them — so it costs a fraction of a second.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from ..errors import InvalidModelFile

# GGUF value types → byte size (strings and arrays are handled separately)
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.pos = data, 0

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        length = self.unpack("<Q")
        text = bytes(self.data[self.pos:self.pos + length]).decode("utf-8", "replace")
        self.pos += length
        return text

    def skip_value(self, kind: int) -> None:
        if kind == _STRING:
            length = self.unpack("<Q")
            self.pos += length
        elif kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _SCALAR_SIZES:
                self.pos += _SCALAR_SIZES[item] * count
            else:
                for _ in range(count):
                    self.skip_value(item)
        elif kind in _SCALAR_SIZES:
            self.pos += _SCALAR_SIZES[kind]
        else:
            raise ValueError(f"unknown GGUF value type {kind}")


def matmul_bytes_by_type(path: str | Path) -> dict[str, int]:
    """Bytes of 2-D weight tensors used in matrix products (not embedding tables) with rows % 8 == 0."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            tensors = _tensor_table(_Cursor(data))
    except (OSError, ValueError, struct.error) as exc:
        raise InvalidModelFile(f"cannot read the tensor table of {path} ({exc})", hint="re-download it") from None
    sizes: dict[str, int] = {}
    for name, dims, kind in tensors:
        if len(dims) != 2 or dims[1] % 8 or name.split(".")[0].endswith("embd"):
            continue
        qtype = GGMLQuantizationType(kind)
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        type_name = qtype.name.lower()
        sizes[type_name] = sizes.get(type_name, 0) + dims[0] * dims[1] // block * block_bytes
    return sizes


def _tensor_table(cursor: _Cursor) -> list[tuple[str, list[int], int]]:
    if bytes(cursor.data[:4]) != b"GGUF":
        raise ValueError("not a GGUF file")
    cursor.pos = 4
    if cursor.unpack("<I") < 2:
        raise ValueError("GGUF version 1 is not supported")
    n_tensors, n_kv = cursor.unpack("<Q"), cursor.unpack("<Q")
    for _ in range(n_kv):
        cursor.string()
        cursor.skip_value(cursor.unpack("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = cursor.string()
        dims = [cursor.unpack("<Q") for _ in range(cursor.unpack("<I"))]
        kind = cursor.unpack("<I")
        cursor.unpack("<Q")  # data offset
        tensors.append((name, dims, kind))
    return tensors
