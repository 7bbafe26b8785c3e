# `make demo` and `make test` install whatever is missing first (see tools/setup.sh).
SHELL := /bin/bash
VENV ?= .venv
HEPIX_CACHE ?= $(HOME)/.cache/hepix
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hepix-setup
PYTEST_ARGS ?=
# Test files run on this many processes, each file whole in one (a Spark job's time is partly waiting:
# start-up, py4j, small stages, clusters coming up; on 2 cores, two processes left 11% of the CPU idle and
# three leave 2%).  PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 3

.PHONY: setup demo test bench report clean distclean

setup: $(STAMP)

$(STAMP): pyproject.toml tools/setup.sh tools/build_pyfhel.sh tools/patch_pyfhel_sdist.py \
          tools/build_native.sh native/pyproject.toml native/setup.py $(wildcard native/src/*.cpp native/src/*.hpp) \
          tools/build_tfhe.sh native/tfhe/Cargo.toml native/tfhe/Cargo.lock native/tfhe/pyproject.toml \
          $(wildcard native/tfhe/src/*.rs) tools/setup_airflow.sh conf/airflow/requirements.txt
	tools/setup.sh $(VENV) $(HEPIX_CACHE)
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/hepix demo

# The test run's processes (pytest's, Spark's Python daemons and workers, the jobs the tests start) import
# this checkout's modules hundreds of times: their bytecode, and pytest's rewritten test modules, are cached
# in __pycache__ (ignored by git) even where PYTHONDONTWRITEBYTECODE asks otherwise.
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/hepix bench --out bench-out

report: $(STAMP)
	$(VENV)/bin/hepix report --bench bench-out --out bench-out/report

clean:
	rm -rf bench-out demo-out .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
