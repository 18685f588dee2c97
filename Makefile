# bertlab: every target bootstraps .venv on first use, so a fresh clone needs only `make`.
SHELL := /bin/bash
PYTHON ?= python3
# The Pythons bertlab admits, the one list: the gate below, tests/test_wheels.py (the pins resolve
# for each) and the Setup page (docs/hooks/pythons.py) read it; tests/test_pythons.py fails when
# pyproject.toml or README.md says otherwise.
PYTHONS := 3.11 3.12 3.13 3.14
# The next Python, and the pins measured to have no wheel for it: the gate names them to a learner
# who has it, and the Setup page says which newer releases have one.
NEXT_PYTHON := 3.15
NEXT_PYTHON_HELD_BY := torch 2.13.0, numpy 2.4.6, scipy 1.17.1, contourpy 1.3.3 and PyYAML 6.0.3
PYTHONS_LISTED := $(shell echo $(PYTHONS) | sed -E 's/ /, /g; s/, ([^,]*)$$/ or \1/')
PICK_PYTHON := bertlab needs Python $(PYTHONS_LISTED): pick one with e.g. make start PYTHON=python3.12 \
  (on macOS, brew install python@3.12 installs one)
# Where torch comes from, when not from PyPI: PyPI's Linux torch is a CUDA build of several GB, and a
# Linux machine without a GPU can take PyTorch's CPU-only index instead (docs/setup.md).
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export TRANSFORMERS_VERBOSITY := error
# mkdocs-material prints an end-of-life banner for mkdocs 1.x on every build
export NO_MKDOCS_2_WARNING := 1

