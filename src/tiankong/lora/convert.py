"""PEFT adapter → GGUF LoRA with llama.cpp's own ``convert_lora_to_gguf.py`` from the engine's pinned source.

The converter and its ``conversion`` / ``gguf-py`` packages are unpacked once from the same
``llama-cpp-python`` sdist the engine is built from (``<cache>/lora-convert/<version>/``), so the adapter format
always matches the llama-server that loads it. It needs the base model's ``config.json`` (with
``architectures`` and without ``quantization_config``) but not its weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import paths
from ..engine.build import SOURCE_VERSION, _safe_member, fetch_source
from ..errors import ConfigError, EngineBuildError

Log = Callable[[str], None]
_PREFIX = f"llama_cpp_python-{SOURCE_VERSION}/vendor/llama.cpp/"
_WANTED = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py", "conversion/", "gguf-py/")


class ConversionError(ConfigError):
    """The PEFT adapter could not be converted to GGUF."""

    type = "conversion_error"
    http_status = 422


def converter_dir(log: Log = lambda _: None) -> Path:
    """Where ``convert_lora_to_gguf.py`` lies, unpacked from the pinned llama.cpp source on first use."""
    target = paths.cache_dir() / "lora-convert" / SOURCE_VERSION
    if (target / ".complete").is_file():
        return target
    archive = paths.downloads_dir() / "sdist" / f"llama_cpp_python-{SOURCE_VERSION}.tar.gz"
    with tempfile.TemporaryDirectory(prefix="lora-convert-", dir=_ensure(target.parent)) as tmp:
        staged = Path(tmp) / "staged"
        if archive.is_file():
            _unpack(archive, staged)
        else:  # no cached sdist: fetch it the way the engine build does
            try:
                source = fetch_source(Path(tmp), log)
            except EngineBuildError as exc:
                raise ConversionError(f"cannot get llama.cpp's converter: {exc.message}", hint=exc.hint) from None
            _ensure(staged)
            for name in _WANTED:
                src = source / name.rstrip("/")
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, staged / name.rstrip("/"))
        (staged / ".complete").write_text(SOURCE_VERSION)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)
    return target


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _unpack(archive: Path, staged: Path) -> None:
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            rel = member.name[len(_PREFIX):] if member.name.startswith(_PREFIX) else ""
            if rel and rel.startswith(_WANTED) and _safe_member(member):
                member.name = rel
                members.append(member)
        tar.extractall(staged, members=members, filter="data")
    if not (staged / "convert_lora_to_gguf.py").is_file():
        raise ConversionError(f"{archive} has no vendor/llama.cpp/convert_lora_to_gguf.py")


def write_base_config(config: dict[str, object], architecture: str, directory: Path) -> Path:
    """``directory/config.json`` as the converter wants it: the HF class named, no quantization_config."""
    data = {k: v for k, v in config.items() if k != "quantization_config"}
    data["architectures"] = [architecture]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(data, indent=2, default=str))
    return directory


def convert_adapter(adapter_dir: Path, base_dir: Path, out: Path, log: Log = lambda _: None) -> Path:
    """Run ``convert_lora_to_gguf.py --base base_dir --outfile out adapter_dir`` (f32) in a subprocess."""
    script_dir = converter_dir(log)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script_dir / "gguf-py"), str(script_dir)]),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, str(script_dir / "convert_lora_to_gguf.py"), "--base", str(base_dir),
           "--outfile", str(out), "--outtype", "f32", str(adapter_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=script_dir)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ConversionError(f"convert_lora_to_gguf.py failed (exit {proc.returncode}): {tail[-400:]}",
                              hint="check that the base model's architecture is supported by llama.cpp")
    return out
