"""PEFT adapter → GGUF LoRA with llama.cpp's own ``convert_lora_to_gguf.py`` from the engine's pinned source.

The converter and its ``conversion`` / ``gguf-py`` packages are unpacked once from the same
``llama-cpp-python`` sdist the engine is built from (``<cache>/lora-convert/<version>/``), so the adapter format
always matches the llama-server that loads it. It needs the base model's ``config.json`` (with
``architectures`` and without ``quantization_config``) but not its weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ..models.convert import ConversionError, converter_dir, converter_env

Log = Callable[[str], None]
__all__ = ["ConversionError", "convert_adapter", "converter_dir", "write_base_config"]


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
    env = converter_env(script_dir)
    cmd = [sys.executable, str(script_dir / "convert_lora_to_gguf.py"), "--base", str(base_dir),
           "--outfile", str(out), "--outtype", "f32", str(adapter_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=script_dir)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ConversionError(f"convert_lora_to_gguf.py failed (exit {proc.returncode}): {tail[-400:]}",
                              hint="check that the base model's architecture is supported by llama.cpp")
    return out
