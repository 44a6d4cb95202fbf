"""A packaged GGUF's ``Q4_1`` weights rewritten as ``Q4_0`` (the test model, SmolLM2-135M, ships as Q4_1 only).

Why: llama.cpp's CPU backend repacks ``Q4_0`` (and ``Q4_K``, the default model's) weights into interleaved blocks
and multiplies them with its fast GEMM kernels; ``Q4_1`` it does not. Measured on the 2-core machine of 2026-12-06,
quiet (``benchmarks/results/models/requant/llama-bench-2026-12-06.txt``, the same SmolLM2-135M weights): a 256-token
prompt 149 → 425 tokens/s on one thread, 285 → 787 on two; generation 79 → 128 and 180 → 208 (docs/models.md). The
test suite and every task on the test model mostly prefill.

How: each Q4_1 tensor is dequantized to f32 and quantized to Q4_0 by llama.cpp's ``gguf-py`` from the engine's
pinned source (a subprocess, ``python -m tiankong.models.requant``, as ``e5pack.py`` does), so the file's bytes —
checked against the catalog's sha256 — do not move with the ``gguf`` package installed beside tiankong. Every
other tensor and every metadata value is copied as it was (strings as bytes), but ``general.file_type``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def requantize(source: Path, out: Path) -> None:
    """Write ``source`` with its Q4_1 tensors as Q4_0 to ``out`` (imports ``gguf`` from the pinned source)."""
    import gguf
    import numpy as np
    from gguf.quants import dequantize, quantize

    kinds = gguf.GGMLQuantizationType
    reader = gguf.GGUFReader(str(source))
    arch = _value(reader.fields["general.architecture"], gguf)
    writer = gguf.GGUFWriter(str(out), arch.decode() if isinstance(arch, bytes) else str(arch))
    writer.data_alignment = int(reader.alignment)  # general.alignment, when the file sets one, is copied below too
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # written by the writer itself
        if field.name == "general.file_type":
            writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, _value(field, gguf), kind, sub_type=sub)
    for tensor in reader.tensors:
        shape = [int(x) for x in reversed(tensor.shape)]  # numpy's order
        if tensor.tensor_type == kinds.Q4_1:
            values = dequantize(tensor.data, kinds.Q4_1).reshape(shape).astype(np.float32)
            writer.add_tensor(tensor.name, quantize(values, kinds.Q4_0), raw_dtype=kinds.Q4_0)
        else:
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _value(field: Any, gguf: Any) -> Any:
    """A metadata field's value as the writer takes it back: strings as their bytes, arrays as lists."""
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        if len(field.types) != 2 or not field.data:  # the writer takes neither; no model file we ship has one
            raise ValueError(f"{field.name}: nested or empty arrays are not copied")
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if kind == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]])
    return field.parts[field.data[0]].tolist()[0]


def main(argv: list[str]) -> int:
    """``python -m tiankong.models.requant SOURCE OUT NAME`` (run by ``pull.py`` with the pinned gguf-py; NAME, the
    catalog entry, is not written into the file)."""
    source, out, _name = argv
    requantize(Path(source), Path(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
