# Two commands for a fresh machine with Python 3.11:
#   make course   install what is missing, execute every notebook (cpu preset) into build/
#   make test     install what is missing, run the unit tests and pytest --nbval on the notebooks
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; on a machine with a GPU, override: make course TORCH_SPEC=torch
TORCH_SPEC ?= torch==2.13.0

.PHONY: course test lab install

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev,trl]"
	touch $@

install: $(VENV)/.installed

course: $(VENV)/.installed
	COURSE_SCALE=$${COURSE_SCALE:-cpu} $(PY) -m course_lib.notebooks run --out build

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg tests notebooks

lab: $(VENV)/.installed
	$(VENV)/bin/jupyter lab notebooks/
