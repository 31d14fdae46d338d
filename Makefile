# Two entry points (see README): `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench bench-lag clean

$(STAMP): pyproject.toml setup.py common/_native.c scripts/ensure-etcd.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	bash scripts/ensure-etcd.sh
	touch $(STAMP)

# The console's browser tests drive Debian's chromium (never a browser download): installed
# here when missing and this is root with apt-get; else those tests skip, saying why.
CHROMIUM_STAMP := $(VENV)/.chromium
$(CHROMIUM_STAMP): $(STAMP)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	       --no-install-recommends chromium >/dev/null; } ; } \
	  || echo "chromium not installed: the console's browser tests will skip"
	touch $@

run: $(STAMP)
	$(PY) -m mqclient.demo

# The store's tests run twice: with its C fast paths and, with STORE_NATIVE=0, without them.
test: $(STAMP) $(CHROMIUM_STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q
	STORE_NATIVE=0 $(PY) -m pytest -q -p no:cacheprovider tests/store

# Every test that starts no container, JVM or chaos run, several at a time: the loop for a
# change in progress. `make test` is what CI runs.
TEST_WORKERS ?= 6
test-fast: $(STAMP) $(CHROMIUM_STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "not docker and not spark and not slow"

bench: $(STAMP)
	$(PY) -m bench.store

# The lag job on 6.4 M synthetic snapshot rows against a floor job, and one collector snapshot.
bench-lag: $(STAMP)
	$(PY) -m bench.lag

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build common/_native*.so
