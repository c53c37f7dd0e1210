# Waitline: `make demo` and `make test` set up everything they need from a fresh clone.
SHELL := /bin/bash
VENV := .venv/bin
export WAITLINE_STATE_DIR ?= $(CURDIR)/.waitline
export WAITLINE_CACHE_DIR ?= $(CURDIR)/.cache

.PHONY: setup test test-unit lint demo bench chaos up down status clean

setup:
	@bash compose/local/setup.sh

test: setup
	$(VENV)/pytest

test-unit: setup
	$(VENV)/pytest -m unit

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

chaos: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest chaos --scale full --out docs/RELIABILITY.md

bench: setup
	$(VENV)/waitline dev up
	$(VENV)/waitline loadtest bench --out docs/BENCHMARKS.md

clean: down
	rm -rf .waitline .pytest_cache .mypy_cache .ruff_cache
