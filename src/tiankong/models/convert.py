"""Hugging Face checkpoints → GGUF with llama.cpp's own converters, from the engine's pinned source.

The converters (``convert_hf_to_gguf.py``, ``convert_lora_to_gguf.py``) and their ``conversion`` / ``gguf-py``
packages are unpacked once from the same ``llama-cpp-python`` sdist the engine is built from
(``<cache>/lora-convert/<version>/``), so a converted file always matches the llama-server that loads it.

Why llama.cpp's converter and not a writer of our own: it owns the tensor-name map and the tokenizer
pre-processing table (``bert-bge`` and friends) that llama-server checks when it loads a model; a copy would drift.
Its price is ``torch`` and ``transformers`` at conversion time only (the ``[retrieval]`` extra): nothing else in
tiankong imports them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import paths
from ..errors import ConfigError, EngineBuildError

Log = Callable[[str], None]
_WANTED = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py", "conversion/", "gguf-py/")
#: what ``convert_hf_to_gguf.py`` imports beyond numpy
CONVERTER_NEEDS = ("torch", "transformers", "safetensors")


class ConversionError(ConfigError):
    """A checkpoint could not be converted to GGUF."""

    type = "conversion_error"
    http_status = 422


def _source_version() -> str:
    from ..engine.build import SOURCE_VERSION

    return SOURCE_VERSION


def converter_dir(log: Log = lambda _: None) -> Path:
    """Where llama.cpp's converters lie, unpacked from the pinned llama.cpp source on first use."""
    from ..engine.build import fetch_source

    version = _source_version()
    target = paths.cache_dir() / "lora-convert" / version
    if (target / ".complete").is_file() and (target / "convert_hf_to_gguf.py").is_file():
        return target
    archive = paths.downloads_dir() / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    with tempfile.TemporaryDirectory(prefix="convert-", dir=_ensure(target.parent)) as tmp:
        staged = Path(tmp) / "staged"
        if archive.is_file():
            _unpack(archive, staged, version)
        else:  # no cached sdist: fetch it the way the engine build does
            try:
                source = fetch_source(Path(tmp), log)
            except EngineBuildError as exc:
                raise ConversionError(f"cannot get llama.cpp's converter: {exc.message}", hint=exc.hint) from None
            _ensure(staged)
            for name in _WANTED:
                src = source / name.rstrip("/")
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, staged / name.rstrip("/"))
        (staged / ".complete").write_text(version)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)
    return target


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _unpack(archive: Path, staged: Path, version: str) -> None:
    from ..engine.build import _safe_member

    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            rel = member.name[len(prefix):] if member.name.startswith(prefix) else ""
            if rel and rel.startswith(_WANTED) and _safe_member(member):
                member.name = rel
                members.append(member)
        tar.extractall(staged, members=members, filter="data")
    if not (staged / "convert_hf_to_gguf.py").is_file():
        raise ConversionError(f"{archive} has no vendor/llama.cpp/convert_hf_to_gguf.py")


def converter_env(script_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(script_dir / "gguf-py"), str(script_dir)]),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}


def missing_converter_packages() -> list[str]:
    return [name for name in CONVERTER_NEEDS if importlib.util.find_spec(name) is None]


def convert_checkpoint(model_dir: Path, out: Path, *, outtype: str = "f16", log: Log = lambda _: None) -> Path:
    """Run ``convert_hf_to_gguf.py model_dir --outfile out --outtype outtype`` in a subprocess."""
    missing = missing_converter_packages()
    if missing:
        raise ConversionError(f"converting this model to GGUF needs {', '.join(missing)} (llama.cpp's converter)",
                              hint="pip install 'tiankong[retrieval]' (CPU torch and transformers), then run the "
                                   "same command again")
    script_dir = converter_dir(log)
    cmd = [sys.executable, str(script_dir / "convert_hf_to_gguf.py"), str(model_dir), "--outfile", str(out),
           "--outtype", outtype]
    log(f"converting {model_dir.name} to GGUF ({outtype}) with llama.cpp's convert_hf_to_gguf.py …")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=converter_env(script_dir), cwd=script_dir)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ConversionError(f"convert_hf_to_gguf.py failed (exit {proc.returncode}): {tail[-400:]}",
                              hint="check that the checkpoint's architecture is one llama.cpp supports")
    return out
