"""``tiankong.plan``: the memory formula on the real SmolLM2 GGUF and on Gemma-2 2B's published shape."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.errors import ConfigError, InvalidModelFile
from tiankong.models import TEST_MODEL, GGUFInfo
from tiankong.plan import (
    ModelSpec,
    PlanConfig,
    fit_budget,
    format_bytes,
    load_spec,
    parse_size,
    plan_memory,
    spec_from_info,
)
from tiankong.plan.tensors import matmul_bytes_by_type

MiB = 2**20


@pytest.fixture(scope="module")
def smol(smol_path: Path) -> ModelSpec:
    return load_spec(str(smol_path))


@pytest.fixture(scope="module")
def gemma2() -> ModelSpec:
    """Gemma-2 2B (2.61B parameters): 26 layers, 8 heads, 4 KV heads of 256, window 4096 on every other layer."""
    info = GGUFInfo(
        path="gemma-2-2b-it-Q4_K_M.gguf", architecture="gemma2", name="gemma-2-2b-it", parameters=2_614_341_888,
        tensor_bytes=1_708_000_000, file_bytes=1_709_000_000, layers=26, heads=8, kv_heads=4, head_dim=256,
        head_dim_v=256, embedding=2304, context_length=8192, sliding_window=4096,
        sliding_window_pattern=[i % 2 == 0 for i in range(26)], file_type="q4_k_m", vocab_size=256_000,
    )
    return spec_from_info(info)


# --- the formula on the real SmolLM2 file (numbers llama.cpp itself logs for it) ------------------------


def test_smollm2_shape_from_gguf(smol: ModelSpec) -> None:
    assert (smol.layers, smol.kv_heads, smol.head_dim, smol.embedding, smol.vocab_size) == (30, 3, 64, 576, 49152)
    assert smol.ffn_length == 1536  # recovered from the parameter count
    assert smol.weights_bytes == 89_941_248  # llama.cpp: "CPU_Mapped model buffer size = 85.77 MiB"
    assert smol.matmul_bytes_by_type == {"q4_0": 59_719_680}


def test_smollm2_kv_and_compute_match_llama_cpp(smol: ModelSpec) -> None:
    plan = plan_memory(smol, PlanConfig(ctx=4096, slots=1))
    assert plan.target.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23_040
    assert plan.kv_bytes == 90 * MiB  # "KV buffer size = 90.00 MiB"
    assert abs(plan.target.compute_bytes - 17.51 * MiB) < 0.05 * MiB  # "compute buffer size = 17.51 MiB"
    assert plan.target.output_bytes == 4 * 49152  # logits of one token per slot
    # q4_0 is repacked on x86 (a second copy): "CPU_REPACK model buffer size = 56.95 MiB"
    assert plan.target.repack_bytes == 59_719_680
    parts = plan.weights_bytes + plan.kv_bytes + plan.compute_bytes + plan.overhead_bytes
    assert plan.total_bytes == parts


def test_slots_split_the_context_and_kv_types_scale_it(smol: ModelSpec) -> None:
    split = plan_memory(smol, PlanConfig(ctx=8192, slots=4))
    assert (split.ctx_per_slot, split.target.layout.streams) == (2048, 4)
    assert split.kv_bytes == plan_memory(smol, PlanConfig(ctx=8192, slots=1)).kv_bytes
    odd = plan_memory(smol, PlanConfig(ctx=4096, slots=3))  # 1365 per slot, padded to 256
    assert (odd.ctx_per_slot, odd.target.layout.n_ctx) == (1536, 4608)
    unified = plan_memory(smol, PlanConfig(ctx=8192, slots=4, kv_unified=True))
    assert (unified.ctx_per_slot, unified.target.layout.streams) == (8192, 1)
    q8 = plan_memory(smol, PlanConfig(ctx=8192, slots=4, kv_type="q8_0"))
    q4 = plan_memory(smol, PlanConfig(ctx=8192, slots=4, kv_type="q4_0"))
    assert (q8.target.kv_bytes_per_token, q4.target.kv_bytes_per_token) == (12_240, 6_480)
    assert q8.kv_bytes == 8192 * 12_240


def test_ctx_beyond_trained_context_warns(smol: ModelSpec) -> None:
    assert not plan_memory(smol, PlanConfig(ctx=16384, slots=2)).warnings
    warnings = plan_memory(smol, PlanConfig(ctx=16384, slots=1)).warnings
    assert len(warnings) == 1 and "trained context 8192" in warnings[0]


def test_draft_model_adds_its_weights_kv_and_vocab(smol: ModelSpec) -> None:
    alone = plan_memory(smol, PlanConfig(ctx=4096, slots=2))
    both = plan_memory(smol, PlanConfig(ctx=4096, slots=2), draft=smol)
    assert both.weights_bytes == 2 * alone.weights_bytes
    assert both.kv_bytes == 2 * alone.kv_bytes
    assert both.overhead_bytes > alone.overhead_bytes
    assert both.to_json()["draft"]["kv_bytes"] == alone.kv_bytes


def test_tensor_scan_reads_types(smol_path: Path) -> None:
    assert matmul_bytes_by_type(smol_path) == {"q4_0": 59_719_680}


# --- the worked example of docs/plan.md ----------------------------------------------------------------


def test_gemma2_worked_example(gemma2: ModelSpec) -> None:
    assert (gemma2.ffn_length, gemma2.swa_layers, gemma2.full_layers) == (9216, 13, 13)
    plan = plan_memory(gemma2, PlanConfig(ctx=8192, slots=1))
    assert plan.target.kv_bytes_per_token == 2 * 26 * 4 * 256 * 2 == 106_496  # ~106 KB/token
    assert 106_496 * 8_000 == 851_968_000  # the seeds' "~852 MB at 8K" (no window)
    assert plan.target.layout.cells_swa == 4608  # pad256(4096 + 512)
    assert plan.kv_bytes == 13 * 4096 * 8192 + 13 * 4096 * 4608 == 681_574_400
    assert plan.target.compute_bytes == 4 * 512 * (4 * 2304 + 3 * 9216) + 2 * 512 * (8192 + 4608) == 88_604_672
    assert plan.overhead_bytes == 12 * MiB + 7_900 * 1024 + 314 * 256_000 + 134 * 1024 + 14 * 256_000
    assert plan.total_bytes == 2_583_980_800
    assert format_bytes(plan.kv_bytes) == "650 MiB"
    q8 = plan_memory(gemma2, PlanConfig(ctx=8192, slots=1, kv_type="q8_0"))
    assert (q8.target.kv_bytes_per_token, q8.kv_bytes) == (56_576, 362_086_400)


def test_gemma2_window_grows_with_unified_slots(gemma2: ModelSpec) -> None:
    plan = plan_memory(gemma2, PlanConfig(ctx=16384, slots=2, kv_unified=True))
    assert plan.target.layout.cells_swa == 8704  # pad256(4096 × 2 + 512)
    assert not plan.warnings  # 16384 ≤ 2 slots × 8192
    assert plan_memory(gemma2, PlanConfig(ctx=32768, slots=2, kv_unified=True)).warnings


def test_repack_counts_the_types_the_cpu_repacks(gemma2: ModelSpec) -> None:
    spec = replace(gemma2, matmul_bytes_by_type={"q4_k": 1000, "q6_k": 300, "f32": 7})
    config = PlanConfig(ctx=2048, slots=1)
    assert plan_memory(spec, config).target.repack_bytes == 1000
    assert plan_memory(spec, config.with_(repack="arm")).target.repack_bytes == 1300
    assert plan_memory(spec, config.with_(repack="none")).target.repack_bytes == 0


# --- the inverse: a budget -------------------------------------------------------------------------------


def test_parse_size() -> None:
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("512MB") == 512_000_000
    assert parse_size("1.5g") == 3 * 2**29
    assert parse_size("800M") == 800 * MiB
    assert parse_size("123456") == 123_456
    for bad in ("", "lots", "2 parsecs", "0MB"):
        with pytest.raises(ConfigError):
            parse_size(bad)


def test_budget_finds_the_largest_context(smol: ModelSpec) -> None:
    config = PlanConfig(ctx=4096, slots=1)
    budget = plan_memory(smol, config).total_bytes
    fit = fit_budget(smol, budget, config)
    f16 = next(option for option in fit.options if option.config.kv_type == "f16")
    assert f16.config.ctx == 4096 and f16.total_bytes <= budget
    assert plan_memory(smol, config.with_(ctx=4096 + 256)).total_bytes > budget  # the largest, not just one
    assert fit.best is not None and fit.best.config.ctx >= 4096
    assert all(option.total_bytes <= budget for option in fit.options)


def test_budget_caps_at_trained_context_and_prefers_precision(smol: ModelSpec) -> None:
    fit = fit_budget(smol, 64 * 2**30, PlanConfig(slots=2))
    assert [option.ctx_per_slot for option in fit.options] == [8192, 8192, 8192]
    assert fit.best is not None and fit.best.config.kv_type == "f16"


def test_nothing_fits_says_the_smallest_configuration(smol: ModelSpec) -> None:
    fit = fit_budget(smol, 50_000_000, PlanConfig(slots=2))
    assert not fit.fits and fit.best is None and fit.smallest is not None
    assert (fit.smallest.config.ctx, fit.smallest.config.kv_type) == (512, "q4_0")
    assert "nothing fits" in fit.message and format_bytes(fit.smallest.total_bytes) in fit.message


# --- bad input -------------------------------------------------------------------------------------------


def test_non_gguf_file_is_refused(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n" * 10)
    with pytest.raises(InvalidModelFile, match="not a GGUF file"):
        load_spec(str(notes))
    assert_one_line_error(run_cli("plan", str(notes)), "not a GGUF file")


@pytest.mark.parametrize(("ctx", "slots"), [(63, 1), (64, 1), (2**24, 2), (2**24 + 1, 2), (4096, 256), (4096, 257)])
def test_plan_refuses_exactly_what_serve_refuses(smol: ModelSpec, ctx: int, slots: int) -> None:
    """A plan is never made for a server `tiankong serve` and the config file would refuse (ctx < 64 or > 2**24,
    over 256 slots)."""
    from pydantic import ValidationError

    from tiankong.config import EngineSettings
    try:
        EngineSettings(ctx=ctx, slots=slots)
        serve_takes = True
    except ValidationError:
        serve_takes = False
    if serve_takes:
        assert plan_memory(smol, PlanConfig(ctx=ctx, slots=slots)).total_bytes > 0
    else:
        with pytest.raises(ConfigError, match="must be"):
            plan_memory(smol, PlanConfig(ctx=ctx, slots=slots))
    assert serve_takes == ((64 <= ctx <= 2**24) and slots <= 256)


# --- the CLI ---------------------------------------------------------------------------------------------


def test_cli_json_matches_the_library(smol_path: Path, smol: ModelSpec) -> None:
    proc = run_cli("plan", str(smol_path), "--ctx", "2048", "--slots", "2", "--kv-type", "q8_0", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    expected = plan_memory(smol, PlanConfig(ctx=2048, slots=2, kv_type="q8_0", repack=data["repack"]))
    for key in ("weights_bytes", "kv_bytes", "total_bytes"):
        assert data[key] == getattr(expected, key)
    assert data["ctx_per_slot"] == 1024 and data["kv_type"] == "q8_0"


def test_cli_table_compares_models_and_warns(smol_path: Path) -> None:
    proc = run_cli("plan", str(smol_path), TEST_MODEL, "--ctx", "16384", "--slots", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("q4_0") >= 2 and "total" in proc.stdout
    assert "warning:" in proc.stderr and "trained context 8192" in proc.stderr


def test_cli_budget(smol_path: Path) -> None:
    proc = run_cli("plan", str(smol_path), "--slots", "1", "--budget", "300MiB", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["budget"]["fits"] and data["total_bytes"] <= 300 * MiB
    assert {option["kv_type"] for option in data["budget"]["options"]} == {"f16", "q8_0", "q4_0"}
    assert_one_line_error(run_cli("plan", str(smol_path), "--budget", "50MB"), "nothing fits", "needs")
