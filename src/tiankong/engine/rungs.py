"""The build ladder: which CMake flags each rung of the managed llama-server build uses.

A managed build tries the rungs in order and keeps the first whose binary passes the smoke test
(:mod:`tiankong.engine.smoke`):

1. ``native`` — ``GGML_NATIVE=ON`` (the CPU's own instruction set) **without AMX**. ggml's AMX path
   segfaults in ``ggml_backend_amx_mul_mat`` on Sapphire/Emerald/Granite Rapids hosts built with GCC ≤ 12
   (llama.cpp #20824, ollama #17205/#17249) and was 10.8 % slower on Sapphire Rapids anyway (ollama #9203).
   GCC lets an explicit ``-mno-amx-*`` win over what ``-march=native`` implies, whatever their order.
2. ``portable`` — ``GGML_NATIVE=OFF`` with the x86-64-v3 set (AVX2, FMA, F16C, BMI2) where the CPU has it,
   ggml's generic build elsewhere.

``native-amx`` is built only on request (``tiankong engine install --amx``), smoke-tested and measured against
the kept rung with ``llama-bench``; the faster of the two that passes is kept.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
)
AMX_OFF = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
AMX_CPU_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
X86_64_V3 = ("-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON")
X86_64_V3_CPU = ("avx", "avx2", "fma", "f16c", "bmi2")


@dataclass(frozen=True)
class Rung:
    """One way to build llama-server: a name and the CMake flags that make it."""

    name: str
    flags: tuple[str, ...]
    amx: bool = False

    def to_json(self) -> dict[str, object]:
        return {"rung": self.name, "cmake_flags": list(self.flags), "amx": self.amx}


def _x86(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64", "i686", "i386")


def ladder(features: list[str], machine: str | None = None) -> tuple[Rung, ...]:
    """The rungs tried in order on a CPU with ``features`` (``/proc/cpuinfo`` flags)."""
    machine = machine or platform.machine()
    x86 = _x86(machine)
    no_amx = (f"-DCMAKE_C_FLAGS={AMX_OFF}", f"-DCMAKE_CXX_FLAGS={AMX_OFF}") if x86 else ()
    portable_isa: tuple[str, ...] = ()
    if x86:
        has_v3 = all(flag in features for flag in X86_64_V3_CPU)
        portable_isa = X86_64_V3 if has_v3 else tuple(f.replace("=ON", "=OFF") for f in X86_64_V3)
    # the portable rung needs no -mno-amx-*: without -march=native (and GGML_AMX_* left off) the compiler is never
    # asked for AMX, and GCC before 11 does not know those flags, so on such a compiler it is the rung that builds
    return (
        Rung("native", (*COMMON_FLAGS, "-DGGML_NATIVE=ON", *no_amx)),
        Rung("portable", (*COMMON_FLAGS, "-DGGML_NATIVE=OFF", *portable_isa)),
    )


def amx_rung() -> Rung:
    """Native with AMX left as ``-march=native`` has it: only on request, only kept when it passes and is faster."""
    return Rung("native-amx", (*COMMON_FLAGS, "-DGGML_NATIVE=ON"), amx=True)


def has_amx(features: list[str]) -> bool:
    return any(flag in features for flag in AMX_CPU_FLAGS)
