"""CPU features that decide whether a native build can run here."""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

#: Instruction-set flags that ggml's native build may use; a build is only reused on a CPU with the same set.
RELEVANT = (
    "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
    "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni", "avx512_bf16",
    "avx512vbmi", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "fphp", "asimdhp", "asimddp", "sve", "sve2", "i8mm", "bf16",
)


@lru_cache(maxsize=1)
def cpu_features() -> list[str]:
    """Sorted relevant CPU flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return [platform.machine()]
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
            break
    return sorted(flag for flag in flags if flag in RELEVANT)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
