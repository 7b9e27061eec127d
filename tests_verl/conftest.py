"""Shared fixtures of the verl tests (run in `.venv-verl` by `make test-verl`): the chapters' bases and episodes, and
verl patched with the course's methods (`patched`, which the method tests use)."""

from __future__ import annotations

import pytest
import torch
from methods_helpers import GROUP, PROMPTS

from course_lib import data
from course_lib.engine.rollout import RolloutEngine
from course_lib.integrations import course_verl, verl_patch


@pytest.fixture(scope="module")
def patched():
    verl_patch.install()


@pytest.fixture(scope="module")
def ch00():
    model, tokenizer = data.load_base("ch00_base", "cpu")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def ch08():
    """Chapter 08's base: ARPO's two-hop search task, the trees' chapter, which chapters 11 (AEPO) and 12 (the MI
    monitor) train on too."""
    model, tokenizer = data.load_base(course_verl.chapter_tasks("08").base, "cpu")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def ch07():
    from course_lib.chapters import ch07_gigpo

    config = ch07_gigpo.preset("cpu")
    model, tokenizer = data.load_base("ch07_base", "cpu")
    return model.eval(), tokenizer, config, ch07_gigpo.EnvFactory("train", config)


@pytest.fixture(scope="module")
def ch07_episodes(ch07):
    from course_lib.engine.step_mode import rollout_steps

    model, tokenizer, config, make = ch07
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    groups = [p for p in range(PROMPTS) for _ in range(GROUP)]
    episodes = rollout_steps(
        engine, [make() for _ in seeds], seeds, groups, torch.Generator().manual_seed(1), 0, "observation"
    )
    return episodes, tokenizer
