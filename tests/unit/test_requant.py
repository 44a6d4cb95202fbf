"""``models/requant.py``: a GGUF's Q4_1 weights rewritten as Q4_0, everything else as it was (the test model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tiankong.models.requant import requantize  # noqa: E402

Q = gguf.GGMLQuantizationType


def _source(path: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    weight = rng.normal(0, 0.05, size=(64, 128)).astype(np.float32)
    norm = rng.normal(1, 0.1, size=(128,)).astype(np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_context_length(8192)
    writer.add_token_list([b"a", b"\xe4\xb8\xad", b"\xff"])  # a byte token that is not UTF-8 stays as it is
    writer.add_token_scores([0.0, -1.5, -2.0])
    writer.add_string("general.name", "tiny")
    writer.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(weight, Q.Q4_1), raw_dtype=Q.Q4_1)
    writer.add_tensor("blk.0.attn_norm.weight", norm)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weight, norm


def test_q4_1_weights_become_q4_0_and_everything_else_is_kept(tmp_path: Path) -> None:
    source, out = tmp_path / "in.gguf", tmp_path / "out.gguf"
    weight, norm = _source(source)
    requantize(source, out)
    before, after = gguf.GGUFReader(str(source)), gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in after.tensors}
    assert tensors["blk.0.attn_q.weight"].tensor_type == Q.Q4_0
    assert tensors["blk.0.attn_norm.weight"].tensor_type == Q.F32
    assert np.array_equal(np.asarray(tensors["blk.0.attn_norm.weight"].data), norm)
    was = gguf.quants.dequantize(next(t for t in before.tensors if t.name == "blk.0.attn_q.weight").data, Q.Q4_1)
    now = gguf.quants.dequantize(tensors["blk.0.attn_q.weight"].data, Q.Q4_0)
    # Q4_0: levels -8..7 times max / 8 per block (ggml's block_q4_0): half a step of rounding, a whole step where
    # a value of the other sign than the block's extreme is clipped at +7; 1 % for the f16 scale
    bound = np.abs(was.reshape(-1, 32)).max(axis=1, keepdims=True) / 8 * 1.01 + 1e-6
    assert np.all(np.abs(now.reshape(-1, 32) - was.reshape(-1, 32)) <= bound)
    assert np.abs(now - weight.reshape(now.shape)).mean() < 0.01  # still the weights (σ 0.05)

    def fields(reader: object) -> dict[str, object]:
        out: dict[str, object] = {}
        for f in reader.fields.values():  # type: ignore[attr-defined]
            if not f.name.startswith("GGUF."):
                out[f.name] = [bytes(f.parts[i]) for i in f.data]
        return out

    old, new = fields(before), fields(after)
    assert set(old) == set(new) and [k for k in old if old[k] != new[k]] == ["general.file_type"]
    assert int(after.fields["general.file_type"].parts[-1][0]) == int(gguf.LlamaFileType.MOSTLY_Q4_0)
    assert new["tokenizer.ggml.tokens"][2] == b"\xff"


def test_the_same_input_gives_the_same_bytes(tmp_path: Path) -> None:
    """The catalog pins the written file by sha256: the rewrite must be deterministic."""
    _source(tmp_path / "in.gguf")
    requantize(tmp_path / "in.gguf", tmp_path / "a.gguf")
    requantize(tmp_path / "in.gguf", tmp_path / "b.gguf")
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def _install(name: str) -> None:
    """A registry entry for a catalog model (its manifest and a placeholder file), as ``models pull`` leaves one."""
    from tiankong.models.catalog import find_entry
    from tiankong.models.registry import MODEL_FILE, model_dir, write_manifest

    entry = find_entry(name)
    assert entry is not None
    folder = model_dir(entry.family, entry.size, entry.quant)
    folder.mkdir(parents=True)
    (folder / MODEL_FILE).write_bytes(b"GGUF")
    write_manifest(folder, {"name": name, "family": entry.family, "size": entry.size, "quant": entry.quant,
                            "bytes": 4, "sha256": entry.sha256, "source": "catalog"})  # the file's own size


@pytest.mark.parametrize("installed", [(), ("q4_0",), ("q4_1",), ("q4_0", "q4_1")])
def test_a_short_name_means_the_current_quant_unless_only_the_old_one_is_installed(installed: tuple[str, ...]
                                                                                   ) -> None:
    """``smollm2`` with nothing installed names the quant to pull (q4_0), with both the current one; with the
    superseded q4_1 alone, that one (what a machine set up before 2026-12-06 has)."""
    from tiankong.models import TEST_MODEL
    from tiankong.models.registry import resolve

    for quant in installed:
        _install(f"smollm2-135m-instruct:{quant}")
    expected = "smollm2-135m-instruct:q4_1" if installed == ("q4_1",) else TEST_MODEL
    assert TEST_MODEL == "smollm2-135m-instruct:q4_0"
    for name in ("smollm2", "smollm2-135m-instruct"):
        record = resolve(name)
        assert record.name == expected and record.installed == bool(installed)


def test_a_misspelt_name_suggests_the_current_quant_first() -> None:
    from tiankong.models import TEST_MODEL
    from tiankong.models.registry import close_matches, list_models

    assert close_matches("smolm2", list_models())[:2] == [TEST_MODEL, "smollm2-135m-instruct:q4_1"]
