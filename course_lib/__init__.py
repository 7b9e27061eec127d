"""course_lib: the shared library of the agentic-RL course (one small module per idea).

Modules: `config` (scales, seeds, device), `tokenizer`, `models`, `envs`, `tools`, `rollout` (with
`kv_decoder`), `algos`, `train`, `diagnostics`, `plots`, `claims`, `data`, `notebooks`, `bench`,
and `chapters` (per-chapter configuration and glue).
"""

import warnings

# Libraries import tqdm.auto, which warns inside Jupyter when ipywidgets is absent; progress bars
# are off in notebooks anyway, so the warning would only clutter committed outputs.
warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.1.0"
