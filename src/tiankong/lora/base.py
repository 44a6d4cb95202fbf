"""The base model a LoRA is trained on, loaded into ``transformers`` once per machine and then from a cache.

Reading a GGUF model into ``transformers`` (``gguf_file=``: the tokenizer rebuilt from the GGUF vocabulary, the
weights dequantized to float32, the model initialised and filled) took 20.5 s for SmolLM2-135M and 45.9 s for
Qwen2.5-Coder-0.5B on one core, and ``tune`` with the ``lora`` method loads it twice (the cross-validation's
adapters, then the final one). The loaded model and tokenizer are written once as safetensors to
``<cache>/lora-base/<model sha256>-tf<transformers version>-<digest of VERSIONED's versions>/`` and read back
from there in 0.2 s and 1.0 s, with the same token ids, chat template and logits, bit for bit
(``benchmarks/lora_base_cache.py``, raw ``benchmarks/results/lora/base-cache-2026-12-07.txt``). The cost is disk,
float32 weights: 542 MB for the 135M, 2.5 GB for the 0.5B; the folder can be deleted at any time, and a write
removes the same model's folders of other library versions. A model given by path (no registry sha256) is not
cached.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import ConfigError
from ..models.registry import ModelRecord
from .meta import read_header

Log = Callable[[str], None]
#: written last into a cache folder: a folder without it is an interrupted write, never read
COMPLETE = "complete"


#: the libraries whose versions decide what a cache folder holds (the GGUF reading, the tokenizer, the weights' files)
VERSIONED = ("transformers", "tokenizers", "gguf", "torch", "safetensors")


def cache_folder(record: ModelRecord) -> Path:
    """Where the loaded ``record`` is cached: the model's sha256, then the transformers version and a digest of
    every ``VERSIONED`` library's, so an upgrade of any of them writes anew (and :func:`write_cache` then removes
    the model's folders of the versions before)."""
    digest = hashlib.sha256(library_versions().encode()).hexdigest()[:8]
    return paths.cache_dir() / "lora-base" / f"{record.sha256[:32]}-tf{_version('transformers')}-{digest}"


def library_versions(extra: tuple[str, ...] = ()) -> str:
    """``name=version;…`` of ``VERSIONED`` and ``extra``: what a cache of their output is keyed on."""
    return ";".join(f"{name}={_version(name)}" for name in (*VERSIONED, *extra))


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def load_base(record: ModelRecord, torch: Any, log: Log = lambda _: None, *,
              cache: bool = True) -> tuple[Any, Any]:
    """``(tokenizer, float32 model)`` of the installed ``record``: from the cache when it is there, else from its
    GGUF file (then cached unless ``cache`` is false)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_logging: Any = importlib.import_module("transformers.utils.logging")
    hf_logging.disable_progress_bar()  # one line per phase is logged here instead
    # a model given by path has no registry sha256 (``_record_for_path``): nothing to key a cache on
    cache = cache and bool(record.sha256)
    folder = cache_folder(record)
    if cache and (folder / COMPLETE).is_file():
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            cached: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        # any failure to read its own cache (a truncated file is safetensors' SafetensorError, a missing one an
        # OSError, a foreign config a ValueError): read the GGUF file again and write the cache anew
        except Exception as exc:  # noqa: BLE001
            log(f"the cached {record.name} in {folder} cannot be read ({type(exc).__name__}): reading the GGUF file")
            shutil.rmtree(folder, ignore_errors=True)
        else:
            log(f"loaded {record.name} from the cache ({folder})")
            return tokenizer, cached
    log(f"loading {record.name} into transformers (dequantized to float32) …")
    path = record.path
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    if not getattr(tokenizer, "chat_template", None):
        template = read_header(path, "model").values.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{path} has no chat template", hint="train a model with a chat template")
        tokenizer.chat_template = template
    model: Any = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # dequantized, it is a plain float32 model: transformers refuses to save a model it loaded as "gguf-quantized"
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if cache:
        write_cache(folder, tokenizer, model, log)
    return tokenizer, model


def write_cache(folder: Path, tokenizer: Any, model: Any, log: Log) -> None:
    """Written beside its place and renamed into it: a reader never sees half a folder; where another process
    got there first, its folder is kept. A full disk or a read-only cache only costs the next load its time."""
    work: Path | None = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / COMPLETE).write_text("")
        if folder.is_dir() and not (folder / COMPLETE).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted or damaged one, never read: replaced
        work.rename(folder)
        log(f"cached the loaded model in {folder} (delete the folder to free the space)")
        for stale in folder.parent.glob(f"{folder.name.split('-', 1)[0]}-*"):  # the same model, other versions
            if stale != folder and (stale / COMPLETE).is_file():
                shutil.rmtree(stale, ignore_errors=True)
    # safetensors reports a full disk as its own SafetensorError, not an OSError: any failure here leaves the
    # training to go on with the model it has
    except Exception as exc:  # noqa: BLE001
        if not (folder / COMPLETE).is_file():
            log(f"could not cache the loaded model in {folder}: {exc}")
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
