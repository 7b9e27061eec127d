"""course_lib: the shared library of the agentic-RL course (one small module per idea).

Its folders draw the layers. A module imports, at module level, only from its own layer or those listed before it
(tests/project/test_layers.py checks it):

- **base**: `course_config` (scales, seeds, device, threads), `machine` (the CPU a number was measured on), `overrides`
  (`--set key=value` on a config), `validation` (the checks a config runs when it is made), `tokenizer` (word-level
  vocabularies), `models` (tiny Llama-style models, LoRA, log-probs), `data` (the committed bases and their
  manifest), `real_models` (SmolLM2, built offline into a cache), and `implement_it` with `bridges` (the marks
  on the implement-it exercises' references, and what the student edition calls in their place).
- `tools`: what an agent may call (a calculator, a restricted interpreter; never arbitrary code).
- `envs`: text environments (`envs.make(name)`, `envs.check_env`).
- `algos`: one pure module per method's equations (GRPO, PPO, GiGPO, ARPO, AEPO, the filters), unit-tested against
  hand-computed values.
- `engine`: rollouts, token in and token out: `engine.rollout` (the batched engine, the data model and the turn
  rule), `engine.server_engine` (the same turns over an inference server), the decoders, the prompt format, step
  mode and ARPO's trees.
- `diagnostics`: measures of rollouts and of the policy (RAGEN-2's mutual information), `diagnostics.stats`,
  `diagnostics.plots`, `diagnostics.tree_credit` and `diagnostics.tree_view`.
- `rl`: the loop: `rl.warm_start`, `rl.train`, `rl.seams` (the four seams), `rl.critic`, `rl.micro_batch`,
  `rl.checkpoint`, `rl.run_state`, `rl.tracking`, `rl.session` (one run session: the model, where checkpoints go, who
  observes).
- `search`: RAP's and LATS's tree search over a world model or the environment.
- `tasks`: the tasks the chapters train on, below them (a task's environment, settings, demonstrator and held-out
  evaluator: `tasks.tool_arithmetic`, `tasks.key_door_grid`, ...), `tasks.tool_task.ToolTask` and the bases' glue
  (`tasks.bases`).
- `course`: what the chapters stand on to state and decide their claims (claims, chance, designs and their power,
  recorded seeds, the leakage audit's helpers, golden cases, stand-ins, diagrams, the pitfalls lab).
- `chapters`: one module per notebook holding its story (config, arms, run, claims, report), on one skeleton; no
  chapter imports another.
- **what walks the chapters**: `lab` (the build, the golden run, the benchmarks, the gpu preset, the verdicts, the
  audit, the designed settings' runs, the notebooks, the study time, the student edition, the scaffold) and
  `integrations` (the same methods on TRL, verl and OpenEnv). They name no chapter: they read `chapters.index()`.
  With them, `__main__`: `python -m course_lib compare A B` and `plot RUN` (`lab.compare_runs`).
"""

import warnings

# Libraries import tqdm.auto, which warns inside Jupyter when ipywidgets is absent; progress bars
# are off in notebooks anyway, so the warning would only clutter committed outputs.
warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.1.0"
