"""Read a GGUF LoRA adapter's header and check it against a base model's tensor table.

llama.cpp's ``convert_lora_to_gguf.py`` writes ``general.type = "adapter"``, ``adapter.type = "lora"``,
``adapter.lora.alpha`` and, per adapted weight ``W``, two tensors ``W.lora_a`` (ne = [n_in, r]) and
``W.lora_b`` (ne = [r, n_out]). It writes no hyper-parameters (no n_embd, no block count), so the base
compatibility check compares every adapted weight's shape with the base model's tensor of that name – the
same check llama.cpp makes when it loads the adapter, done before any engine is started.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, InvalidModelFile
from ..models.gguf_header import GGUF_MAGIC, GGUFHeader, read_header_file

_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


class InvalidAdapter(ConfigError):
    """A file that is not a usable GGUF LoRA adapter, or not one for the given base model."""

    type = "invalid_adapter"


@dataclass
class AdapterInfo:
    """What a GGUF LoRA file says about itself."""

    path: Path
    architecture: str
    alpha: float | None
    rank: int
    #: adapted base weight name → (n_in, n_out) as ne[0], ne[1] of the base tensor
    weights: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def targets(self) -> list[str]:
        """Adapted module kinds without the block index, e.g. ``["attn_q", "attn_v"]``."""
        kinds = {_BLOCK.sub(r"\2", name).removesuffix(".weight") for name in self.weights}
        return sorted(kinds)

    @property
    def layers(self) -> list[int]:
        return sorted({int(m.group(1)) for name in self.weights if (m := _BLOCK.match(name))})


def read_header(path: Path, what: str) -> GGUFHeader:
    """The GGUF header of ``path``; ``InvalidAdapter`` / ``InvalidModelFile`` when it is not a GGUF file."""
    error = InvalidAdapter if what == "adapter" else InvalidModelFile
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
            if magic != GGUF_MAGIC:
                raise error(f"{path} is not a GGUF file (magic {magic!r})",
                            hint="convert a PEFT adapter with `tiankong lora train` or llama.cpp's "
                                 "convert_lora_to_gguf.py")
        return read_header_file(path)
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}", hint="check the path") from None
    except (ValueError, struct.error) as exc:
        raise error(f"{path} is truncated or damaged ({exc})", hint="re-create the file") from None


def read_adapter(path: str | Path) -> AdapterInfo:
    """Header of a GGUF LoRA adapter; ``InvalidAdapter`` when it is a model, another adapter type, or broken."""
    path = Path(path)
    header = read_header(path, "adapter")
    general_type = header.values.get("general.type")
    if general_type != "adapter":
        raise InvalidAdapter(f"{path} is a GGUF {general_type or 'model'}, not an adapter (general.type)",
                             hint="add models with `tiankong models add`; adapters are GGUF LoRA files")
    adapter_type = header.values.get("adapter.type")
    if adapter_type != "lora":
        raise InvalidAdapter(f"{path} is a {adapter_type!r} adapter, not a LoRA (adapter.type)")
    weights, ranks = _pair_tensors(path, header.tensors)
    if len(ranks) > 1:
        raise InvalidAdapter(f"{path} mixes LoRA ranks {sorted(ranks)}", hint="re-convert the adapter")
    alpha = header.values.get("adapter.lora.alpha")
    return AdapterInfo(path=path, architecture=str(header.values.get("general.architecture", "unknown")),
                       alpha=float(alpha) if alpha is not None else None, rank=ranks.pop(), weights=weights)


def _pair_tensors(path: Path, shapes: dict[str, list[int]]) -> tuple[dict[str, tuple[int, int]], set[int]]:
    weights: dict[str, tuple[int, int]] = {}
    ranks: set[int] = set()
    for name, a in shapes.items():
        if not name.endswith(".lora_a"):
            if not name.endswith(".lora_b"):
                raise InvalidAdapter(f"{path} has a tensor {name!r} that is neither lora_a nor lora_b")
            continue
        base = name.removesuffix(".lora_a")
        b = shapes.get(base + ".lora_b")
        if b is None or len(a) != 2 or len(b) != 2:
            raise InvalidAdapter(f"{path}: {base} has no matching 2-D lora_b", hint="re-convert the adapter")
        if base == "token_embd.weight":  # stored flipped, see llama.cpp llm_build_inp_embd()
            weights[base], rank = (b[1], a[1]), a[0]
        else:
            if a[1] != b[0]:
                raise InvalidAdapter(f"{path}: {base} lora_a {a} and lora_b {b} disagree on the rank")
            weights[base], rank = (a[0], b[1]), a[1]
        ranks.add(rank)
    if not weights:
        raise InvalidAdapter(f"{path} has no LoRA tensors", hint="re-convert the adapter")
    orphans = [n for n in shapes if n.endswith(".lora_b") and n.removesuffix(".lora_b") not in weights]
    if orphans:
        raise InvalidAdapter(f"{path}: {orphans[0]} has no matching lora_a", hint="re-convert the adapter")
    return weights, ranks


@dataclass
class BaseShape:
    """What the compatibility check needs from the base model."""

    path: Path
    architecture: str
    n_embd: int
    n_layer: int
    tensors: dict[str, tuple[int, int]]


def read_base(path: str | Path) -> BaseShape:
    path = Path(path)
    header = read_header(path, "model")
    if header.values.get("general.type") == "adapter":
        raise InvalidModelFile(f"{path} is an adapter, not a base model", hint="pass the model it adapts")
    arch = str(header.values.get("general.architecture", "unknown"))
    tensors = {name: (dims[0], dims[1] if len(dims) > 1 else 1) for name, dims in header.tensors.items()}
    return BaseShape(path=path, architecture=arch, n_embd=int(header.values.get(f"{arch}.embedding_length", 0)),
                     n_layer=int(header.values.get(f"{arch}.block_count", 0)), tensors=tensors)


def check_compatible(adapter: AdapterInfo, base: BaseShape, base_name: str) -> None:
    """``InvalidAdapter`` naming the first mismatch: architecture, a missing weight, or a shape."""
    if adapter.architecture != base.architecture:
        raise InvalidAdapter(
            f"adapter {adapter.path.name} is for architecture {adapter.architecture!r} but {base_name} is "
            f"{base.architecture!r}", hint="use the base model the adapter was trained on (--base)")
    for name, (n_in, n_out) in sorted(adapter.weights.items()):
        found = base.tensors.get(name)
        if found is None:
            raise InvalidAdapter(
                f"adapter {adapter.path.name} adapts {name}, which {base_name} does not have "
                f"({base.n_layer} layers)", hint="use the base model the adapter was trained on (--base)")
        if found != (n_in, n_out):
            raise InvalidAdapter(
                f"adapter {adapter.path.name} expects {name} of shape {n_in}x{n_out} but {base_name} has "
                f"{found[0]}x{found[1]} (n_embd {base.n_embd})",
                hint="use the base model the adapter was trained on (--base)")
