"""The model registry's file operations on a tiny GGUF written by ``gguf``'s own writer: what `models add` and
`models rm` may and may not do to a user's files (a read-only CLI sweep found each case)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiankong.errors import ConfigError, InvalidModelFile, ModelNotFound
from tiankong.models.registry import add_model, broken_models, installed_models, remove_model, resolve

pytestmark = pytest.mark.unit


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from gguf import GGUFWriter

    monkeypatch.setenv("TIANKONG_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "tiny.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_rm_takes_a_full_or_short_name_never_a_prefix(tiny: Path) -> None:
    add_model(tiny, family="ax", size="s", quant="q")
    add_model(tiny, family="ax", size="s", quant="q4")
    add_model(tiny, family="zq", size="s", quant="q")
    with pytest.raises(ConfigError, match="start of zq-s:q"):
        remove_model("z")  # resolve's prefix match picked the one model starting with "z" and removed it
    assert remove_model("zq-s:q").name == "zq-s:q"
    assert remove_model("ax-s:q").name == "ax-s:q" and [r.name for r in installed_models()] == ["ax-s:q4"]
    assert remove_model("ax-s").name == "ax-s:q4" and installed_models() == []  # one quant left: its short name


def test_adding_the_installed_file_itself_is_refused_and_the_file_kept(tiny: Path) -> None:
    record = add_model(tiny, family="self", size="s", quant="q")
    size = record.path.stat().st_size
    for link in (True, False):
        with pytest.raises(ConfigError, match="installed file"):
            add_model(record.path, family="self", size="s", quant="q", force=True, link=link)
    assert record.path.is_file() and not record.path.is_symlink() and record.path.stat().st_size == size


@pytest.mark.parametrize("family", ["..", "/", "模型", "a" * 300, "-x", "Ab"])
def test_a_name_part_the_user_typed_is_used_as_typed_or_refused(tiny: Path, family: str) -> None:
    with pytest.raises(ConfigError, match="invalid --family"):
        add_model(tiny, family=family, size="s", quant="q")
    assert installed_models() == []


def test_a_linked_model_whose_file_is_gone_is_named_and_can_be_removed(tiny: Path) -> None:
    add_model(tiny, family="lk", size="s", quant="q", link=True)
    tiny.unlink()
    with pytest.raises(InvalidModelFile, match="is gone"):
        resolve("lk-s:q")
    assert remove_model("lk-s:q").name == "lk-s:q"
    with pytest.raises(ModelNotFound):
        resolve("lk-s:q")


@pytest.mark.parametrize("damage", ["no sha256", "bytes a string", "cut short", "no manifest"])
def test_a_broken_model_is_skipped_named_and_removable(tiny: Path, damage: str) -> None:
    """A manifest without `sha256` (or with `"bytes": "lots"`) stopped `models list`, `doctor`, `run` and even
    `models rm` with an internal error; a model file cut short counted as installed; a copy stopped before its
    manifest was written made `models add` say "already installed" while `list` and `rm` did not know it."""
    import json

    good = add_model(tiny, family="ok", size="s", quant="q")
    record = add_model(tiny, family="bad", size="s", quant="q")
    manifest = record.path.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    if damage == "no sha256":
        del data["sha256"]
    elif damage == "bytes a string":
        data["bytes"] = "lots"
    manifest.write_text(json.dumps(data))
    if damage == "cut short":
        record.path.write_bytes(record.path.read_bytes()[:-8])
    if damage == "no manifest":
        manifest.unlink()
    assert [r.name for r in installed_models()] == [good.name]
    ((name, folder, problem),) = broken_models()
    assert name == "bad-s:q" and folder == record.path.parent and problem
    if damage == "no manifest":  # the interrupted copy is replaced without --force
        assert add_model(tiny, family="bad", size="s", quant="q").name == "bad-s:q" and broken_models() == []
        return
    with pytest.raises(InvalidModelFile, match="damaged"):
        resolve("bad-s:q")
    assert remove_model("bad-s:q").name == "bad-s:q"
    assert broken_models() == [] and not folder.exists() and [r.name for r in installed_models()] == [good.name]


def test_the_reinstall_hint_names_a_command_that_can_work(tiny: Path) -> None:
    from tiankong.models import TEST_MODEL, reinstall_hint

    assert "models pull --force" in reinstall_hint(TEST_MODEL)  # a catalog model comes back from its package
    assert "models add FILE --force" in reinstall_hint("lk-s:q")  # pull refuses a name outside the catalog
    assert "pull" not in reinstall_hint(str(tiny))


def test_a_model_given_as_a_path_must_be_a_gguf_file(tiny: Path, tmp_path: Path) -> None:
    """``Client(model="/tmp/x.gguf")`` with a text file started llama-server, which exited "during start-up"."""
    text = tmp_path / "x.gguf"
    text.write_text("hello")
    with pytest.raises(InvalidModelFile, match="not a GGUF file"):
        resolve(str(text))
    with pytest.raises(InvalidModelFile, match="is a directory"):
        resolve(str(tmp_path) + "/")
    with pytest.raises(ModelNotFound, match="no such model file"):
        resolve(str(tmp_path / "missing.gguf"))
    assert resolve(str(tiny)).installed


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_model_name_is_said_to_be_empty(tiny: Path, name: str) -> None:
    add_model(tiny, family="e", size="s", quant="q")
    for call in (resolve, remove_model):
        with pytest.raises(ConfigError, match="model name is empty"):
            call(name)


def test_a_short_name_of_two_installed_quants_removes_neither(tiny: Path) -> None:
    """The catalog's SmolLM2 has a current quant and a superseded one: resolve's short name picks the current
    one, which rm removed although two were installed (here the tiny file stands in for both)."""
    for quant in ("q4_0", "q4_1"):
        add_model(tiny, family="smollm2", size="135m-instruct", quant=quant)
    with pytest.raises(ConfigError, match="2 installed quants"):
        remove_model("smollm2-135m-instruct")
    assert len(installed_models()) == 2
    add_model(tiny, family="two", size="s", quant="q4_0")
    add_model(tiny, family="two", size="s", quant="q4_1")
    with pytest.raises(ConfigError, match="ambiguous"):
        remove_model("two-s")


def test_a_linked_model_is_refreshed_from_its_changed_file(tiny: Path) -> None:
    """``models add FILE --force`` is verify's hint for a model added from a file; for a --link'ed one the guard
    against adding the installed file itself refused it."""
    first = add_model(tiny, family="lk", size="s", quant="q", link=True)
    with tiny.open("ab") as handle:  # the user's file changed in place
        handle.write(b"\0" * 64)
    for link in (True, False):
        again = add_model(tiny, family="lk", size="s", quant="q", link=link, force=True)
        assert again.sha256 != first.sha256 and again.path.stat().st_size == tiny.stat().st_size
    assert tiny.is_file()
