# Set-up is part of every target: a fresh machine needs only python3.11 and network access
# to the package registries.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: demo test gpu-test bench clean setup

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU build of torch (a file on the development machines; PyPI elsewhere).
	$(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)" || \
	  $(BIN)/python -m pip install -q --index-url https://download.pytorch.org/whl/cpu "torch==$(TORCH_VERSION)"
	$(BIN)/python -m pip install -q -e ".[gpu,llm,dev]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/klineage demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not gpu" -p no:cacheprovider; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# On the GPU machine: uses the system python (which has torch+triton for CUDA).
gpu-test:
	python3 -m pytest -q -m gpu -p no:cacheprovider; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no gpu tests collected"; exit 0; fi; exit $$rc

clean:
	rm -rf $(VENV) build *.egg-info
