"""Draft/target vocabulary compatibility, checked from GGUF metadata before a process is started.

llama-server refuses an incompatible draft model only after loading both models, with a generic
"draft model vocab type must match target model" in its log. tiankong checks the same rules first
(mirroring ``common_speculative_are_compatible`` in the pinned llama.cpp) and names both files and what
differs: tokenizer model, BOS/EOS handling, vocabulary size (at most 128 apart) and the text of every token
from id 5 on.

The metadata is read by ``models.gguf_header`` (a header-only reader; the token texts kept as bytes), in a
fraction of a second where ``gguf``'s own reader takes tens of seconds for a 150k-token vocabulary.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FlagError, InvalidModelFile
from ..models.gguf_header import GGUF_MAGIC, read_header_file

if TYPE_CHECKING:  # pragma: no cover
    from .flags import EngineConfig

MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID


class VocabMismatch(FlagError):
    """The draft model's vocabulary does not match the target's: llama-server would refuse it."""


@dataclass
class VocabInfo:
    """What llama.cpp compares between a target and a draft model."""

    path: str
    name: str
    model: str  # tokenizer.ggml.model: gpt2, llama, …
    pre: str
    bos: int | None
    eos: int | None
    add_bos: bool | None
    add_eos: bool | None
    tokens: list[bytes] = field(default_factory=list, repr=False)

    @property
    def size(self) -> int:
        return len(self.tokens)


def read_vocab(path: str | Path) -> VocabInfo:
    """Tokenizer metadata of a GGUF file; ``InvalidModelFile`` if it is not one."""
    path = Path(path)
    try:
        meta = _read_kv(path)
    except OSError as exc:
        raise InvalidModelFile(f"cannot read {path}: {exc.strerror}", hint="check the model path") from None
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidModelFile(f"{path} has a damaged GGUF header ({exc})", hint="re-download it") from None
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise InvalidModelFile(f"{path} has no tokenizer.ggml.tokens", hint="it is not a complete language model")
    return VocabInfo(
        path=str(path), name=str(meta.get("general.name") or path.name), model=str(meta.get("tokenizer.ggml.model")),
        pre=str(meta.get("tokenizer.ggml.pre") or ""), bos=_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos=_int(meta.get("tokenizer.ggml.eos_token_id")), add_bos=_bool(meta.get("tokenizer.ggml.add_bos_token")),
        add_eos=_bool(meta.get("tokenizer.ggml.add_eos_token")), tokens=tokens,
    )


def vocab_differences(target: VocabInfo, draft: VocabInfo) -> list[str]:
    """Every rule llama.cpp applies that the pair breaks (empty: compatible)."""
    problems: list[str] = []
    if target.model != draft.model:
        problems.append(f"tokenizer model {target.model!r} vs {draft.model!r}")
    for what, t_add, d_add, t_id, d_id in (("BOS", target.add_bos, draft.add_bos, target.bos, draft.bos),
                                           ("EOS", target.add_eos, draft.add_eos, target.eos, draft.eos)):
        if bool(t_add) != bool(d_add) or (t_add and t_id != d_id):
            problems.append(f"{what} handling (add {bool(t_add)}, id {t_id}) vs (add {bool(d_add)}, id {d_id})")
    if abs(target.size - draft.size) > MAX_SIZE_DIFFERENCE:
        problems.append(f"vocabulary size {target.size} vs {draft.size} (at most {MAX_SIZE_DIFFERENCE} apart)")
    for i in range(CHECK_START_TOKEN_ID, min(target.size, draft.size)):
        if target.tokens[i] != draft.tokens[i]:
            t_text, d_text = (tok.decode("utf-8", "replace") for tok in (target.tokens[i], draft.tokens[i]))
            problems.append(f"token {i} is {t_text!r} vs {d_text!r}")
            break
    return problems


def check_draft_compatible(target: str | Path, draft: str | Path) -> None:
    """Raise ``VocabMismatch`` naming both models and what differs, before any process starts."""
    t_info, d_info = read_vocab(target), read_vocab(draft)
    problems = vocab_differences(t_info, d_info)
    if problems:
        raise VocabMismatch(
            f"draft model {d_info.name} ({draft}) cannot draft for {t_info.name} ({target}): "
            + "; ".join(problems),
            hint="use a draft from the same model family (same tokenizer), or an n-gram spec_type without a draft",
        )


def preflight_files(config: EngineConfig) -> None:
    """Check what llama-server would only find out after loading: draft vocabulary, mmproj file."""
    if config.draft_model is not None and "draft-simple" in config.spec_types():
        check_draft_compatible(config.model, config.draft_model)
    if config.mmproj is not None:
        _check_mmproj(Path(config.mmproj))


def _check_mmproj(path: Path) -> None:
    """A readable GGUF whose architecture is ``clip`` (what llama.cpp writes for every projector)."""
    fix = "pass the projector GGUF published with the vision model (often mmproj-*.gguf), not the model itself"
    try:
        arch = _read_kv(path).get("general.architecture")
    except OSError as exc:
        raise FlagError(f"mmproj {path} cannot be read: {exc.strerror}", hint="check the path") from None
    except InvalidModelFile:
        raise FlagError(f"mmproj {path} is not a GGUF file", hint=fix) from None
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise FlagError(f"mmproj {path} has a damaged GGUF header ({exc})", hint=fix) from None
    if arch is not None and arch != "clip":
        raise FlagError(f"mmproj {path} is a {arch!r} model, not a multimodal projector (architecture 'clip')",
                        hint=fix)


# --- reading ---------------------------------------------------------------------------------------


def _read_kv(path: Path) -> dict[str, Any]:
    """The key/values of a GGUF file, the token texts as bytes: ``InvalidModelFile`` when it is not a GGUF file,
    ``OSError`` / ``ValueError`` / ``struct.error`` when it cannot be read or is damaged (callers name them)."""
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise InvalidModelFile(f"{path} is not a GGUF file (magic {magic!r})", hint="pass a .gguf model")
    return read_header_file(path, keep_strings=frozenset({"tokenizer.ggml.tokens"})).values


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return bool(value) if isinstance(value, bool) else None
