"""Warm-started adapters kept on disk (`rl.adapter_cache`): a kept adapter is the fitted one, weight for weight, so
a comparison that starts from it measures what a fresh fit would; any change to what the fit depends on changes the
key; a file that does not fit the model is an error, not a silent partial load."""

from __future__ import annotations

import pytest
import torch

from course_lib.rl import adapter_cache
from course_lib.tasks import real_model


@pytest.fixture(autouse=True)
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_ADAPTER_CACHE", str(tmp_path / "adapters"))
    return tmp_path / "adapters"


def trainable(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def test_a_kept_adapter_is_the_fitted_one(tiny_warm_start, llama_standin, cache_folder):
    task = real_model.TASKS["key_door"]
    fitted, _, _, history = real_model.warm_start(task, tiny_warm_start, 3, model=llama_standin, cache="write")
    assert len(list(cache_folder.glob("*.pt"))) == 1
    read, _, _, read_history = real_model.warm_start(task, tiny_warm_start, 3, model=llama_standin, cache="read")
    assert read_history == history
    fitted_weights, read_weights = trainable(fitted), trainable(read)
    assert fitted_weights.keys() == read_weights.keys()
    assert all(torch.equal(fitted_weights[name], read_weights[name]) for name in fitted_weights)
    # The fit moved the adapter: the read one is not just a fresh initialisation.
    fresh = real_model.checkpoint.add_adapter(real_model.checkpoint.load_checkpoint(llama_standin)[0], top_layers=1)
    assert any(not torch.equal(w, trainable(fresh)[n]) for n, w in read_weights.items() if "lora_B" in n)


def test_a_comparison_from_a_kept_warm_start_equals_one_from_a_fresh_fit(tiny_warm_start, llama_standin):
    """The arms' numbers (all but minutes) are the same whether the warm start was fitted or read."""
    rl = {"iterations": 1, "prompts_per_iteration": 2, "group_size": 4, "learning_rate": 1e-3}
    fresh = real_model.paired_arms("gigpo", 1, tiny_warm_start, rl, model=llama_standin, cache="off")
    real_model.warm_start(real_model.TASKS["key_door"], tiny_warm_start, 1, model=llama_standin, cache="write")
    kept = real_model.paired_arms("gigpo", 1, tiny_warm_start, rl, model=llama_standin, cache="read")
    assert {k: v for k, v in kept.items() if "minutes" not in k} == {
        k: v for k, v in fresh.items() if "minutes" not in k
    }


def test_reading_without_a_kept_adapter_fits_and_keeps_one(tiny_warm_start, llama_standin, cache_folder):
    real_model.warm_start(real_model.TASKS["two_hop"], tiny_warm_start, 0, model=llama_standin, cache="read")
    assert len(list(cache_folder.glob("*.pt"))) == 1


def test_the_key_names_what_the_fit_depends_on(llama_standin):
    texts, settings = [("a", "b")], {"steps": 30}
    base = adapter_cache.key(llama_standin, texts, settings, 0, "cpu")
    assert base == adapter_cache.key(llama_standin, list(texts), dict(settings), 0, "cpu")
    changed = [
        adapter_cache.key(llama_standin, [("a", "c")], settings, 0, "cpu"),
        adapter_cache.key(llama_standin, texts, {"steps": 60}, 0, "cpu"),
        adapter_cache.key(llama_standin, texts, settings, 1, "cpu"),
        adapter_cache.key(llama_standin, texts, settings, 0, "cuda"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_the_key_changes_with_the_training_code(llama_standin, monkeypatch, tmp_path):
    before = adapter_cache.key(llama_standin, [], {}, 0, "cpu")
    edited = tmp_path / "edited_training.py"
    edited.write_text("def supervised_warm_start():\n    return 'edited'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import edited_training

    monkeypatch.setattr(adapter_cache, "TRAINING_SOURCES", (*adapter_cache.TRAINING_SOURCES[:-1],
                                                            edited_training.supervised_warm_start))  # fmt: skip
    assert adapter_cache.key(llama_standin, [], {}, 0, "cpu") != before


def test_a_file_that_does_not_fit_the_model_is_an_error(llama_standin):
    model, _ = real_model.checkpoint.load_checkpoint(llama_standin)
    one_block = real_model.checkpoint.add_adapter(model, top_layers=1)
    adapter_cache.save("k", one_block, [{"loss": 1.0}])
    every_block = real_model.checkpoint.add_adapter(real_model.checkpoint.load_checkpoint(llama_standin)[0])
    with pytest.raises(ValueError, match="does not hold this model's adapter"):
        adapter_cache.load("k", every_block)
    assert adapter_cache.load("missing", one_block) is None


def test_an_unknown_cache_mode_is_an_error(tiny_warm_start, llama_standin):
    with pytest.raises(ValueError, match="cache must be"):
        real_model.warm_start(real_model.TASKS["lake"], tiny_warm_start, 0, model=llama_standin, cache="yes")
