"""The flag table: every trap is refused with the fix named; the pinned flags are always there."""

from pathlib import Path

import pytest

from tiankong.engine import EngineConfig
from tiankong.errors import FlagError

MODEL = Path("/models/m.gguf")


def argv(**kw: object) -> list[str]:
    return EngineConfig(model=MODEL, **kw).to_argv("llama-server")  # type: ignore[arg-type]


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_pinned_flags_are_always_explicit() -> None:
    args = argv()
    for flag in ("-c", "-np", "-t", "--cache-ram", "--host", "-ctk", "-ctv"):
        assert flag in args, flag
    assert value(args, "--host") == "127.0.0.1"
    assert value(args, "--cache-ram") == "0"


def test_values_reach_argv() -> None:
    args = argv(ctx=8192, slots=4, threads=3, kv_type="q8_0", cache_ram_mib=256)
    assert (value(args, "-c"), value(args, "-np"), value(args, "-t")) == ("8192", "4", "3")
    assert value(args, "-ctk") == value(args, "-ctv") == "q8_0"
    assert value(args, "--cache-ram") == "256"


def test_draft_model_without_spec_type_is_an_error() -> None:
    with pytest.raises(FlagError, match="spec_type"):
        argv(draft_model=Path("/models/draft.gguf"))


def test_draft_model_with_spec_type_maps_to_new_flags() -> None:
    args = argv(draft_model=Path("/d.gguf"), spec_type="draft-simple", spec_draft_n_max=8, spec_draft_n_min=2,
                spec_draft_p_min=0.7)
    assert value(args, "--spec-type") == "draft-simple" and value(args, "-md") == "/d.gguf"
    assert value(args, "--spec-draft-n-max") == "8" and value(args, "--spec-draft-n-min") == "2"
    assert value(args, "--spec-draft-p-min") == "0.7"
    assert not any(a.startswith("--draft") for a in args)


@pytest.mark.parametrize(
    ("flag", "replacement"),
    [("--draft-max", "--spec-draft-n-max"), ("--draft-min", "--spec-draft-n-min"),
     ("--draft-p-min", "--spec-draft-p-min"), ("--draft-max=16", "--spec-draft-n-max")],
)
def test_removed_draft_flags_are_rejected_with_replacement(flag: str, replacement: str) -> None:
    with pytest.raises(FlagError) as err:
        argv(extra_args=[flag, "4"])
    assert replacement in str(err.value)


@pytest.mark.parametrize("kv", ["q3_k", "fp8", "F16", ""])
def test_unknown_kv_types_are_rejected(kv: str) -> None:
    with pytest.raises(FlagError, match="KV-cache type"):
        argv(kv_type=kv)


@pytest.mark.parametrize("flag", ["-c", "--ctx-size", "-np", "-t", "--cache-ram", "--port", "-md"])
def test_owned_flags_cannot_sneak_in_through_extra_args(flag: str) -> None:
    with pytest.raises(FlagError, match="EngineConfig"):
        argv(extra_args=[flag, "1"])


def test_spec_params_without_spec_type_and_bad_ranges() -> None:
    with pytest.raises(FlagError):
        argv(spec_draft_n_max=8)
    with pytest.raises(FlagError):
        argv(spec_type="draft-simple")  # no draft model
    with pytest.raises(FlagError):
        argv(spec_type="ngram-simple", spec_draft_n_min=9, spec_draft_n_max=4)
    with pytest.raises(FlagError):
        argv(spec_type="warp-drive")


def test_ctx_must_split_evenly_between_slots_and_be_positive() -> None:
    with pytest.raises(FlagError, match="divisible"):
        argv(ctx=1000, slots=3)
    with pytest.raises(FlagError):
        argv(slots=0)
    with pytest.raises(FlagError):
        argv(cache_ram_mib=-1)


def test_ngram_mode_needs_no_draft_model() -> None:
    args = argv(spec_type="ngram-simple")
    assert value(args, "--spec-type") == "ngram-simple" and "-md" not in args


def test_lora_adapters_load_without_applying() -> None:
    args = argv(lora=[Path("/a.gguf"), Path("/b.gguf")])
    # scale 0 at start-up: llama-server gives requests without "lora" the start-up scales (--lora would be 1.0)
    assert args.count("--lora-scaled") == 2 and "--lora" not in args and "--lora-init-without-apply" in args
    assert args[args.index("--lora-scaled") + 1] == "/a.gguf:0"
