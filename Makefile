# pdfqueue: `make demo` runs the pipeline on a fresh machine; `make test` runs the suite.
# Services (Redis, PostgreSQL, versitygw) run on loopback ports with their state under STATE.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
STATE ?= $(CURDIR)/.state
DEMO_STATE ?= $(CURDIR)/.pdfqueue/services
# The demo's own ports, so that it never shares a server with `make test` or `make services`
DEMO_PORTS ?= PDFQUEUE_REDIS_PORT=16479 PDFQUEUE_PG_PORT=15532
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
# `make deps` may install uv with `pip --user`, into a folder that is not on a fresh machine's
# PATH: put uv's folder on PATH here, so every recipe and every test finds it by name.
export PATH := $(patsubst %/,%,$(dir $(UV))):$(PATH)
PYTEST_ARGS ?=
# `make bench` runs services of its own, on ports of their own, and stops them when it ends.
# versitygw keeps the bench's objects in memory: on a disk, its CPU per PUT depended on what had
# been deleted there minutes before (ext4 without a journal scans recently freed inodes on each
# create), 0.5-1.5 ms per PDF from one run to the next; see docs/development/bench.md.
BENCH_STATE ?= $(CURDIR)/.state-bench
BENCH_PORTS ?= PDFQUEUE_REDIS_PORT=16579 PDFQUEUE_PG_PORT=15632 PDFQUEUE_S3_PORT=17270
BENCH_SHM := /dev/shm/pdfqueue-bench-$(shell id -u)
BENCH_S3_DATA ?= $(if $(wildcard /dev/shm/.),$(BENCH_SHM),$(BENCH_STATE)/s3)
# `make bench BENCH_ARGS="--densities typical --skip-peer"`: options of `python -m bench.run`;
# `make bench BENCH=mission BENCH_ARGS="--sizes 5000,50000"`: another of bench/'s programs
BENCH ?= run
BENCH_ARGS ?=
# `make demo DEMO_ARGS="--port 8001 --no-wait"`: another port, and exit once the batch is done
DEMO_ARGS ?=

.PHONY: help deps tools services services-stop test lint docs docs-refs demo demo-stop bench bench-deps clean

help:
	@echo "make demo   - run the whole pipeline on 300 generated résumés (installs what is missing);"
	@echo "              Ctrl-C stops its API and workers, make demo-stop its Redis and PostgreSQL"
	@echo "make test   - start Redis, PostgreSQL and an S3 server, then run the test suite"
	@echo "              (with the chart on real pods where containers can run; PYTEST_ARGS=--no-pods"
	@echo "              or PDFQUEUE_PODS=0 skips them, PYTEST_ARGS=--pods fails where they cannot run)"
	@echo "make lint   - ruff, mypy (strict on every package and bench/), the import layer contracts,"
	@echo "              hadolint on every Dockerfile/Containerfile and the docs site (mkdocs --strict:"
	@echo "              dead links and pages missing from nav fail)"
	@echo "make docs-refs - regenerate docs/'s reference pages from the code (settings, CLI, metrics, ...)"
	@echo "make bench  - throughput and memory benchmarks against the seed peer, on services of"
	@echo "              their own (BENCH=mission|load|... runs another of bench/'s programs)"

# The chart's values.schema.json and values table are written by readme-generator-for-helm (an
# npm package, pinned in devtools/chart/package-lock.json), installed into the git-ignored
# devtools/chart/node_modules again whenever the lock file changes.
CHART_TOOL := devtools/chart/node_modules/.package-lock.json
$(CHART_TOOL): devtools/chart/package-lock.json
	bash tools/services.sh node >/dev/null
	cd devtools/chart && npm ci --no-audit --no-fund --silent
	touch $@

