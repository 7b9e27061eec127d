"""course_lib: the shared library of the agentic-RL course (one small module per idea).

Its folders draw the layers. A module imports, at module level, only from its own layer or those listed before it
(tests/course/test_layers.py checks it):

- **base**: `config` (scales, seeds, device, threads), `machine` (the CPU a number was measured on), `overrides`
  (`--set key=value` on a config), `validation` (the checks a config runs when it is made), `tokenizer` (word-level
  vocabularies), `models` (tiny Llama-style models, LoRA, log-probs), `data` (the committed bases and their
  manifest) and `real_models` (SmolLM2, built offline into a cache).
- `tools`: what an agent may call (a calculator, a restricted interpreter; never arbitrary code).
- `envs`: text environments (`envs.make(name)`, `envs.check_env`).
- `algos`: one pure module per method's equations (GRPO, PPO, GiGPO, ARPO, AEPO, the filters), unit-tested against
  hand-computed values.
- `engine`: rollouts, token in and token out: `engine.rollout` (the batched engine, the data model and the turn
  rule), `engine.server_engine` (the same turns over an inference server), the decoders, the prompt format, step
  mode and ARPO's trees.
- `diagnostics`: measures of rollouts and of the policy (RAGEN-2's mutual information), `diagnostics.stats`,
  `diagnostics.plots`, `diagnostics.tree_credit` and `diagnostics.tree_view`.
- `rl`: the loop: `rl.warm_start`, `rl.train`, `rl.loop` (the four seams), `rl.critic`, `rl.micro_batch`,
  `rl.checkpoint`, `rl.run_state`, `rl.tracking`.
- `search`: RAP's and LATS's tree search over a world model or the environment.
- **the course**: `course` (claims and verdicts, results, designs, the build, the audit, the golden run, the
  notebooks, stand-ins, diagrams, the pitfalls lab, the gpu preset, the benchmarks), `chapters` (one module per
  chapter on one skeleton) and `integrations` (the same methods on TRL, verl and OpenEnv).

A module's old flat path (`course_lib.rollout`, `course_lib.verdicts`, ...) still imports it for one release, with a
DeprecationWarning naming the new one (`MOVED`).
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# Libraries import tqdm.auto, which warns inside Jupyter when ipywidgets is absent; progress bars
# are off in notebooks anyway, so the warning would only clutter committed outputs.
warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.1.0"

MOVED = {
    **{name: f"engine.{name}" for name in (
        "rollout", "server_engine", "hf_decoder", "kv_decoder", "prompt_format", "step_mode", "tree_rollout")},
    **{name: f"rl.{name}" for name in (
        "train", "warm_start", "loop", "critic", "checkpoint", "run_state", "tracking", "micro_batch")},
    **{name: f"diagnostics.{name}" for name in ("stats", "plots", "tree_credit", "tree_view")},
    **{name: f"course.{name}" for name in (
        "claims", "designs", "verdicts", "results", "build", "audit", "golden", "scaffold", "notebooks",
        "standins", "diagrams", "pitfalls", "gpu_preset", "bench", "chance")},
}  # fmt: skip
"""Old flat module -> its path under `course_lib` since issue 44 (a package's submodules follow it)."""


def _new_name(old: str) -> str | None:
    """`course_lib.diagrams.arpo_tree` -> `course_lib.course.diagrams.arpo_tree`; None if the name did not move."""
    parts = old.split(".")
    if len(parts) < 2 or parts[0] != __name__ or parts[1] not in MOVED:
        return None
    return ".".join([__name__, MOVED[parts[1]], *parts[2:]])


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module by its old name: the same module object (never a second copy), with a
    DeprecationWarning. Also serves `python -m course_lib.<old>` (runpy asks the loader for the new module's code)."""

    def find_spec(self, fullname, path=None, target=None):
        new = _new_name(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        if found is None:
            return None
        spec = importlib.util.spec_from_loader(
            fullname, self, origin=found.origin, is_package=found.submodule_search_locations is not None
        )
        spec.has_location = found.has_location  # runpy sets `__file__` only from a spec with a location
        return spec

    @staticmethod
    def _warn(old: str) -> str:
        new = _new_name(old)
        warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)
        return new

    def create_module(self, spec):
        module = importlib.import_module(self._warn(spec.name))
        self._spec = module.__spec__  # the import system sets the old spec on it next; `exec_module` puts it back
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec

    def get_code(self, fullname):
        new = self._warn(fullname)
        return importlib.util.find_spec(new).loader.get_code(new)


sys.meta_path.insert(0, _OldPaths())  # first: the path finder would load a moved package's modules a second time
