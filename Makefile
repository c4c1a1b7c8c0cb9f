# dnnbind: see README.md. Two commands on a fresh machine: `make setup && make generate` (main job),
# `make test` (the tests; CI runs exactly this through .ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LIBS ?= cudnn miopen
CUDNN_WHEEL_PIN := $(shell $(PYTHON) -c "import json; p=json.load(open('generator/headers.json'))['cudnn']['packages'][0]; print(p['name']+'=='+p['version'])")

.PHONY: setup venv headers generate check-generated report test test-all test-versions bench gpu-check demo clean

setup: venv headers  ## virtual environment, pinned dependencies, vendor headers and the cuDNN library
	$(PY) -m pip install --quiet --no-deps --find-links .cache/wheels "$(CUDNN_WHEEL_PIN)"
	@$(PY) -c "import dnnbind.gen.cudnn as c; print('cuDNN library:', c.library_path(), c.library_version())"

venv:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,torch]"

headers:  ## download the pinned vendor headers into .cache/ (git-ignored)
	$(PY) -m generator headers $(LIBS)

generate:  ## regenerate src/dnnbind/gen/*.py, print the report and what changed
	$(PY) -m generator generate $(LIBS)

check-generated:  ## fail when a committed generated module differs from a fresh generation
	$(PY) -m generator check $(LIBS)

report:
	$(PY) -m generator report $(LIBS)

test: check-generated  ## the CPU test suite (no GPU needed)
	$(PY) -m pytest -q -m "not gpu and not slow"

test-all: check-generated
	$(PY) -m pytest -q -m "not gpu"

test-versions:  ## slow: cuDNN 8.9/9.1 and Debian experimental's MIOpen vs the pins (first run downloads ~1.7 GB into .cache/)
	$(PY) -m pytest -q -m slow tests/generator/test_versions.py tests/generator/test_header_moved.py

demo:  ## train a small CNN and LSTM with dnnbind's ops: GPU when CuPy + a device are there, else CPU
	$(PY) demo/train.py

bench:  ## benchmarks, printed as ratios against references measured in the same run
	$(PY) bench/run.py

gpu-check:  ## GPU tests (pytest -m gpu) and GPU benchmarks on the machine's python3; logs in $OUT or ./gpu-results
	PYTHONPATH=src $(PYTHON) bench/gpu_check.py

clean:
	rm -rf .cache $(VENV) build *.egg-info
