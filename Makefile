# Engram: `make run` serves on the embedded default, `make test` runs the whole suite.
# Both create .venv and install everything on first use; nothing is installed by hand.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.DEFAULT_GOAL := help
.PHONY: help install run test lint migrate revision bench soak constraints clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned. Which build comes is pip's sources' choice: PyPI's Linux wheel
	# is the multi-GB CUDA one; TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu (or
	# a find-links holding the CPU wheel, as CI's machine has) gives the CPU build.
	$(BIN)/python -m pip install --quiet torch==2.13.0 \
		$(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	# The tested versions of everything else (constraints.txt), so a dependency's new
	# release cannot break a fresh clone.
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install Engram with its dev tools

run: $(STAMP) ## start the service (embedded PostgreSQL unless ENGRAM_DATABASE_URL is set)
	$(BIN)/python -m app serve

test: $(STAMP) ## run the whole test suite against a throwaway embedded PostgreSQL
	$(BIN)/python -m pytest

lint: $(STAMP) ## ruff and mypy --strict
	$(BIN)/ruff check app tests bench migrations
	$(BIN)/mypy

migrate: $(STAMP) ## upgrade the schema to head and exit
	$(BIN)/python -m app migrate

revision: $(STAMP) ## new migration: make revision m="what it does"
	$(BIN)/alembic revision -m "$(m)"

bench: $(STAMP) ## run every benchmark (prints numbers; takes tens of minutes)
	$(BIN)/python bench/embed.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/sessions.py
	$(BIN)/python bench/consolidate.py
	$(BIN)/python -m bench.retrieval_eval

soak: $(STAMP) ## 20 minutes of mixed traffic: memory, descriptors, backends level off?
	$(BIN)/python bench/soak.py

constraints: $(STAMP) ## rewrite constraints.txt from .venv (after upgrading a dependency there)
	{ sed -n '/^#/p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -v '^#' | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean: ## remove the virtualenv (keeps .engram data)
	rm -rf $(VENV)
