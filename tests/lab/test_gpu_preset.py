"""The gpu preset's own data: larger bases built once into the gpu data directory, loaded with a label.

Every test but the preset tables runs the real gpu code path under `COURSE_GPU_TINY=1` (the gpu preset shrunk
to a micro model and a few steps, so a CPU builds it in seconds), with `COURSE_GPU_DATA` in a tmp folder. None
may touch the committed cpu data: `_cpu_data_untouched` checks its manifest and listing after each test.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from transformers import AutoConfig

from course_lib import course_config, data, models
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.lab import build
from course_lib.rl import warm_start
from course_lib.tasks import tool_arithmetic

pytestmark = pytest.mark.slow  # the whole file: see its docstring

GPU_COMMAND = "python -m course_lib.data build ch00 --scale gpu"
REPO_DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(autouse=True)
def _cpu_data_untouched():
    """The committed cpu data keeps its manifest and its listing, whatever a test builds."""
    manifest = (REPO_DATA / data.MANIFEST).read_bytes() if (REPO_DATA / data.MANIFEST).exists() else None
    listing = sorted(p.name for p in REPO_DATA.iterdir()) if REPO_DATA.exists() else []
    yield
    assert ((REPO_DATA / data.MANIFEST).read_bytes() if manifest is not None else None) == manifest
    assert (sorted(p.name for p in REPO_DATA.iterdir()) if REPO_DATA.exists() else []) == listing


def _tiny_gpu_env(monkeypatch, root: Path) -> Path:
    """The tiny gpu preset with its data under `root`; returns the directory its manifest lives in."""
    monkeypatch.setenv("COURSE_SCALE", "gpu")
    monkeypatch.setenv("COURSE_GPU_TINY", "1")
    monkeypatch.setenv("COURSE_GPU_DATA", str(root))
    return data.gpu_data_dir()


@pytest.fixture(scope="module")
def auto_built(tmp_path_factory):
    """`load_base("ch00_base")` in an empty gpu directory (it builds chapter 00's gpu data): the root, what it
    printed, the model, and the manifest right after."""
    root = tmp_path_factory.mktemp("gpu")
    with pytest.MonkeyPatch.context() as monkeypatch:
        gpu_dir = _tiny_gpu_env(monkeypatch, root)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            model, _ = data.load_base(ch00.BASE_NAME)
    return {"root": root, "dir": gpu_dir, "printed": out.getvalue(), "model": model,
            "manifest": (gpu_dir / data.MANIFEST).read_text()}  # fmt: skip


def test_gpu_base_is_built_once_into_the_gpu_directory_and_labelled(auto_built, monkeypatch, capsys):
    gpu_dir, printed, model = auto_built["dir"], auto_built["printed"], auto_built["model"]
    assert gpu_dir == auto_built["root"] / "tiny"  # a smoke-test build never stands in for a real gpu base
    assert f"building ch00's gpu data into {gpu_dir}" in printed and GPU_COMMAND in printed
    label = (
        f"base ch00_base: gpu preset (shrunk by COURSE_GPU_TINY=1, a smoke test), model preset micro, "
        f"{models.count_parameters(model):,} parameters, from {gpu_dir / 'ch00_base'}"
    )
    assert label in printed.splitlines()
    entries = data.read_manifest(gpu_dir)["artifacts"]
    assert set(entries) == {"ch00_base", "ch00_tasks"}
    assert all(GPU_COMMAND in entry["command"] for entry in entries.values())
    # The architecture is the (shrunk) gpu preset's, not the committed cpu base's.
    assert models.preset_of(model.config) == "micro"
    if (REPO_DATA / "ch00_base").exists():
        cpu_config = AutoConfig.from_pretrained(REPO_DATA / "ch00_base")
        assert models.preset_of(cpu_config) == "tiny" and cpu_config.hidden_size != model.config.hidden_size
    # A second load finds the artifact and builds nothing.
    _tiny_gpu_env(monkeypatch, auto_built["root"])
    assert ch00.preset().model_preset == "micro"
    again, _ = data.load_base(ch00.BASE_NAME)
    second = capsys.readouterr().out
    assert "building" not in second and label in second.splitlines()
    assert (gpu_dir / data.MANIFEST).read_text() == auto_built["manifest"]
    assert data.load_tasks("ch00_tasks")["test"].num_rows == 200


def test_corrupted_or_missing_gpu_file_names_the_gpu_build_command(auto_built, tmp_path, monkeypatch):
    shutil.copytree(auto_built["root"], tmp_path / "gpu")
    gpu_dir = _tiny_gpu_env(monkeypatch, tmp_path / "gpu")
    weights = gpu_dir / "ch00_base" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 1
    weights.write_bytes(bytes(blob))
    with pytest.raises(data.DataError, match="corrupted") as err:
        data.load_base(ch00.BASE_NAME)
    assert GPU_COMMAND in str(err.value)
    (gpu_dir / "ch00_tasks" / "dataset_dict.json").unlink()
    with pytest.raises(data.DataError, match="missing") as err:
        data.load_tasks("ch00_tasks")
    assert GPU_COMMAND in str(err.value)


def test_command_line_builds_the_same_gpu_data_and_verifies_it(auto_built, tmp_path, monkeypatch, capsys):
    gpu_dir = _tiny_gpu_env(monkeypatch, tmp_path)
    assert build.main(["verify", "--scale", "gpu"]) == 0
    assert "no artifacts recorded" in capsys.readouterr().out
    assert build.main(["build", "ch00", "--scale", "gpu"]) == 0
    assert f"built ch00 under {gpu_dir}" in capsys.readouterr().out
    # The same seed gives byte-identical files, whether the command or a first load built them.
    assert (gpu_dir / data.MANIFEST).read_text() == auto_built["manifest"]
    assert build.main(["verify", "--scale", "gpu"]) == 0
    assert "all data files match the manifest" in capsys.readouterr().out
    (gpu_dir / "ch00_base" / "config.json").write_text("{}\n")
    assert build.main(["verify", "--scale", "gpu"]) == 1
    assert GPU_COMMAND in capsys.readouterr().out


def test_chapter00_runs_end_to_end_on_the_tiny_gpu_preset(tmp_path, monkeypatch, capsys):
    """`run(seed)` in an empty gpu directory builds the base, loads it and trains it: the chapter's whole gpu path."""
    _tiny_gpu_env(monkeypatch, tmp_path)
    monkeypatch.setattr(course_config, "_tiny_announced", False)
    results = ch00.run(0)
    printed = capsys.readouterr().out
    assert "COURSE_GPU_TINY=1: the gpu preset is shrunk" in printed and "building ch00's gpu data" in printed
    assert models.preset_of(results["model"].config) == "micro"
    assert len(results["history"]) == ch00.preset().grpo.iterations + 1  # a row per iteration, then the last eval
    assert results["checks"]["mask_errors"] == 0 and results["checks"]["trajectories"] > 0
    assert set(ch00.claim_numbers(results)) >= {"base_success", "trained_success", "checks_id_and_text_errors"}


def test_a_first_load_that_builds_keeps_the_callers_random_state(tmp_path, monkeypatch):
    """A chapter seeds, then loads its base: the build inside the first load (which seeds and draws) must leave
    Python's, NumPy's and torch's random state as the caller set it, or that first run would differ from later ones."""
    import random

    import numpy as np
    import torch

    from course_lib import course_config

    def draws():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    course_config.seed_everything(5)
    expected = draws()
    _tiny_gpu_env(monkeypatch, tmp_path)
    course_config.seed_everything(5)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        data.load_base(ch00.BASE_NAME)
    assert "building ch00's gpu data" in out.getvalue()
    assert draws() == expected


def test_tiny_override_shrinks_only_the_gpu_preset(monkeypatch):
    monkeypatch.setenv("COURSE_GPU_TINY", "1")
    assert ch00.preset("cpu") == tool_arithmetic.ArithmeticConfig()
    tiny = ch00.preset("gpu")
    assert tiny.model_preset == "micro" and tiny.sft.steps <= 16 and tiny.grpo.iterations <= 2
    assert tiny.eval_tasks <= 4 and tiny.demonstrations <= 64
    assert tiny.sampling == tool_arithmetic.ArithmeticConfig().sampling  # what is not a budget stays as it was
    monkeypatch.delenv("COURSE_GPU_TINY")
    assert ch00.preset("gpu").model_preset == "small" and ch00.preset("gpu").sft.steps == 3000


def test_cpu_scale_loads_the_committed_base_silently(monkeypatch, capsys):
    if not (REPO_DATA / data.MANIFEST).exists():
        pytest.skip("no generated data in this checkout")
    monkeypatch.setenv("COURSE_SCALE", "cpu")
    monkeypatch.setenv("COURSE_GPU_TINY", "1")  # the switch acts under the gpu scale only
    model, _ = data.load_base(ch00.BASE_NAME)
    assert capsys.readouterr().out == ""
    assert models.preset_of(model.config) == ch00.preset("cpu").model_preset == "tiny"


def _declared_presets(config) -> set[str]:
    """The model presets a chapter configuration names for its bases."""
    if hasattr(config, "model_presets"):
        return set(config.model_presets.values())
    if hasattr(config, "model_preset"):
        return {config.model_preset}
    return {config.task.model_preset}  # chapter 11: chapter 08's recipe for its root variant


class _BaseRequested(Exception):
    """Raised instead of building a model: carries the model preset a builder asked for."""


@pytest.mark.parametrize("chapter", sorted(build.builders()))
def test_every_builder_builds_its_gpu_preset_model(chapter, tmp_path, monkeypatch):
    """`build_data(..., scale=...)` asks, for each base, for the model preset its `preset(scale)` names, and
    records the artifact with that scale; the gpu one is larger than the cpu one. No model is trained: the
    builders run until their first `build_model` call."""
    monkeypatch.delenv("COURSE_GPU_TINY", raising=False)
    module = importlib.import_module(build.builders()[chapter])
    assert inspect.signature(module.build_data).parameters["scale"].default == "cpu"

    def no_model(tokenizer, preset, max_positions=256, **overrides):
        raise _BaseRequested(preset)

    requested: dict[str, dict[str, str]] = {"cpu": {}, "gpu": {}}
    """Per scale the artifact was recorded under (the build command it names): base name -> model preset."""

    def write_artifact(name, write, seed, data_dir=None, scale="cpu"):
        try:
            write(tmp_path / name)
        except _BaseRequested as base:
            requested[scale][name] = base.args[0]

    monkeypatch.setattr(warm_start, "build_model", no_model)
    monkeypatch.setattr(data, "write_artifact", write_artifact)
    monkeypatch.setattr(data, "write_task_set", lambda *args, **kwargs: None)  # task sets do not depend on size
    for scale in ("cpu", "gpu"):
        module.build_data(tmp_path, 0, False, scale=scale)
    cpu, gpu = _declared_presets(module.preset("cpu")), _declared_presets(module.preset("gpu"))
    assert gpu.isdisjoint(cpu) and gpu <= {"small", "medium"}
    assert requested["cpu"] and requested["gpu"].keys() == requested["cpu"].keys()
    assert set(requested["gpu"].values()) == gpu and set(requested["cpu"].values()) == cpu


def test_the_prepared_gpu_run_runs_chapters_under_the_gpu_preset_and_summarises(monkeypatch, tmp_path, capsys):
    """`python -m course_lib.lab.gpu_preset` (the script for a machine with a GPU), on the tiny gpu preset: chapter
    00's command in its own process, its verdicts read back, and a chapter the budget leaves no time for reported."""
    from course_lib.lab import gpu_preset

    _tiny_gpu_env(monkeypatch, tmp_path)
    assert gpu_preset.main(["--chapters", "00", "--budget-minutes", "5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "gpu_preset_chapters_ok=1/1"
    summary = lines[lines.index("summary:") + 1]
    assert summary.startswith("  ch00: ok, ") and all(f"C0.{k} " in summary for k in range(1, 5))
    assert gpu_preset.main(["--chapters", "00", "04", "--budget-minutes", "0"]) == 1
    out = capsys.readouterr().out
    assert out.count("not run (budget spent)") == 2 and out.strip().endswith("gpu_preset_chapters_ok=0/2")


# The pretrained-model mode: `--model <hub id or folder>` --------------------------------------------------------
@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    """A random-init qwen2 stand-in with the byte-level BPE tokenizer and ChatML template, saved as a checkpoint."""
    from course_lib.course import standins

    return standins.build_standin(tmp_path_factory.mktemp("standin") / "model", "qwen2")


def test_pretrained_mode_runs_chapter00_on_a_checkpoint_under_the_gpu_preset(standin, tmp_path, monkeypatch, capsys):
    """`--model <folder>` on the tiny gpu preset: chapter 00's command in its own process on the stand-in (LoRA warm
    start in the chat format, RL, claims), its minutes, warm start and verdicts in the summary, its last lines
    printed; nothing recorded."""
    from course_lib.lab import gpu_preset

    _tiny_gpu_env(monkeypatch, tmp_path / "gpu")
    monkeypatch.chdir(tmp_path)  # a `results/` written by mistake would land here
    assert gpu_preset.main(["--model", str(standin), "--chapters", "00", "--budget-minutes", "5"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0] == f"pretrained-model mode: {standin} from {standin.resolve()}, chapters ch00"
    assert lines[-1] == "gpu_preset_chapters_ok=1/1"
    summary = lines[lines.index("summary:") + 1]
    assert re.match(r"  ch00: ok, \d+\.\d min; warm start LoRA, loss \d+\.\d{3} -> \d+\.\d{3}; C0\.1 ", summary)
    assert all(f"C0.{k} " in summary for k in range(1, 5))
    assert lines.index("summary:") > 2, "the chapter's last lines are printed before the summary"
    assert not (tmp_path / "results").exists()


def _fake_chapter(calls: list):
    """A stand-in for `subprocess.run` that records each command and environment and prints a chapter's lines."""
    printed = (
        "model: LoRA warm start on the chapter's demonstrations, loss 4.100 -> 1.250 over 16 steps; turns of ...\n"
        "seed 0 (0.1 min)\n  C0.1 PASS x\n  C0.2 FAIL y\nlast line\n"
    )

    def run(command, env, capture_output, text, timeout):
        calls.append((command, env))
        return subprocess.CompletedProcess(command, 0, stdout=printed, stderr="")

    return run


def test_pretrained_mode_passes_the_folder_offline_and_reads_the_warm_start(standin, monkeypatch, capsys):
    from course_lib.lab import gpu_preset

    calls: list = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(gpu_preset.subprocess, "run", _fake_chapter(calls))
    assert gpu_preset.main(["--model", str(standin), "--full-finetune", "--budget-minutes", "5"]) == 0
    keys = [command[2].removeprefix("course_lib.chapters.")[:4] for command, _ in calls]
    assert keys == ["ch00", "ch04", "ch06", "ch07", "ch08"] == gpu_preset.model_chapters()  # the default chapters
    command, env = calls[0]
    assert command[-3:] == ["--model", str(standin.resolve()), "--full-finetune"] and "--record" not in command
    assert env["COURSE_SCALE"] == "gpu" and env["HF_HUB_OFFLINE"] == "1"
    out = capsys.readouterr().out
    assert "  ch07: ok, 0.0 min; warm start LoRA, loss 4.100 -> 1.250; C0.1 PASS, C0.2 FAIL" in out
    assert out.count("last line") == 5  # every chapter's tail, not only a failing one's
    # The normal mode is as it was: no --model, no offline switch, a tail only on failure.
    calls.clear()
    assert gpu_preset.main(["--chapters", "01", "--budget-minutes", "5"]) == 0
    (command, env), out = calls[0], capsys.readouterr().out
    assert command[-2:] == ["--seeds", "0"] and "HF_HUB_OFFLINE" not in env
    assert "last line" not in out and "ch01: ok, 0.0 min;" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--record"], "not recorded"),
        (["--chapters", "01"], "do not take a checkpoint"),
        (["--chapters", "00", "42"], "unknown chapters"),
    ],
)
def test_pretrained_mode_refuses_what_it_cannot_do(standin, argv, message, capsys):
    from course_lib.lab import gpu_preset

    with pytest.raises(SystemExit):
        gpu_preset.main(["--model", str(standin), *argv])
    assert message in capsys.readouterr().err


def test_full_finetune_needs_a_model(capsys):
    from course_lib.lab import gpu_preset

    with pytest.raises(SystemExit):
        gpu_preset.main(["--full-finetune"])
    assert "--full-finetune goes with --model" in capsys.readouterr().err


def test_a_hub_id_is_read_from_the_cache_and_never_downloaded(standin, tmp_path, capsys):
    """A hub id resolves to its snapshot in the Hugging Face cache (laid out here as `huggingface_hub` writes it);
    one not there is an error that says the course does not download, and names the download command."""
    from course_lib.lab import gpu_preset

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--course--standin"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(standin, repo / "snapshots" / commit)
    assert gpu_preset.resolve_model("course/standin", tmp_path / "hub") == repo / "snapshots" / commit
    with pytest.raises(FileNotFoundError, match="never downloads at run time") as missing:
        gpu_preset.resolve_model("course/absent", tmp_path / "hub")
    assert "hf download course/absent" in str(missing.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="without config.json"):
        gpu_preset.resolve_model(str(tmp_path / "empty"))
    with pytest.raises(SystemExit):  # the command line says the same, before any chapter runs
        gpu_preset.main(["--model", "course/absent-from-every-cache-0"])
    assert "never downloads at run time" in capsys.readouterr().err


def test_the_real_model_records_under_its_name(standin, monkeypatch, capsys):
    """`--model smollm2 --record`: the chapters get the name (resolved again from its checked cache) and `--record`,
    and write `results/gpu/<chapter>_smollm2.json`; any other checkpoint's run is still refused a record."""
    from course_lib import real_models
    from course_lib.lab import gpu_preset

    calls: list = []
    monkeypatch.setattr(real_models, "path", lambda name: standin.resolve())
    monkeypatch.setattr(gpu_preset.subprocess, "run", _fake_chapter(calls))
    assert gpu_preset.main(["--model", "smollm2", "--record", "--chapters", "00", "--budget-minutes", "5"]) == 0
    command, env = calls[0]
    assert command[-3:] == ["--record", "--model", "smollm2"] and env["COURSE_SCALE"] == "gpu"
    with pytest.raises(SystemExit):
        gpu_preset.main(["--model", str(standin), "--record"])
    assert "a checkpoint's run is printed, not recorded" in capsys.readouterr().err


def test_a_chapter_records_the_real_model_only_on_the_gpu_preset(monkeypatch, capsys):
    from course_lib.chapters import ch00_tool_agent as ch00

    monkeypatch.setenv("COURSE_SCALE", "cpu")
    with pytest.raises(SystemExit):
        ch00.CHAPTER.main(["--model", "smollm2", "--record"])
    assert "results/gpu/ch00_smollm2.json" in capsys.readouterr().err


def test_the_survey_comparisons_are_prepared_for_the_gpu(monkeypatch, capsys):
    """`--survey`: chapter 16's comparisons run after the chapters (alone here), each as `real_survey compare` under
    the gpu preset, offline, pilots flagged; the gpu shapes are the ones `real_survey` uses on that preset."""
    from course_lib import course_config
    from course_lib.lab import gpu_preset, real_survey

    ran = []

    def fake_run(command, env, **_):
        ran.append((command, env))
        return subprocess.CompletedProcess(command, 0, stdout="seed 0 ch16_gigpo: difference 0.000\n", stderr="")

    monkeypatch.setattr(gpu_preset.subprocess, "run", fake_run)
    assert gpu_preset.main(["--survey", "gigpo", "arpo", "--seeds", "100", "--budget-minutes", "5"]) == 0
    assert [command[command.index("compare") + 1:] for command, _ in ran] == [
        ["gigpo", "--seeds", "100", "--pilot"], ["arpo", "--seeds", "100", "--pilot"]]  # fmt: skip
    assert all(env["COURSE_SCALE"] == "gpu" and env["HF_HUB_OFFLINE"] == "1" for _, env in ran)
    assert capsys.readouterr().out.strip().endswith("gpu_preset_chapters_ok=2/2")
    assert gpu_preset.survey_command("gigpo", [0, 1], True)[-4:] == ["--seeds", "0", "1", "--record"]
    monkeypatch.setenv("COURSE_SCALE", "gpu")
    assert course_config.scale() == "gpu" and real_survey.rl_shape("gigpo") == real_survey.GPU_RL_SHAPES["gigpo"]
    monkeypatch.setenv("COURSE_SCALE", "cpu")
    assert real_survey.rl_shape("gigpo") == real_survey.RL_SHAPES["gigpo"]
