"""``read_gguf`` through ``gguf``'s ``GGUFReader`` (what tiankong used before) vs ``models/gguf_header.py``, one run.

For each installed model: seconds to read its metadata both ways and whether every ``GGUFInfo`` field agrees (the
sliding-window pattern too). The GGUFReader side is the code that ``models/gguf_meta.py`` held until 2026-12-07,
kept here only to compare.

    taskset -c 0 .venv/bin/python benchmarks/gguf_header.py | tee benchmarks/results/models/gguf-header-2026-12-07.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tiankong.models import resolve_installed
from tiankong.models.gguf_meta import FILE_TYPES, GGUFInfo, read_gguf

MODELS = ["smollm2-135m-instruct:q4_0", "qwen2.5-coder-0.5b-instruct:q4_k_m", "all-minilm-l6-v2:f16",
          "multilingual-e5-small:q4_0"]


def _scalar(reader: Any, key: str, default: Any = None) -> Any:
    fld = reader.fields.get(key)
    if fld is None or not fld.data:
        return default
    value = fld.parts[fld.data[0]]
    if fld.types and fld.types[0].name == "STRING":
        return bytes(value).decode("utf-8", "replace")
    if fld.types and fld.types[0].name == "ARRAY":
        return [fld.parts[i].tolist()[0] for i in fld.data]
    return value.tolist()[0] if hasattr(value, "tolist") else value


def with_gguf_reader(path: Path) -> GGUFInfo:
    from gguf import GGUFReader

    from tiankong.models.gguf_meta import _swa_pattern

    reader = GGUFReader(str(path), "r")
    arch = str(_scalar(reader, "general.architecture", "unknown"))
    heads = int(_scalar(reader, f"{arch}.attention.head_count", 0) or 0)
    embedding = int(_scalar(reader, f"{arch}.embedding_length", 0) or 0)
    head_dim = int(_scalar(reader, f"{arch}.attention.key_length", 0) or (embedding // heads if heads else 0))
    layers = int(_scalar(reader, f"{arch}.block_count", 0) or 0)
    window = _scalar(reader, f"{arch}.attention.sliding_window")
    file_type = _scalar(reader, "general.file_type")
    explicit = {f"{arch}.attention.sliding_window_pattern":
                _scalar(reader, f"{arch}.attention.sliding_window_pattern")}
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return GGUFInfo(
        path=str(path), architecture=arch, name=str(_scalar(reader, "general.name", path.stem)),
        parameters=sum(int(t.n_elements) for t in reader.tensors),
        tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors), file_bytes=path.stat().st_size,
        layers=layers, heads=heads, kv_heads=int(_scalar(reader, f"{arch}.attention.head_count_kv", heads) or heads),
        head_dim=head_dim, head_dim_v=int(_scalar(reader, f"{arch}.attention.value_length", head_dim) or head_dim),
        embedding=embedding, context_length=int(_scalar(reader, f"{arch}.context_length", 0) or 0),
        sliding_window=int(window) if window else None,
        sliding_window_pattern=_swa_pattern(explicit, arch, layers, bool(window)),
        file_type=FILE_TYPES.get(int(file_type), str(file_type)) if file_type is not None else "unknown",
        chat_template="tokenizer.chat_template" in reader.fields,
        vocab_size=len(tokens.data) if tokens is not None else 0,
        tokenizer_model=str(_scalar(reader, "tokenizer.ggml.model", "")),
        basename=str(_scalar(reader, "general.basename", "")),
        size_label=str(_scalar(reader, "general.size_label", "")),
    )


def main() -> None:
    names = sys.argv[1:] or MODELS
    print("| model | GGUFReader (s) | header reader (s) | same GGUFInfo (every field) |")
    print("| --- | --- | --- | --- |")
    for name in names:
        path = resolve_installed(name).path
        started = time.perf_counter()
        old = with_gguf_reader(path)
        old_s = time.perf_counter() - started
        started = time.perf_counter()
        new = read_gguf(path)
        new_s = time.perf_counter() - started
        same = old.__dict__ == new.__dict__
        print(f"| {name} | {old_s:.2f} | {new_s:.3f} | {same} |", flush=True)
        if not same:
            print({k: (v, new.__dict__[k]) for k, v in old.__dict__.items() if new.__dict__[k] != v})


if __name__ == "__main__":
    main()
