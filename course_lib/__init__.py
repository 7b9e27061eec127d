"""course_lib: the shared library of the agentic-RL course (one small module per idea).

Its folders draw the layers. A module imports, at module level, only from its own layer or those listed before it
(tests/course/test_layers.py checks it):

- **base**: `course_config` (scales, seeds, device, threads), `machine` (the CPU a number was measured on), `overrides`
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
- `tasks`: the tasks several chapters share (a task's environment, settings, demonstrator and held-out evaluator),
  `tasks.tool_task.ToolTask` and the bases' glue (`tasks.bases`).
- **the course**: `course` (claims and verdicts, results, designs, the build, the audit, the golden run, the
  notebooks, stand-ins, diagrams, the pitfalls lab, the gpu preset, the benchmarks), `chapters` (one module per
  chapter on one skeleton) and `integrations` (the same methods on TRL, verl and OpenEnv).
"""

import warnings

# Libraries import tqdm.auto, which warns inside Jupyter when ipywidgets is absent; progress bars
# are off in notebooks anyway, so the warning would only clutter committed outputs.
warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.1.0"
