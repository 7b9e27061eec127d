"""Shared fixtures: the chapter-00 tokenizer, tiny models and a briefly warm-started policy."""

from __future__ import annotations

import copy

import pytest
import torch

from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.models import build_model
from course_lib.rl.warm_start import SFTConfig, demonstration_examples, supervised_warm_start
from course_lib.tasks import tool_arithmetic

# Tiny models: thread wake-ups cost more than the matrix work, and a second test process or a
# busy machine makes two intra-op threads tens of times slower.
torch.set_num_threads(1)

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="session")
def tokenizer():
    """The chapter-00 word-level tokenizer (tags plus every integer up to 1998)."""
    return tool_arithmetic.word_tokenizer()


@pytest.fixture
def make_model(tokenizer):
    """Factory for a freshly initialised tiny model, seeded for reproducibility."""

    def make(seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return build_model(tokenizer, "tiny", max_positions=128, **{**TINY, **overrides}).eval()

    return make


@pytest.fixture
def demonstrations(tokenizer):
    """A few hundred demonstration episodes as (token_ids, loss_mask)."""
    return demonstration_examples(tokenizer, ch00.demonstration_texts(200, 0, tool_share=0.5, direct_correct=0.3))


@pytest.fixture(scope="session")
def _warm_model(tokenizer):
    torch.manual_seed(0)
    model = build_model(tokenizer, "tiny", max_positions=128, **TINY)
    examples = demonstration_examples(tokenizer, ch00.demonstration_texts(200, 0, 0.5, 0.3))
    config = SFTConfig(steps=40, batch_size=16, learning_rate=3e-2, warmup_steps=5)
    supervised_warm_start(model, examples, tokenizer.pad_token_id, config, torch.Generator().manual_seed(0))
    return model.eval()


@pytest.fixture
def warm_model(_warm_model):
    """A copy of a tiny model warm-started on demonstrations: it calls the tool and answers, so
    rollouts mix tool calls, answers and invalid actions and groups have reward variance."""
    return copy.deepcopy(_warm_model)


@pytest.fixture
def number_line_base(tmp_path):
    """A random-init micro base for the template environment (`number_line`), saved in a folder: what a fork of a
    chapter onto an environment of its own loads as its `base`. Returns the folder as a string."""
    from course_lib import models
    from course_lib.envs.template import vocabulary
    from course_lib.tokenizer import build_tokenizer

    words = build_tokenizer(vocabulary())
    models.save(build_model(words, "micro", max_positions=96), words, tmp_path / "base")
    return str(tmp_path / "base")


# The slow marker ------------------------------------------------------------------------------------------------
# `make test-fast` (`pytest -m "not slow" tests`) leaves these out: the notebooks (nbval), the golden run, the gpu
# preset, the benchmarks, the real model and every test that runs a chapter's seed or a command end to end. Each
# entry: the file (None: any), a piece of the test's name (None: every test of the file), what makes it slow.
SLOW = (
    ("test_golden.py", None, "the golden run: every chapter's base, two GRPO iterations, chapter 05's LoRA arms"),
    ("test_gpu_preset.py", None, "chapters run as commands under the gpu preset"),
    ("test_bench.py", None, "the benchmarks time real rollouts and updates"),
    ("test_real_model.py", None, "SmolLM2: a GRPO iteration of chapter 00 on 135M parameters"),
    ("test_extending.py", "every_recipe_runs", "every recipe of docs/extending.md, trained"),
    ("test_audit.py", "committed_evaluations", "every chapter's held-out splits against its training data"),
    ("test_exercises.py", "pytest_exercises_fails", "pytest on the exercises in a subprocess, stubs and library"),
    ("test_scaffold.py", "its_own_test_passes", "a scaffolded chapter's test run in a subprocess"),
    ("test_checkpoint.py", "runs_end_to_end", "a chapter end to end on a stand-in checkpoint"),
    ("test_trl.py", "temporary_folder", "TRL's trainer in a subprocess"),
    ("test_ch11_aepo.py", "gradient_check_is_exact_on_real_policies", "the chapter's gradient check on its bases"),
    (None, "short_run_measures_every_claim_number", "a chapter's seed, shortened"),
    (None, "gpu_preset_runs_on_cpu", "a chapter under its gpu preset, a few steps"),
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":  # nbval: a notebook's cells, run
            item.add_marker(pytest.mark.slow)
        elif any(file in (None, item.path.name) and (piece is None or piece in item.name) for file, piece, _ in SLOW):
            item.add_marker(pytest.mark.slow)
