#!/usr/bin/env bash
# SmolLM2-135M as the package ships it (Q4_1) and rewritten as Q4_0 (models/requant.py), read by the managed
# engine's llama-bench on the same quiet machine, one and two threads (2026-12-06; nothing else running).
#   bash benchmarks/results/models/requant/bench.sh > benchmarks/results/models/requant/llama-bench-2026-12-06.txt
set -euo pipefail
BENCH=$(ls "${XDG_CACHE_HOME:-$HOME/.cache}"/tiankong/engine/*/bin/llama-bench | head -1)
MODELS="${XDG_DATA_HOME:-$HOME/.local/share}/tiankong/models/smollm2/135m-instruct"
grep -m1 "model name" /proc/cpuinfo; nproc; uptime
echo "bench: $BENCH"; sha256sum "$MODELS/q4_1/model.gguf" "$MODELS/q4_0/model.gguf"
"$BENCH" -m "$MODELS/q4_1/model.gguf,$MODELS/q4_0/model.gguf" -p 256,1024 -n 32 -t 1,2 -r 3