# deps compiles the environment's bytecode once, as the images do: where PYTHONDONTWRITEBYTECODE
# is set, every process (API, workers, each parsing pool) compiled its imports from source again.
deps: $(CHART_TOOL)  ## uv, the locked Python environment and the chart's schema tool
	@command -v uv >/dev/null || [ -x "$(UV)" ] || python3 -m pip install --quiet --user uv \
	  || python3 -m pip install --quiet --break-system-packages uv
	UV_COMPILE_BYTECODE=1 $(UV) sync --frozen --quiet
	@bash tools/services.sh tesseract >/dev/null \
	  || echo "no Tesseract (needs root for apt-get): scanned PDFs will be skipped as needs_ocr" >&2

tools:  ## versitygw, the Kubernetes control plane and helm, built once and cached by version
	bash tools/build-binaries.sh

services: deps
	bash tools/services.sh start $(STATE)

services-stop:
	bash tools/services.sh stop $(STATE)

# Every command a test runs is installed here, before pytest: a test never skips for want of one
# (tests/support/tools.py installs the same on demand, and fails where it cannot). It ends
# with the 25 slowest tests: the first to examine as the suite grows.
test: deps tools
	bash tools/services.sh tesseract
	bash tools/services.sh prometheus >/dev/null
	bash tools/services.sh chromium >/dev/null
	bash tools/services.sh node >/dev/null
	bash tools/services.sh start $(STATE)
	eval "$$(bash tools/services.sh env $(STATE))"; \
	rc=0; $(UV) run pytest --durations=25 $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here" >&2; exit 1; fi; \
	exit $$rc

lint: deps
	$(UV) run ruff format --check .
	$(UV) run ruff check .
	$(UV) run mypy
	$(UV) run lint-imports
	$(UV) run hadolint --config .hadolint.yaml Dockerfile.api Dockerfile.worker images/*/Containerfile
	$(MAKE) --no-print-directory docs

docs:  ## the docs site into site/ (git-ignored); --strict fails on a dead link or a page not in nav
	$(UV) run mkdocs build --strict --quiet

# docs-refs also writes charts/pdfqueue/values.schema.json and the chart values table from the
# annotations of values.yaml (pdfqueue_dev.chartschema).
docs-refs: deps  ## the generated reference pages of docs/; tests/unit/test_generated_docs.py checks them
	$(UV) run python -m pdfqueue_dev.refdocs
	$(UV) run python -m pdfqueue_dev.chartschema

# exec: make passes a SIGTERM on to its recipe's process alone, which is then uv (uv passes it
# on to the demo), not a shell that would die of it and leave the demo running. Ctrl-C reaches
# make, uv and the demo at once (one process group); only the demo acts on it.
demo: deps
	export $(DEMO_PORTS); \
	bash tools/services.sh start $(DEMO_STATE) --no-s3; \
	eval "$$(bash tools/services.sh env $(DEMO_STATE))"; \
	export PDFQUEUE_STORAGE_URL=file://$(CURDIR)/.pdfqueue/storage; \
	exec $(UV) run pdfqueue demo $(DEMO_ARGS)

demo-stop:  ## the demo's Redis and PostgreSQL, which outlive it for the next run
	export $(DEMO_PORTS); bash tools/services.sh stop $(DEMO_STATE)

# What the bench's corpora need beyond the Python environment: LibreOffice (headless Writer,
# fonts, hyphenation patterns) and Ghostscript write the libreoffice and ghostscript corpora.
bench-deps:
	bash tools/services.sh libreoffice >/dev/null
	bash tools/services.sh ghostscript >/dev/null

bench: deps tools bench-deps
	export $(BENCH_PORTS) PDFQUEUE_S3_DATA=$(BENCH_S3_DATA); \
	bash tools/services.sh start $(BENCH_STATE); \
	eval "$$(bash tools/services.sh env $(BENCH_STATE))"; \
	rc=0; $(UV) run python -m bench.$(BENCH) $(BENCH_ARGS) || rc=$$?; \
	bash tools/services.sh stop $(BENCH_STATE); \
	exit $$rc

clean: services-stop demo-stop
	export $(BENCH_PORTS); bash tools/services.sh stop $(BENCH_STATE)
	rm -rf .state .state-bench .pdfqueue $(BENCH_SHM)
