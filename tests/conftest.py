"""Shared fixtures: the tool-arithmetic task's tokenizer, tiny models and a briefly warm-started policy."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import settings

from course_lib.models import build_model
from course_lib.rl.warm_start import SFTConfig, demonstration_examples, supervised_warm_start
from course_lib.tasks import tool_arithmetic

# Tiny models: thread wake-ups cost more than the matrix work, and a second test process or a
# busy machine makes two intra-op threads tens of times slower.
torch.set_num_threads(1)

# Property tests draw the same examples on every run (CI stays deterministic); a failure found by a random search is
# kept as an `@example` beside its test.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(autouse=True)
def _threads_restored():
    """Every test starts on the thread count set above: a chapter command sets the course's count for its process
    (`course_config.use_threads`), and a test that calls one would otherwise change the arithmetic, and with it the
    sampled batches, of every test after it (chapter 00's gpu-preset test lost its reward variance that way)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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
    texts = tool_arithmetic.demonstration_texts(200, 0, tool_share=0.5, direct_correct=0.3)
    return demonstration_examples(tokenizer, texts)


@pytest.fixture(scope="session")
def _warm_model(tokenizer):
    torch.manual_seed(0)
    model = build_model(tokenizer, "tiny", max_positions=128, **TINY)
    examples = demonstration_examples(tokenizer, tool_arithmetic.demonstration_texts(200, 0, 0.5, 0.3))
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
# `make test-fast` (`pytest -m "not slow" tests`) leaves out every test marked `@pytest.mark.slow` (or a file's
# `pytestmark`), where it stands: the golden run, the gpu preset, the benchmarks, the real model and every test that
# runs a chapter's seed or a command end to end. Notebooks (nbval items) cannot carry a mark, so they get it here.
@pytest.fixture(scope="session")
def llama_standin(tmp_path_factory) -> str:
    """A two-block Llama stand-in with a BPE tokenizer and ChatML, in SmolLM2's place (built once per session)."""
    from course_lib.course import standins

    return str(standins.build_standin(tmp_path_factory.mktemp("standin") / "llama", "llama", max_positions=1024))


@pytest.fixture(scope="session")
def tiny_warm_start():
    """A real-model warm start shrunk to seconds: 16 demonstrations, 2 steps of 4, LoRA on one block, 4 held-out
    problems (`tasks.real_model.WarmStart`)."""
    from course_lib.tasks import real_model

    return real_model.WarmStart(
        demonstrations=16, sft=SFTConfig(steps=2, batch_size=4, learning_rate=1e-3, autocast="bf16"), top_layers=1,
        eval_tasks=4,
    )  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
