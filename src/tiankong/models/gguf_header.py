"""A GGUF file's key/values and tensor table, read without building its arrays.

``gguf``'s ``GGUFReader`` builds a numpy view of every key and of every element of every array: 3.7 s for
SmolLM2-135M's 49k-token vocabulary, 13.0 s for Qwen2.5-Coder-0.5B's 152k, 18.7 s for multilingual-e5's 250k on one
core — paid at every start of an embedding part and by every memory plan. This reads the scalars and strings, keeps
short scalar arrays (per-layer patterns), records only the length of long ones and of string arrays, and reads the
tensor table (name, shape, type, offset): 0.01–0.15 s for the same files, every ``GGUFInfo`` field the same
(``benchmarks/gguf_header.py``, raw ``benchmarks/results/models/gguf-header-2026-12-07.txt``).
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GGUF_MAGIC = b"GGUF"
#: GGUF value types → struct format (scalars); 8 = string, 9 = array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
#: scalar arrays up to this long are kept as lists; longer ones (scores, token types) only counted
KEEP_ARRAY = 4096


@dataclass(frozen=True)
class ArrayInfo:
    """An array whose elements were not read: its length only."""

    count: int


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: list[int]
    kind: int  # ggml type
    offset: int  # from the start of the data section


class GGUFHeader:
    """``values`` (key → scalar, string, short list or :class:`ArrayInfo`) and ``tensors`` of a GGUF buffer."""

    def __init__(self, data: bytes | Any, keep_strings: frozenset[str] = frozenset()) -> None:
        self.data, self.pos = data, 0
        #: string arrays read whole (as bytes), e.g. ``tokenizer.ggml.tokens`` for the draft vocabulary check
        self.keep_strings = keep_strings
        self.values: dict[str, Any] = {}
        self.tensor_list: list[Tensor] = []
        self.data_start = 0

    @property
    def tensors(self) -> dict[str, list[int]]:
        """Tensor name → shape (ne)."""
        return {t.name: t.dims for t in self.tensor_list}

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise ValueError("unexpected end of file")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        return self._raw_string().decode("utf-8", "replace")

    def _raw_string(self) -> bytes:
        length = self.take("Q")
        if self.pos + length > len(self.data):
            raise ValueError("unexpected end of file")
        raw = bytes(self.data[self.pos:self.pos + length])
        self.pos += length
        return raw

    def _skip_string(self) -> None:
        (length,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8 + length
        if self.pos > len(self.data):
            raise ValueError("unexpected end of file")

    def value(self, kind: int, keep: bool = False) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.take("I"), self.take("Q")
            if item in _SCALARS:
                fmt = _SCALARS[item]
                size = struct.calcsize("<" + fmt)
                if self.pos + count * size > len(self.data):
                    raise ValueError("unexpected end of file")
                if count <= KEEP_ARRAY:
                    found = list(struct.unpack_from(f"<{count}{fmt}", self.data, self.pos))
                    self.pos += count * size
                    return found
                self.pos += count * size  # skipped in one step
                return ArrayInfo(count)
            if item == 8 and keep:
                return [self._raw_string() for _ in range(count)]
            if item == 8:
                for _ in range(count):
                    self._skip_string()
                return ArrayInfo(count)
            raise ValueError(f"an array of GGUF value type {item}")  # ggml's gguf.cpp refuses arrays of arrays too
        raise ValueError(f"unknown GGUF value type {kind}")

    def parse(self) -> GGUFHeader:
        if self.take("4s") != GGUF_MAGIC or self.take("I") not in (2, 3):
            raise ValueError("not a GGUF v2/v3 file")
        n_tensors, n_kv = self.take("Q"), self.take("Q")
        for _ in range(n_kv):
            key = self.string()
            self.values[key] = self.value(self.take("I"), keep=key in self.keep_strings)
        for _ in range(n_tensors):
            name = self.string()
            dims = [self.take("Q") for _ in range(self.take("I"))]
            kind, offset = self.take("I"), self.take("Q")
            self.tensor_list.append(Tensor(name, dims, kind, offset))
        align = self.values.get("general.alignment", 32)
        if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise ValueError(f"general.alignment {align!r} is not a power of two")
        self.data_start = -(-self.pos // align) * align
        return self

    def tensor_bytes(self, tensor: Tensor) -> int | None:
        """Bytes of ``tensor``'s data (``None`` for a ggml type this ``gguf`` package does not know)."""
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.kind)]
        except (ValueError, KeyError):
            return None
        return math.prod(tensor.dims) // block * size

    def data_end(self) -> int:
        """Where the last tensor's data ends (absolute; a shorter file is truncated)."""
        ends = [self.data_start + t.offset + (self.tensor_bytes(t) or 0) for t in self.tensor_list]
        return max(ends, default=0)  # no tensors: a header need not be padded to the alignment


def read_header_file(path: Path, keep_strings: frozenset[str] = frozenset()) -> GGUFHeader:
    """The header of the GGUF file ``path``, its tensor data checked to be all there: ``ValueError`` /
    ``struct.error`` for a damaged or cut file, ``OSError`` for one that cannot be read (callers name the error)."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        header = GGUFHeader(mapped, keep_strings).parse()
        size = len(mapped)
    if header.data_end() > size:
        raise ValueError(f"cut short: its tensor data ends at byte {header.data_end()}, the file has {size}")
    return header
