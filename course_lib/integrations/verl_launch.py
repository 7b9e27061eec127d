"""Launch overrides for the survey's methods on verl 0.9.1 (hydra, on top of `verl/trainer/config/ppo_trainer.yaml`).

`command(method, ...)` is the whole command line: `python -m course_lib.integrations.verl_patch` (verl's `main_ppo`
with the course's Ray setup hook, `verl_patch`) followed by the GRPO settings of docs/scale-out.md and the
method's own overrides (`METHODS`). `tests_verl/test_launch.py` composes each against verl's yaml, where a
misspelled key fails; keys verl does not define are added with a leading `+`.

Every method runs on verl's legacy trainer (`trainer.use_v1=False`): the patch, the tree manager and the monitor
hook all sit on its code path (`verl_patch`). `trainer.balance_batch=False` keeps the batch in generation order
(the filters break ties by order, as the course's do); `ppo_mini_batch_size` = `train_batch_size`: one update
per batch, as the course's loop makes (and what makes the filters' masked rows equal to dropped rows).
"""

from __future__ import annotations

from course_lib.integrations.verl_filters import POLICY_LOSS
from course_lib.integrations.verl_gigpo import ESTIMATOR
from course_lib.integrations.verl_patch import HOOK_OVERRIDE
from course_lib.integrations.verl_trees import MANAGER_CLASS

COMMON = [
    "trainer.use_v1=False",
    "trainer.balance_batch=False",
    "data.return_raw_chat=True",
    "data.filter_overlong_prompts=False",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.agent.default_agent_loop=course_env_agent",
    "trainer.logger=[console]",
    "trainer.val_before_train=True",
]
"""What every method shares (docs/scale-out.md's GRPO command, on the legacy trainer)."""

METHODS: dict[str, list[str]] = {
    "grpo": ["algorithm.adv_estimator=grpo"],
    "gigpo": [
        f"algorithm.adv_estimator={ESTIMATOR}",
        "algorithm.gamma=0.95",
        "algorithm.norm_adv_by_std_in_grpo=True",
        "+algorithm.course.gigpo.step_weight=1.0",
        "+algorithm.course.gigpo.episode_baseline=pooled",
        "+algorithm.course.gigpo.invalid_penalty=0.1",
    ],
    "arpo": [
        "algorithm.adv_estimator=grpo",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER_CLASS}",
    ],
    "aepo": [
        "algorithm.adv_estimator=grpo",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER_CLASS}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={POLICY_LOSS}",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
    ],
    "starpo_s": [
        "algorithm.adv_estimator=grpo",
        "+algorithm.course.filter.name=starpo_s",
        "+algorithm.course.filter.keep_fraction=0.25",
    ],
    "snr_top_p": [
        "algorithm.adv_estimator=grpo",
        "+algorithm.course.filter.name=snr_top_p",
        "+algorithm.course.filter.top_p=0.9",
        "+algorithm.course.filter.mode=linear",
        "+algorithm.course.filter.include_zero=False",
    ],
    "entropy_balanced": [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={POLICY_LOSS}",
    ],
    "mi_monitor": [
        "algorithm.adv_estimator=grpo",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
        "+trainer.course.mi_monitor.drop=0.2",
        "+trainer.course.mi_monitor.prompts=32",
        "+trainer.course.mi_monitor.first_seed=33000000",
    ],
}
"""Each method's overrides. Tree settings (ARPO's or AEPO's rule, global samples, alpha, beta) travel in the
exported rows (`export --tree arpo|aepo`), not in hydra. `mi_monitor`: checkpoints at every measured step, and
chapter 12's monitor settings (`Chapter12Config.gate_drop`, `monitor_prompts`, `MONITOR_SEED`; `overrides` adds
`+trainer.course.mi_monitor.chapter`), read by the `_validate` wrapper `verl_patch.setup` installs
(`verl_monitor.MonitorSettings`); `trainer.val_before_train=True` (in `COMMON`) measures the base policy first."""


def overrides(
    method: str,
    chapter: str = "ch00",
    data_dir: str = "verl_data",
    model_path: str = "data/ch00_base",
    prompt_length: int = 16,
    response_length: int = 48,
    prompts: int = 32,
    group: int = 8,
) -> list[str]:
    """The hydra overrides of `method` for a chapter's exported tasks (`export`, `agent-config`)."""
    if method not in METHODS:
        raise KeyError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    return [
        f"data.train_files={data_dir}/{chapter}_train.parquet",
        f"data.val_files={data_dir}/{chapter}_test.parquet",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        f"data.train_batch_size={prompts}",
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.actor.optim.lr=3e-4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={prompts}",
        f"actor_rollout_ref.rollout.n={group}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={prompts}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={data_dir}/agent_loops.yaml",
        "actor_rollout_ref.rollout.agent.num_workers=4",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.total_epochs=1",
        "trainer.project_name=course_verl",
        f"trainer.experiment_name={chapter}_{method}",
        *COMMON,
        *METHODS[method],
        *([f"+trainer.course.mi_monitor.chapter={chapter}"] if method == "mi_monitor" else []),
    ]


def command(method: str, **settings) -> str:
    """The launch command of `method`, one override per line."""
    quoted = [f"'{o}'" if any(c in o for c in "[]") else o for o in overrides(method, **settings)]
    lines = ["python -m course_lib.integrations.verl_patch", *quoted, HOOK_OVERRIDE]
    return " \\\n  ".join(lines)
