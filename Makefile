# The two commands a new user runs are `make demo` and `make test`; both bootstrap
# everything they need (uv in .tools/, the workspace in .venv/) from python3 and pip.

PYTHON ?= python3
TOOLS := .tools
UV_VERSION := 0.13.9
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
BENCH_VENV := .venv-bench
DEMO_VENV := .venv-demo
MEMBERS := mediator/pyproject.toml mediator_resilience/pyproject.toml http_resilience/pyproject.toml

export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test chaos lint format bench docs venv clean mutation

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"

$(VENV)/.synced: $(UV) pyproject.toml $(MEMBERS)
	$(UV) sync --all-packages --python $(PYTHON)
	touch $@

venv: $(VENV)/.synced

# The demo runs on the runtime set alone (pyproject's `demo` group), in its own
# environment: a fresh clone's first line of the demo waits for that, not for the
# type checkers and test tools of .venv/.
$(DEMO_VENV)/.synced: $(UV) pyproject.toml $(MEMBERS)
	@echo "make demo: installing what the samples run on (the demo group) into $(DEMO_VENV)/"
	UV_PROJECT_ENVIRONMENT=$(DEMO_VENV) $(UV) sync --all-packages --no-default-groups --group demo --python $(PYTHON)
	touch $@

demo: $(DEMO_VENV)/.synced
	@echo "make demo: the mediator quickstart"
	$(DEMO_VENV)/bin/python samples/quickstart/main.py
	@echo "make demo: retry for a stream that breaks half-way"
	$(DEMO_VENV)/bin/python samples/stream_retry/main.py
	@echo "make demo: a resilient HTTP client"
	$(DEMO_VENV)/bin/python samples/http_client/main.py
	@echo "make demo: two web services, an outage, and the plot"
	$(DEMO_VENV)/bin/python samples/webapi/demo.py

# The tests run on TEST_WORKERS pytest-xdist workers (auto: one per core; 0: in
# this process alone). Each worker starts its own loopback servers, PostgreSQL
# cluster and redis-server (session fixtures); the closure tests share one
# worker, so the wheels are built once (--dist loadgroup).
TEST_WORKERS ?= auto

test: venv
	$(BIN)/python -m pytest --cov --cov-report=term -m "not chaos" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The chaos, load and fault scenarios: loopback only, each bounded in count and
# time, a few minutes in all. Every test marked `chaos`: all of tests/chaos, and the
# load-style tests kept beside the unit they load (eight processes racing for one
# idempotency key, the demo's real run, 100,000 hosts). CI runs them after `make test`.
chaos: venv
	$(BIN)/python -m pytest -m chaos $(PYTEST_ARGS)

lint: venv
	$(BIN)/python tools/unasync.py --check
	$(BIN)/python tools/copy_primitives.py --check
	$(BIN)/lint-imports tools/layers/http_resilience.ini
	$(BIN)/lint-imports tools/layers/mediator.ini
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pyright

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Peers are installed only into the benchmark's own environment, never into .venv.
# The members are installed editable, so a bench always measures the work tree.
$(BENCH_VENV)/.synced: $(UV) benchmarks/requirements.txt $(MEMBERS)
	$(UV) venv --allow-existing --python $(PYTHON) $(BENCH_VENV)
	VIRTUAL_ENV=$(BENCH_VENV) $(UV) pip install -e ./mediator -e ./mediator_resilience -e './http_resilience[redis]' -r benchmarks/requirements.txt
	touch $@

bench: $(BENCH_VENV)/.synced venv
	$(BENCH_VENV)/bin/python benchmarks/mediator_dispatch.py
	$(BENCH_VENV)/bin/python benchmarks/mediator_build.py
	$(BENCH_VENV)/bin/python benchmarks/mediator_import.py
	$(BENCH_VENV)/bin/python benchmarks/mediator_retry.py
	$(BENCH_VENV)/bin/python benchmarks/mediator_idempotency.py
	$(BENCH_VENV)/bin/python benchmarks/outbox.py
	$(BENCH_VENV)/bin/python benchmarks/concurrent_orders.py
	$(BENCH_VENV)/bin/python benchmarks/stream_retry.py
	$(BENCH_VENV)/bin/python benchmarks/http_overhead.py
	$(BENCH_VENV)/bin/python benchmarks/adaptive_load.py
	$(BENCH_VENV)/bin/python benchmarks/shared_state.py
	$(BIN)/python benchmarks/web_demo.py
	$(BIN)/python benchmarks/web_demo.py --rate 20

# Mutation testing (mutmut) of the pure logic: backoff, Retry-After, breaker, limiter,
# durations, stage order. Manual: not part of `make test` nor of CI. About five
# minutes on two cores; MUTATION_TIME_BOX seconds at most, then it stops and reports
# what it checked. mutmut lives in its own environment, never in .venv; the files,
# tests and scope are in pyproject.toml's [tool.mutmut] and tools/mutation.py.
MUTATION_VENV := .venv-mutation
MUTATION_TIME_BOX ?= 1200

$(MUTATION_VENV)/.synced: $(UV) pyproject.toml $(MEMBERS)
	UV_PROJECT_ENVIRONMENT=$(MUTATION_VENV) $(UV) sync --all-packages --no-default-groups --group dev --group mutation --python $(PYTHON)
	touch $@

mutation: $(MUTATION_VENV)/.synced
	$(MUTATION_VENV)/bin/python tools/mutation.py --time-box $(MUTATION_TIME_BOX)

docs: venv
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(DEMO_VENV) $(MUTATION_VENV) $(TOOLS) build/mutation mutants site .pytest_cache .mypy_cache .ruff_cache .coverage
