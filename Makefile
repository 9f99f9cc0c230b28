# Set-up is part of every target: a fresh machine needs only python3.11 and network access
# to the package registries.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: demo test gpu-test bench clean setup sysdeps

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU build of torch: from the configured package index, else from the PyTorch CPU index.
	$(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)" || \
	  $(BIN)/python -m pip install -q --index-url https://download.pytorch.org/whl/cpu "torch==$(TORCH_VERSION)"
	$(BIN)/python -m pip install -q -e ".[gpu,llm,ray,dev,kernelbench]"
	touch $(STAMP)

setup: $(STAMP)

# Headless Chromium (report rendering test) and Graphviz (DAG pictures), where apt is usable.
# Best effort: without them the report falls back to its built-in layout and the browser test skips.
sysdeps:
	@if ! command -v chromium >/dev/null || ! command -v dot >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz >/dev/null) \
	      || echo "warning: could not install chromium/graphviz"; \
	  else echo "note: chromium/graphviz not installed (need root + apt)"; fi; fi

demo: $(STAMP)
	$(BIN)/klineage demo

# The suite runs in TEST_JOBS processes (pytest-xdist), one test file per process at a time so
# that a file's module-scoped fixtures (induced lineages) are built once. Files are handed out
# in collection order, where files with a test marked slow come first (tests/conftest.py): the
# long ones start early instead of last. TEST_JOBS=0 runs it in this process. The log ends with
# the slowest tests (where the suite's time goes).
TEST_JOBS ?= 2
# Threads of each process's torch (OpenMP) and BLAS pools. The test processes, and the gate
# workers they start, share the machine's cores: pools of several threads each split small
# products and spin between them against one another (a tile's NumPy product took 25 ms
# instead of 0.05 ms beside torch's spinning pool on two busy cores).
TEST_THREADS ?= 1

test: $(STAMP) sysdeps
	OMP_NUM_THREADS=$(TEST_THREADS) OPENBLAS_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS) \
	  $(BIN)/python -m pytest -q -m "not gpu" -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile \
	  --no-loadscope-reorder --durations=25; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# On the GPU machine: uses the system python (which has torch+triton for CUDA).
gpu-test:
	python3 -m pytest -v -m gpu -p no:cacheprovider tests/; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no gpu tests collected"; exit 0; fi; exit $$rc

clean:
	rm -rf $(VENV) build *.egg-info
