"""The base model a LoRA trains on: read from its GGUF file vs from tiankong's cache (``lora/base.py``), one run.

For each model: load from the GGUF file (``cache=False``: the tokenizer rebuilt, the weights dequantized), write the
cache, load from it; then the same token ids, chat template and logits on a mixed zh/en text, and the cache's size on
disk. Torch on ``--threads`` threads (the tests' workers have one core each). Needs the ``[lora]`` extra.

    .venv/bin/python benchmarks/lora_base_cache.py \\
        --models smollm2-135m-instruct:q4_0,qwen2.5-coder-0.5b-instruct:q4_k_m \\
        | tee benchmarks/results/lora/base-cache-2026-12-07.txt
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

TEXT = "Hello there, 你好, the invoice INV-2231 was charged twice on 2026-12-01."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m-instruct:q4_0")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="tiankong-base-cache-")
    os.environ["TIANKONG_CACHE_DIR"] = work  # a cache of this run's own: the first load is always from GGUF
    import torch
    import transformers

    from tiankong.lora.base import cache_folder, load_base, write_cache
    from tiankong.models import resolve_installed

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s)")
    print("| model | from GGUF (s) | writing the cache (s) | from the cache (s) | same ids, template, logits "
          "| cache on disk |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for name in args.models.split(","):
            record = resolve_installed(name)
            started = time.perf_counter()
            tokenizer, model = load_base(record, torch, cache=False)
            gguf_s = time.perf_counter() - started
            started = time.perf_counter()
            write_cache(cache_folder(record), tokenizer, model, lambda _: None)
            write_s = time.perf_counter() - started
            started = time.perf_counter()
            lines: list[str] = []
            cached_tokenizer, cached = load_base(record, torch, lines.append)
            cache_s = time.perf_counter() - started
            assert any("from the cache" in line for line in lines), lines
            ids = tokenizer(TEXT)["input_ids"]
            with torch.no_grad():
                same = (cached_tokenizer(TEXT)["input_ids"] == ids
                        and cached_tokenizer.chat_template == tokenizer.chat_template
                        and torch.equal(model(torch.tensor([ids])).logits, cached(torch.tensor([ids])).logits))
            size = sum(f.stat().st_size for f in cache_folder(record).iterdir())
            print(f"| {record.name} | {gguf_s:.1f} | {write_s:.1f} | {cache_s:.1f} | {same} | {size / 1e6:.0f} MB |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
