# Waitline: `make demo` and `make test` set up everything they need from a fresh clone.
SHELL := /bin/bash
VENV := .venv/bin
export WAITLINE_STATE_DIR ?= $(CURDIR)/.waitline
export WAITLINE_CACHE_DIR ?= $(CURDIR)/.cache
# uv where `make setup` installs it when the machine has none on the PATH (a virtualenv of its own
# under the cache): the tests build the wheel and the images' build stage with it.
export PATH := $(PATH):$(WAITLINE_CACHE_DIR)/uv/bin

.PHONY: setup setup-peers test test-extended test-unit simulate mutants lint demo bench bench-guard chaos chaos-cluster up down status clean

setup:
	@bash compose/local/setup.sh

# setup, and the Cassandra server the peers benchmark's prosody-events keeps its state in
# (`waitline dev up --cassandra`); make test runs its peer test too.
setup-peers:
	@WAITLINE_SETUP_PEERS=1 bash compose/local/setup.sh

# Two pytest-xdist workers: the Kafka/PostgreSQL tests in one, the Spark tests in the other, each
# on a stack of its own (tests/conftest.py groups them); the service-free tests fill both.
TEST_WORKERS ?= 2
test: setup-peers
	$(VENV)/pytest -n $(TEST_WORKERS) --dist loadgroup

# What make test leaves out for time (marker `extended`: the cluster's fault scenarios, mTLS
# variants, the broker controls, a second cluster from nothing), with the same two workers.
test-extended: setup
	$(VENV)/pytest -n $(TEST_WORKERS) --dist loadgroup --extended -m extended

test-unit: setup
	$(VENV)/pytest -m unit

# The engine on the simulated Kafka over SEEDS seeds (from FIRST); stops at the first seed that
# breaks an invariant and prints the command that replays it.
SEEDS ?= 5000
FIRST ?= 0
simulate: setup
	$(VENV)/python tests/simulation/sweep.py --seeds $(SEEDS) --first $(FIRST)

lint: setup
	$(VENV)/ruff check .
	$(VENV)/mypy

up: setup
	$(VENV)/waitline dev up

down:
	@[ -x $(VENV)/waitline ] && $(VENV)/waitline dev down || true

status:
	$(VENV)/waitline dev status

demo: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest demo

# The fault suite on the single broker, then the broker faults on the secured cluster.
chaos: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest chaos --scale full --out docs/RELIABILITY.md
	$(MAKE) chaos-cluster

# The broker faults on the secured three-node cluster (docs/RELIABILITY.md, "Cluster"): the test
# session starts its own cluster; each scenario prints its row of the table (~50 min).
chaos-cluster: setup
	$(VENV)/pytest --extended -m chaos -s tests/integration/test_cluster_faults.py

# The cost guard's base (make bench ends with it; make bench-guard runs it alone): a revision;
# empty: the newest release tag, else the one loadtest/bench/guard.py records.
BENCH_BASE ?=
bench: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest bench --out docs/BENCHMARKS.md $(if $(BENCH_BASE),--base $(BENCH_BASE))

bench-guard: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest guard --out docs/BENCHMARKS.md $(if $(BENCH_BASE),--base $(BENCH_BASE))

clean: down
	rm -rf .waitline .pytest_cache .mypy_cache .ruff_cache

# The engine's mutants (tests/simulation/mutants.py): each runs the sweep in a copy of the tree
# and must be stopped within MUTANT_SEEDS seeds; MUTANT_JOBS at once (the machine is shared).
MUTANT_SEEDS ?= 1000
MUTANT_JOBS ?= 2
mutants: setup
	$(VENV)/python tests/simulation/mutants.py --seeds $(MUTANT_SEEDS) --jobs $(MUTANT_JOBS)
