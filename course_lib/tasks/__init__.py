"""The tasks several chapters share, below the chapters: a task's environment and split, its settings, its
demonstrator and its held-out evaluator, so that a chapter module holds only its story (config, arms, run, claims,
report) and no chapter imports another.

- `tool_task`: `ToolTask`, a chapter's training task as the course's tools train on it, and `held_out_on_test`.
- `bases`: the bases' glue (task splits, warm-started bases, `base_for`, `on_environment`, `held_out_seeds`).
"""
