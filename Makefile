# dnnbind: see README.md and docs/ (make docs). Two commands on a fresh machine: `make setup && make generate` (main job),
# `make test` (the tests; CI runs exactly this through .ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LIBS ?= cudnn miopen xla_ffi
# the tests run a second time without the compiled parts (DNNBIND_NATIVE=0): those of the code with a
# pure-Python path beside a compiled one (the cpu backend, the wrappers' value check, the plan key)
NO_NATIVE_TESTS ?= tests/highlevel/cpu tests/runtime/test_checks.py tests/highlevel/test_plans.py
# the PyTorch the test suite runs against (the public torch extra allows the tested range)
TORCH_ORACLE ?= torch==2.13.0
# the JAX the test suite runs against (the public jax extra allows the tested range)
JAX_ORACLE ?= jax[cpu]==0.10.2
# the cuDNN library wheel, pinned by version and sha256 in generator/headers.json (pip --require-hashes)
CUDNN_REQUIREMENT := $(shell $(PYTHON) -c "import json; p=json.load(open('generator/headers.json'))['cudnn']['packages'][0]; print(p['name']+'=='+p['version'], *('--hash=sha256:'+h for h in p['sha256'].values()))")

.PHONY: help setup venv headers deviceless generate check-generated report test test-all docs test-versions bench gpu-check demo clean
.DEFAULT_GOAL := help

help:  ## list the targets (a bare `make` does only this)
	@echo "dnnbind: make TARGET, one of (see README.md):"
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

setup: venv headers  ## virtual environment, pinned dependencies, vendor headers and the cuDNN library
	@echo "==> setup 3/4: install the cuDNN library from the checked wheel in .cache/wheels (900 MB in .venv)"
	echo "$(CUDNN_REQUIREMENT)" > .cache/cudnn-requirement.txt
	$(PY) -m pip install --no-deps --no-index --find-links .cache/wheels --require-hashes -r .cache/cudnn-requirement.txt
	@$(PY) -c "import dnnbind.gen.cudnn as c; print('cuDNN library:', c.library_path(), c.library_version())"
	@$(MAKE) --no-print-directory deviceless

deviceless:  ## tests only: libcuda.so.1 (Debian non-free) and cuBLASLt into .cache/deviceless (part of setup)
	@echo "==> setup 4/4: libcuda.so.1 and cuBLASLt for building cuDNN plans without a GPU, tests only (450 MB download)"
	$(PY) -m generator deviceless cudnn

venv:  ## create .venv; install dnnbind (editable) with its dev, docs, torch and jax extras, and dnnbind-native (part of setup)
	@echo "==> setup 1/4: .venv with dnnbind, its dev tools, CPU PyTorch and JAX (1.3 GB in .venv)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar on -e ".[dev,docs,torch,jax]" "$(TORCH_ORACLE)" "$(JAX_ORACLE)"
	@echo "    and dnnbind-native, dnnbind's optional compiled parts (native/; needs a C compiler)"
	$(PY) -m pip install --progress-bar on ./native

headers:  ## download the pinned vendor headers into .cache/ (git-ignored)
	@echo "==> setup 2/4 (make headers): cuDNN wheels from PyPI (520 MB), MIOpen's Debian packages (290 MB, 1.1 GB unpacked)"
	$(PY) -m generator headers $(LIBS)

generate:  ## regenerate src/dnnbind/gen/*.py, print the report and what changed
	$(PY) -m generator generate $(LIBS)

check-generated:  ## fail when a committed generated module differs from a fresh generation
	$(PY) -m generator check $(LIBS)

report:  ## print the generator's counts without writing anything
	$(PY) -m generator report $(LIBS)

test: check-generated  ## the CPU test suite (no GPU needed), with and without the compiled parts
	$(PY) -m pytest -q -m "not gpu and not slow"
	DNNBIND_NATIVE=0 $(PY) -m pytest -q -m "not gpu and not slow" $(NO_NATIVE_TESTS)

test-all: check-generated  ## the CPU test suite including the slow tests, with and without the compiled parts
	$(PY) -m pytest -q -m "not gpu"
	DNNBIND_NATIVE=0 $(PY) -m pytest -q -m "not gpu" $(NO_NATIVE_TESTS)

docs:  ## the documentation site, HTML in build/docs/ (Sphinx; warnings and unresolved names fail it)
	$(PY) -m sphinx -b html -E -W --keep-going -n -q docs build/docs
	@echo "docs: build/docs/index.html"

test-versions:  ## slow: cuDNN 8.9/9.1 and Debian experimental's MIOpen vs the pins (first run downloads ~1.7 GB into .cache/)
	$(PY) -m pytest -q -m slow tests/generator/test_versions.py tests/generator/test_header_moved.py

demo:  ## train a small CNN and LSTM with dnnbind's ops: GPU when CuPy + a device are there, else CPU
	$(PY) demo/train.py

bench:  ## benchmarks, printed as ratios against references measured in the same run
	$(PY) bench/run.py

gpu-check:  ## GPU tests (pytest -m gpu) and GPU benchmarks on the machine's python3; logs in $OUT or ./gpu-results
	PYTHONPATH=src $(PYTHON) bench/gpu_check.py

clean:  ## delete .cache/ and .venv (the next setup downloads everything again)
	rm -rf .cache $(VENV) build *.egg-info native/build