.PHONY: help start lint check test lab site grade doctor exercises bench profile pythons browser clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@# Checked before the venv exists: another Python would fail later, inside pip, and less plainly.
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) was not found. $(PICK_PYTHON)"; exit 1; }
	@found=$$($(PYTHON) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'); \
	  case " $(PYTHONS) " in *" $${found%.*} "*) ;; \
	  *) echo -n "$(PYTHON) is Python $$found. "; \
	    [ "$${found%.*}" != "$(NEXT_PYTHON)" ] || echo -n "Python $(NEXT_PYTHON) is not admitted yet: the \
	course's pins $(NEXT_PYTHON_HELD_BY) have no build for it (the Setup page says more). "; \
	    echo "$(PICK_PYTHON)"; exit 1;; esac
	@echo "==> creating $(VENV) (first run: about 2 minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip==25.3"
	@# torch first and alone, pinned: anything unpinned would pull another build (TORCH_INDEX: see above)
	@# --no-compile, then compileall on every core: pip byte-compiles the set's 17,000 files one by one
	@# (over a minute). They must be compiled here: with PYTHONDONTWRITEBYTECODE set, as on many CI
	@# machines, Python would otherwise compile torch again in every process that imports it. Not the
	@# packages' own test suites (2,500 files under tests/, a seventh of the source): the course
	@# never imports them (a whole `make test` read none of their byte code).
	$(BIN)/pip install --quiet --no-compile "torch==2.13.0"$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet --no-compile -c constraints.txt -e ".[dev]"
	@# One compileall per folder, one per core at a time, largest first: compileall's own -j pays
	@# its process pool about a millisecond a file (a pass with nothing left to compile: 14 s with
	@# -j, 1.6 s in one process); the whole compile took 32-35 s on two cores instead of 44 s.
	purelib=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") && \
	  [ -d "$$purelib" ] || exit 1; \
	  $(BIN)/python -m compileall -qq -l "$$purelib"; \
	  du -s "$$purelib"/*/ | sort -rn | cut -f2 | grep -v '\.dist-info/$$' | \
	  xargs -P "$$($(BIN)/python -c 'import os; print(os.cpu_count() or 1)')" -n 1 \
	  $(BIN)/python -m compileall -qq -x /tests/ || true
	touch $@

start: $(STAMP) site ## set up, build the site, serve it, print your grade table
	@# The site answers while the notebooks are graded; the Progress page shows the grades on refresh.
	@$(BIN)/python -c "import socket; socket.socket().bind(('$(HOST)', $(PORT)))" 2>/dev/null || \
	  { echo "port $(PORT) is in use: try make start PORT=8001"; exit 1; }
	@echo "==> serving the course on http://$(HOST):$(PORT)  (Ctrl-C to stop)"
	@# Warm judges answer `bertlab grade` in about a second while the course is served; they stop with it.
	@# Ctrl-C, a closed terminal or a kill is how the course ends: it stops quietly (make would call the
	@# signal's exit status an error). The server ending on its own is an error, and fails loudly.
	@$(BIN)/python -m http.server $(PORT) --bind $(HOST) --directory $(SITE_DIR) >/dev/null 2>&1 & server=$$!; \
	  trap 'kill $$server 2>/dev/null; wait $$server; $(BIN)/bertlab judges stop >/dev/null 2>&1' EXIT; \
	  trap 'trap "" INT TERM HUP; echo; echo "==> the course stopped"; exit 0' INT TERM HUP; \
	  $(BIN)/bertlab judges start || true; \
	  $(BIN)/bertlab grade || true; \
	  echo "==> the course is served on http://$(HOST):$(PORT)  (Ctrl-C to stop)"; \
	  wait $$server; status=$$?; \
	  echo "==> the course's web server stopped on its own (exit status $$status)"; exit $$(( status ? status : 1 ))

LINTED := src tests bench docs/hooks
lint: $(STAMP) ## lint, format and types (seconds)
	@# Lint and format first (configured in pyproject.toml): a finding fails in seconds, before the long suite
	@# Lessons are read on the site, where a code block holds about 120 columns: lessons/ruff.toml sets 100
	$(BIN)/ruff check $(LINTED) lessons
	$(BIN)/ruff format --check $(LINTED) lessons
	@# Types next (files and settings in pyproject.toml): a None reaching an attribute or a wrong
	@# argument fails here in about 10 s cold, under a second warm, not deep in a grading run
	$(BIN)/mypy

check: lint ## the inner loop: lint, types and every test not marked slow (no notebook graded, no site built)
	BERTLAB_CLAIMS=strict $(BIN)/pytest -n 2 -m "not slow" --durations 10

test: ## run the whole test suite (builds the site, grades notebooks)
	@# Chromium's install (a minute and a half on a fresh machine: 440 Debian packages) runs beside
	@# the Python install and lint, which leave a core idle most of the time.
	@$(MAKE) --no-print-directory -j 2 $(if $(filter output-sync,$(.FEATURES)),--output-sync=target) lint browser
	@# loadgroup: one worker runs all the site tests, so the site is built once
	@# a worker that crashes ends the run at once, named, instead of leaving its group unscheduled
	@# strict claims: a lesson sentence its numbers do not bear out fails the run (a learner's build marks it)
	BERTLAB_CLAIMS=strict $(BIN)/pytest -n 2 --dist loadgroup --max-worker-restart 0 --durations 20

lab: $(STAMP) ## open JupyterLab on the exercises
	$(BIN)/jupyter lab --notebook-dir=exercises --ip=$(HOST) --no-browser $(if $(filter 0,$(shell id -u)),--allow-root)

# The tests build into a directory of their own with `make site SITE_DIR=...`: the same command,
# environment and lesson cache as `make start`.
SITE_DIR ?= site
site: $(STAMP) ## build the docs site into site/ (executes every lesson)
	$(BIN)/mkdocs build --strict --site-dir $(SITE_DIR)

grade: $(STAMP) ## grade every exercise notebook
	$(BIN)/bertlab grade

doctor: $(STAMP) ## check the installation
	$(BIN)/bertlab doctor

exercises: $(STAMP) ## instructors: regenerate exercises/ from solutions/
	$(BIN)/bertlab release

bench: $(STAMP) ## time grading, watch, checks, docs builds and a class against their goals (minutes)
	$(BIN)/python -m bench.feedback --start
	$(BIN)/python -m bench.class_grading --submissions 40
	$(BIN)/python -m bench.cluster_grading --submissions 40
	$(BIN)/python -m bench.attention_projections

profile: $(STAMP) ## where one notebook's grading spends its time: bench/results/profile-grade.svg
	@mkdir -p bench/results
	$(BIN)/py-spy record --subprocesses --rate 100 --output bench/results/profile-grade.svg -- \
	  $(BIN)/bertlab grade 05 --path solutions --no-progress --cold

pythons: ## as root: install, grade the solutions, build the site and make check on each of PYTHONS (15-40 min each)
	@# In a Debian testing chroot made once in the user's cache; results go to the Setup page.
	@# ARGS='--help' says more; ARGS='--pythons 3.14' runs one. It needs no .venv: the standard library only.
	$(if $(filter 0,$(shell id -u)),,sudo) $(PYTHON) -m bench.pythons $(ARGS)

browser: ## install Debian's chromium for the browser test (once)
	@# Elsewhere (macOS, say) there is no apt-get: the browser test is then skipped, with a message.
	@command -v chromium >/dev/null || ! command -v apt-get >/dev/null || { echo "==> installing chromium"; \
	  $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq && \
	  $(if $(filter 0,$(shell id -u)),,sudo) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

clean: ## remove the venv, the built site and caches
	rm -rf $(VENV) site .cache
