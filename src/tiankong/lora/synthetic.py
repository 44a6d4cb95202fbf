"""Write a random-weight GGUF LoRA adapter for a base model (no torch needed).

The file has exactly the layout ``convert_lora_to_gguf.py`` writes (``general.type = adapter``,
``adapter.type = lora``, ``adapter.lora.alpha``, ``blk.N.<module>.weight.lora_a`` / ``.lora_b``), so
llama-server loads it like a trained adapter. A large random adapter changes a model's greedy output, which is
what a test of per-request adapter switching needs on a machine without torch; it teaches the model nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .meta import InvalidAdapter, read_base

DEFAULT_TARGETS = ("attn_q", "attn_v")


def write_random_lora(
    base_gguf: str | Path, out: str | Path, *, rank: int = 8, alpha: float = 16.0,
    targets: Sequence[str] = DEFAULT_TARGETS, std: float = 0.05, seed: int = 0,
) -> Path:
    """A random LoRA for every ``blk.N.<target>.weight`` of the base model, written to ``out``."""
    from gguf import GGUFType, GGUFWriter

    base = read_base(base_gguf)
    names = [f"blk.{i}.{t}.weight" for i in range(base.n_layer) for t in targets]
    missing = [n for n in names if n not in base.tensors]
    if missing or rank < 1:
        raise InvalidAdapter(f"cannot build a LoRA for {missing[0] if missing else f'rank {rank}'}",
                             hint=f"targets must be weights of the base model (e.g. {', '.join(DEFAULT_TARGETS)})")
    rng = np.random.default_rng(seed)
    out = Path(out)
    writer = GGUFWriter(str(out), base.architecture)
    writer.add_type(GGUFType.ADAPTER)
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    for name in names:
        n_in, n_out = base.tensors[name]
        # numpy shapes are reversed ggml ne: lora_a ne=[n_in, r] → (r, n_in); lora_b ne=[r, n_out] → (n_out, r)
        writer.add_tensor(f"{name}.lora_a", rng.normal(0.0, std, (rank, n_in)).astype(np.float32))
        writer.add_tensor(f"{name}.lora_b", rng.normal(0.0, std, (n_out, rank)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
