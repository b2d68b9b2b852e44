# WeirMQ developer commands. Everything runs from a fresh clone with only python3 (>= 3.11):
# `make run` builds .venv with what the broker needs and starts it; `make venv` (and every
# target that tests, checks or measures) installs the project with its test extras too.

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Reinstall when pyproject.toml is newer than these (dependencies or entry points changed):
# one for the broker alone (make run), one for everything the tests need.
RUN_STAMP := $(VENV)/.installed-run-stamp
INSTALL_STAMP := $(VENV)/.installed-stamp
# Debian packages the tests need; installed by `make system-deps`. kcat is a Kafka client
# under test; rabbitmq-server is the reference AMQP 0-9-1 server the differential tests and
# the `amqp` benchmark start as private nodes on free ports (weirmq.bench.rabbitmq);
# chromium (with a font for its screenshots) is the browser the web console's tests drive.
DEB_PACKAGES ?= kcat rabbitmq-server chromium fonts-dejavu-core
# Spark (the weirmq.spark tests, make spark-demo) needs a Java runtime, 17 or newer; this
# package is installed when no `java` is on the PATH.
JAVA_PACKAGE ?= openjdk-17-jre-headless
PYTEST_ARGS ?=
BENCH_ARGS ?=
# Directories ruff checks; bench/ and examples/ may not exist in every checkout.
LINT_DIRS := $(wildcard src tests bench examples)

.PHONY: venv run-venv system-deps test test-fast check run bench bench-quick bench-storage bench-rebalance bench-spark spark-demo clean

venv: $(INSTALL_STAMP)

run-venv: $(RUN_STAMP)

$(VENV_PYTHON):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "WeirMQ needs Python >= 3.11; $(PYTHON) is older (set PYTHON=...)" >&2; exit 1; }
	@# Debian's python3 ships without ensurepip until python3-venv is installed.
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null \
		|| $(MAKE) --no-print-directory system-deps DEB_PACKAGES=python3-venv
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }

$(INSTALL_STAMP): pyproject.toml | $(VENV_PYTHON)
	@echo "make: installing WeirMQ with its test, Spark and benchmark extras into $(VENV)" \
		"(the first time: about 1 GB, a few minutes)"
	$(VENV_PYTHON) -m pip install --quiet --progress-bar off -e '.[test]'
	@touch $@ $(RUN_STAMP)

# The broker and its commands only: no Spark, no test tools (see README, "Two commands").
$(RUN_STAMP): pyproject.toml | $(VENV_PYTHON)
	@echo "make run: installing WeirMQ and what the broker needs into $(VENV)" \
		"(the first time: about 100 MB, under a minute)"
	$(VENV_PYTHON) -m pip install --quiet --progress-bar off -e .
	@touch $@

# Installs only what is missing, and only where it can (root with apt-get); anywhere else
# it says what is missing and carries on, so tests needing those tools will skip or fail.
# While it installs, service starts are refused through Debian's policy-rc.d (unless the
# machine already has one, as container images do): rabbitmq-server's postinst would
# otherwise start a system node holding 5672, and Erlang's epmd on 4369, which nothing
# here uses. On a systemd machine the units stay enabled for the next boot.
system-deps:
	@missing=""; \
	for pkg in $(DEB_PACKAGES); do \
		dpkg -s "$$pkg" 2>/dev/null | grep -q '^Status: install ok installed' \
			|| missing="$$missing $$pkg"; \
	done; \
	command -v java >/dev/null 2>&1 || missing="$$missing $(JAVA_PACKAGE)"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "system-deps: no apt-get here; install these yourself:$$missing" >&2; exit 0; \
	fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "system-deps: not root; skipping install of:$$missing" >&2; exit 0; \
	fi; \
	echo "system-deps: installing$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	policy=/usr/sbin/policy-rc.d; \
	if [ ! -e "$$policy" ]; then \
		trap 'rm -f "$$policy"' EXIT INT TERM; \
		printf '#!/bin/sh\nexit 101\n' > "$$policy" && chmod 755 "$$policy"; \
	fi; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing

# Every test, integration, Spark and slow ones included (CI runs this). pyproject's addopts
# hold plain `pytest` to the fast tier with -m; a later `-m ""` replaces it and selects all.
test: venv system-deps
	$(VENV_PYTHON) -m pytest -q -m "" $(PYTEST_ARGS)

# The fast tier only, what plain `pytest` runs: no broker processes, real clients, Spark or
# slow tests, so it needs neither kcat nor Java.
test-fast: venv
	$(VENV_PYTHON) -m pytest -q $(PYTEST_ARGS)

# Runs every checker, then fails if any of them failed.
check: venv
	@status=0; \
	echo "== ruff check $(LINT_DIRS)"; $(VENV)/bin/ruff check $(LINT_DIRS) || status=1; \
	echo "== mypy"; $(VENV)/bin/mypy || status=1; \
	echo "== import rules"; $(VENV_PYTHON) -m pytest -q tests/test_import_rules.py || status=1; \
	exit $$status

# Says where the CLI is before the broker's own lines; Ctrl-C stops the broker.
run: $(RUN_STAMP)
	@echo "make run: starting the broker (Ctrl-C stops it). Its command line is" \
		"$(VENV)/bin/weirmq; in another terminal, '. $(VENV)/bin/activate' puts weirmq on PATH."
	@exec $(VENV)/bin/weirmq serve

# The benchmark suite (docs/benchmarks.md): every workload, ~7 minutes; results in
# bench/results/ (gitignored). BENCH_ARGS adds options, e.g. BENCH_ARGS="--workload latency".
bench: venv
	$(VENV)/bin/weirmq bench --json bench/results/bench.json --plot bench/results/bench.png $(BENCH_ARGS)

# The reduced set CI runs (under two minutes).
bench-quick: venv
	$(VENV)/bin/weirmq bench --quick --json bench/results/bench-quick.json \
		--plot bench/results/bench-quick.png $(BENCH_ARGS)

bench-storage: venv
	$(VENV_PYTHON) -m bench.storage $(BENCH_ARGS)

bench-rebalance: venv
	$(VENV_PYTHON) -m weirmq.bench.rebalance $(BENCH_ARGS)

# Spark connector throughput (rows/s) on local[2]: batch read, streaming read, write.
bench-spark: venv system-deps
	$(VENV_PYTHON) bench/spark.py $(BENCH_ARGS)

# The order-events example (examples/order_pipeline.py) end to end on local[2].
spark-demo: venv system-deps
	$(VENV_PYTHON) examples/order_pipeline.py

# Leaves weirmq-data/ and bench/results/ alone: those are data, not build output.
clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
