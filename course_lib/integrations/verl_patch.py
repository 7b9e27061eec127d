"""The patches the survey's methods need in verl 0.9.1, and how they get into verl's processes.

What is patched: `compute_advantage` in `verl/trainer/ppo/ray_trainer.py`, the function the trainer's `fit` calls
on the driver (verl's `TaskRunner` actor) once per step, after the old log-probs and before the actor update. The
wrapper (`course_compute_advantage`) does two things and otherwise calls verl's own function unchanged:

1. with `+algorithm.course.filter.name=starpo_s|snr_top_p`, it applies the group filter (`verl_filters`) to the
   batch first: the `response_mask` of dropped groups is zeroed (why not selected: see `verl_filters`);
2. with `algorithm.adv_estimator=course_gigpo`, it calls the estimator registered under that name with
   `non_tensor_batch` (verl hands it only to `gdpo`), where the agent loop's `extra_fields` are.

Nothing else in verl's arithmetic changes: the estimator and the balanced clip are added through verl's own
registries (`register_adv_est`, `register_policy_loss`). The patch replaces the module attribute
`ray_trainer.compute_advantage` (which `fit` looks up at call time) and the copy `verl.trainer.ppo.v1.utils` imported
by name. The same setup also wraps `RayPPOTrainer._validate` with chapter 12's MI monitor (`verl_monitor`), which
stays inert unless the config has `+trainer.course.mi_monitor.*`.

How it gets installed: verl runs the trainer and its workers as Ray actors in other processes, so importing this
module in the launching shell is not enough. `setup` is Ray's `worker_process_setup_hook`, which Ray runs in
every worker process it starts; `python -m course_lib.integrations.verl_patch <overrides>` adds that hook to the
overrides (`+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=course_lib.integrations.verl_patch.setup`)
and calls `verl.trainer.main_ppo.main` (same overrides as `python -m verl.trainer.main_ppo`). Every node needs the
course installed (`pip install -e .`), as for the agent loop.

Route: verl 0.9.1's legacy trainer, `trainer.use_v1=False`. Its batch is one `DataProto` that carries every
`extra_fields` column to `compute_advantage`. The default v1 trainer (`trainer.use_v1=True`) instead fetches a fixed
list of fields from its transfer queue in `_compute_advantage` (uid, masks, scores, log-probs), so the step columns
never reach an estimator there: GiGPO would need that method patched too (not done; the estimator then raises a
KeyError naming the missing columns). Its modules import `transfer_queue`, which the verl 0.9.1 wheel does not
install; `install` skips a module that does not import.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from course_lib.integrations.verl_filters import POLICY_LOSS, FilterSettings, balanced_clip_loss, filter_batch
from course_lib.integrations.verl_gigpo import ESTIMATOR, GiGPOSettings, gigpo_token_advantages

SETUP_HOOK = "course_lib.integrations.verl_patch.setup"
HOOK_OVERRIDE = f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}"
"""The hydra override that makes Ray run `setup` in every worker process."""
PATCHED_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils")


def course_gigpo(
    token_level_rewards, response_mask, config=None, index=None, non_tensor_batch=None, **kwargs
) -> tuple[Any, Any]:
    """GiGPO as verl calls an estimator: `[B, T]` advantages and returns (the same tensor, as verl's GRPO returns).
    `non_tensor_batch` comes from the patched `compute_advantage`; without it the step columns are unreachable."""
    if non_tensor_batch is None:
        raise RuntimeError(
            f"{ESTIMATOR} needs non_tensor_batch: launch through `python -m course_lib.integrations.verl_patch` "
            "(or add the worker_process_setup_hook override) so that compute_advantage passes it"
        )
    advantages, _ = gigpo_token_advantages(
        response_mask, non_tensor_batch, index, GiGPOSettings.from_algorithm_config(config)
    )
    return advantages, advantages


def course_compute_advantage(original: Callable) -> Callable:
    """Wrap verl's `compute_advantage(data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo,
    config)`: the group filter first, then GiGPO with the non-tensor columns, anything else unchanged."""

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        config = kwargs.get("config", args[4] if len(args) > 4 else None)
        settings = FilterSettings.from_algorithm_config(config)
        keep = None
        if settings.name != "none":
            if "response_mask" not in data.batch.keys():
                from verl.trainer.ppo.ray_trainer import compute_response_mask

                data.batch["response_mask"] = compute_response_mask(data)
            keep, metrics = filter_batch(data.batch, data.non_tensor_batch, settings)
            data.meta_info.setdefault("course_metrics", {}).update(metrics)
        if str(getattr(adv_estimator, "value", adv_estimator)) == ESTIMATOR:
            from verl.trainer.ppo.core_algos import get_adv_estimator_fn

            advantages, returns = get_adv_estimator_fn(ESTIMATOR)(
                token_level_rewards=data.batch["token_level_rewards"],
                response_mask=data.batch["response_mask"],
                config=config,
                index=data.non_tensor_batch["uid"],
                non_tensor_batch=data.non_tensor_batch,
            )
            data.batch["advantages"], data.batch["returns"] = advantages, returns
        else:
            data = original(data, adv_estimator, *args, **kwargs)
        if keep is not None and not bool(keep.any()):  # the course skips this update: no policy gradient here
            data.batch["advantages"].zero_()
        return data

    compute_advantage.course_patched = True
    return compute_advantage


def register() -> None:
    """Add GiGPO and the balanced clip to verl's registries (idempotent)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR) is not course_gigpo:
        core_algos.register_adv_est(ESTIMATOR)(course_gigpo)
    core_algos.register_policy_loss(POLICY_LOSS)(balanced_clip_loss)


def install() -> None:
    """`register`, wrap `_validate` with the MI monitor, then replace `compute_advantage` in the modules that call
    it (idempotent)."""
    import importlib

    from course_lib.integrations.verl_monitor import install_monitor

    register()
    install_monitor()
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # the v1 trainer's modules need `transfer_queue`, which the verl 0.9.1 wheel lacks
            continue
        if not getattr(module.compute_advantage, "course_patched", False):
            module.compute_advantage = course_compute_advantage(module.compute_advantage)


def setup() -> None:
    """Ray's `worker_process_setup_hook`: runs in every worker process before it does anything else."""
    install()


def main(argv: list[str] | None = None) -> None:
    """`python -m course_lib.integrations.verl_patch <hydra overrides>`: verl's `main_ppo` with the hook added."""
    install()  # the driver process too (harmless; the trainer itself runs in a Ray actor)
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(arg.split("=")[0].endswith("worker_process_setup_hook") for arg in args):
        args.append(HOOK_OVERRIDE)
    from verl.trainer import main_ppo

    sys.argv = [sys.argv[0], *args]
    main_ppo.main()


if __name__ == "__main__":
    main()
