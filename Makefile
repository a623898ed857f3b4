# The course's commands. `make lab` and `make test` create the environment when it is missing.
#   make lab        set up, then open the course in JupyterLab
#   make test       set up, then lint and run every test (unit, notebooks, grader)
#   make hub-env    on a JupyterHub, the instructor's environment, here: the course, the instructors'
#                   tools, nbgrader and jupyterhub-singleuser (JUPYTERHUB_SPEC=jupyterhub==6.1.1 names the
#                   hub's version); keep this folder where only the instructor reads it
#   make hub-learners-env   on a JupyterHub, as root, the learners' environment: the learners' copy,
#                   built here and installed in HUB_LEARNERS (/opt/llm-efficiency-course) with its
#                   .venv, readable by every user, with nbgrader and jupyterhub-singleuser
#   make lint       ruff: the linter and the formatter's check, as `make test` runs them
#   make format     ruff: fix what can be fixed, then format the tree
#   make release    rebuild the learners' notebooks in notebooks/ from solutions/
#   make learners-copy   the learners' copy, for credit: dist/learners-copy/ and its zip (the
#                   notebooks, the package and reference numbers; no solutions, hidden checks or answers)
#   make site       the course's site in dist/site/, built offline from the learners' copy: each chapter
#                   executed blank as a page, the guides of tools/site/, search (tools/build_site.py)
#   make chapter SLUG=pruning N=10   write a new chapter's files from tools/chapter_template/
#   make autograde  grade every notebook under submissions/ into feedback/: gradebook, Canvas CSV,
#                   HTML feedback, similar answers (ROSTER=canvas-export.csv names learners)
#   make reference  regenerate data/reference/*.json
#   make bench      measurements, as ratios against a baseline and the physical bound, a
#                   generated class of BENCH_SUBMISSIONS graded in one run and in 4 shards, and the
#                   last `make test`'s time from its own report (test-artifacts/junit.xml)
#   make gpu-check  on a CUDA machine: the GPU tests, every chapter on the GPU, the Triton kernel timed
#   make colab-check   the course in a stand-in for Colab's CPU runtime: Python 3.13 (COLAB_PYTHON=...
#                   names one) with Colab's packages (data/colab/pip-freeze.txt), the notebooks' Colab
#                   cell, every chapter, its checks and its widgets; a table in data/colab_check.json
#   make model      train the course's target and draft models from scratch (under an hour, 2 cores)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
# The set-up steps are tools/setup_course.py's (Windows, without make, runs the same script): torch
# first, the build that suits the machine (tools/install_torch.py), before anything else can pull
# PyPI's multi-gigabyte CUDA build. TORCH_SPEC names the version, TORCH_BUILD=cpu|cuda overrides the
# detection, TORCH_INDEX=URL installs from that index; MODEL_SPEC and COMPRESSOR_SPEC name chapter 8's
# model and llmcompressor; left empty, each takes the script's default.
TORCH_SPEC ?=
TORCH_INDEX ?=
TORCH_BUILD ?=
MODEL_SPEC ?=
COMPRESSOR_SPEC ?=
JUPYTERHUB_SPEC ?=
HUB_LEARNERS ?=
export VENV TORCH_SPEC TORCH_INDEX TORCH_BUILD MODEL_SPEC COMPRESSOR_SPEC JUPYTERHUB_SPEC HUB_LEARNERS
SETUP = $(PYTHON) tools/setup_course.py
NEEDS_PYTHON = @command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON) on PATH (or run: make PYTHON=python3 ...)"; exit 1; }
SUBMISSIONS ?= submissions
FEEDBACK ?= feedback
ROSTER ?=
SEED ?=
BENCH_SUBMISSIONS ?= 60
PORT ?= 8888

.PHONY: lab test hub-env hub-learners-env lint format release learners-copy student-release site chapter autograde reference bench gpu-check colab-check model clean

$(BIN)/.installed-base: pyproject.toml
	$(NEEDS_PYTHON)
	$(SETUP) install

$(BIN)/.installed-dev: $(BIN)/.installed-base
	$(SETUP) install --dev

lab:
	$(NEEDS_PYTHON)
	$(SETUP) lab --port $(PORT)

test:
	$(NEEDS_PYTHON)
	$(SETUP) test

hub-env:
	$(NEEDS_PYTHON)
	$(SETUP) install --dev --hub

hub-learners-env:
	$(NEEDS_PYTHON)
	$(SETUP) hub-learners

lint: $(BIN)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

release: $(BIN)/.installed-dev
	$(BIN)/python -m autograder.release

learners-copy: $(BIN)/.installed-dev
	$(BIN)/python -m autograder.learners_copy

student-release:
	@echo "make student-release is now called make learners-copy (dist/learners-copy/): running that"
	@$(MAKE) --no-print-directory learners-copy

site: learners-copy
	$(BIN)/python tools/build_site.py

chapter: $(BIN)/.installed-base
	@test -n "$(SLUG)" -a -n "$(N)" || { echo "usage: make chapter SLUG=pruning N=10"; exit 2; }
	$(BIN)/python tools/new_chapter.py --slug "$(SLUG)" --number "$(N)"

autograde: $(BIN)/.installed-dev
	@test -d $(SUBMISSIONS) || { echo "put submissions in $(SUBMISSIONS)/LEARNER/NN_chapter.ipynb (or set SUBMISSIONS=folder)"; exit 1; }
	$(BIN)/python -m autograder grade-folder $(SUBMISSIONS) --out $(FEEDBACK) \
	  $(if $(ROSTER),--roster $(ROSTER)) $(if $(SEED),--seed $(SEED))

reference: $(BIN)/.installed-base
	$(BIN)/python -m course.reference

bench: $(BIN)/.installed-dev
	$(BIN)/python tools/benchmarks.py --submissions $(BENCH_SUBMISSIONS)
	$(BIN)/python tools/suite_time.py --record

gpu-check: $(BIN)/.installed-dev
	$(BIN)/python tools/gpu_check.py

colab-check: $(BIN)/.installed-dev
	$(BIN)/python tools/colab_check.py $(if $(CHAPTERS),--chapters $(CHAPTERS))

model: $(BIN)/.installed-base
	$(BIN)/python -m course.train

clean:
	rm -rf $(VENV) $(FEEDBACK) .pytest_cache
