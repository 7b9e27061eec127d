"""The methods' verl launch overrides and hooks (run in `.venv-verl`): they compose against verl's own trainer yaml,
and Ray's setup hook installs the methods in every worker process."""

from __future__ import annotations

import re

import pytest

from course_lib.integrations import verl_gigpo, verl_patch

pytestmark = pytest.mark.usefixtures("patched")


# Launch overrides -----------------------------------------------------------------------------------------------
def compose(overrides: list[str]):
    from pathlib import Path

    import verl.trainer
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.trainer.__file__).parent / "config"), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


@pytest.mark.parametrize(
    "method", sorted(__import__("course_lib.integrations.verl_launch").integrations.verl_launch.METHODS)
)
def test_launch_overrides_compose_against_ppo_trainer_yaml(method):
    from verl.utils.config import omega_conf_to_dataclass

    from course_lib.integrations import verl_filters, verl_launch

    config = compose([*verl_launch.overrides(method), verl_patch.HOOK_OVERRIDE])
    assert config.trainer.use_v1 is False
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == verl_patch.SETUP_HOOK
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == config.data.train_batch_size
    # the dataclasses verl builds from these blocks accept them (validate_config, the workers)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    if method == "gigpo":
        assert config.algorithm.adv_estimator == "course_gigpo"
        assert verl_gigpo.GiGPOSettings.from_algorithm_config(config.algorithm) == verl_gigpo.GiGPOSettings()
    if method in ("starpo_s", "snr_top_p"):
        assert verl_filters.FilterSettings.from_algorithm_config(config.algorithm).name == method
    if method in ("arpo", "aepo"):
        assert config.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("TreeAgentLoopManager")
    if method in ("aepo", "entropy_balanced"):
        assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "course_entropy_balanced"
    from course_lib.integrations.verl_monitor import MonitorSettings

    settings = MonitorSettings.from_trainer_config(config.trainer)
    if method == "mi_monitor":  # chapter 12's settings, every measured step checkpointed, the base measured first
        from course_lib.chapters import ch12_capstone as ch12
        from course_lib.tasks import two_hop_search

        chapter12 = ch12.Chapter12Config()
        expected = MonitorSettings("ch00", chapter12.gate_drop, chapter12.monitor_prompts, two_hop_search.MONITOR_SEED)
        assert settings == expected
        assert config.trainer.save_freq == config.trainer.test_freq > 0 and config.trainer.val_before_train
    else:
        assert settings is None
    print(verl_launch.command(method).splitlines()[-3:])


def test_a_misspelt_override_fails_composition():
    from hydra.errors import ConfigCompositionException

    from course_lib.integrations import verl_launch

    with pytest.raises(ConfigCompositionException):
        compose([*verl_launch.overrides("gigpo"), "algorithm.gamm=0.9"])
    with pytest.raises(ConfigCompositionException):  # a key verl lacks needs its `+`
        compose([*verl_launch.overrides("grpo"), "algorithm.course.filter.name=starpo_s"])


def test_the_legacy_trainer_never_builds_algo_config():
    """`+algorithm.course.*` is a block verl's `AlgoConfig` dataclass would refuse; the legacy trainer passes the
    DictConfig itself to `compute_advantage` and builds no `AlgoConfig` from it (checked in verl's source here, so
    that a verl release that starts doing so fails this test rather than a launch)."""
    from pathlib import Path

    import verl
    from verl.utils.config import omega_conf_to_dataclass

    from course_lib.integrations import verl_launch

    config = compose([*verl_launch.overrides("gigpo"), verl_patch.HOOK_OVERRIDE])
    with pytest.raises(Exception, match="course"):
        omega_conf_to_dataclass(config.algorithm)
    root = Path(verl.__file__).parent
    for name in ("trainer/main_ppo.py", "trainer/main_ppo_v0.py", "trainer/ppo/ray_trainer.py", "utils/config.py"):
        text = (root / name).read_text()
        assert re.search(r"omega_conf_to_dataclass\([^)]*algorithm\)", text) is None, name
        assert "AlgoConfig(" not in text, name


def test_rays_setup_hook_installs_the_methods_in_every_worker_process():
    """What `HOOK_OVERRIDE` does in a run, on a local Ray: a task and an actor with its own `runtime_env` (as verl's
    workers set env vars) each find GiGPO, the balanced clip, the patched `compute_advantage` and the monitor's
    `_validate` wrapper in their process."""
    import os

    import ray

    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"worker_process_setup_hook": verl_patch.SETUP_HOOK})
    try:

        def installed() -> tuple:
            from verl.trainer.ppo import core_algos as algos
            from verl.trainer.ppo import ray_trainer as trainer

            return (
                "course_gigpo" in algos.ADV_ESTIMATOR_REGISTRY,
                "course_entropy_balanced" in algos.POLICY_LOSS_REGISTRY,
                getattr(trainer.compute_advantage, "course_patched", False),
                getattr(trainer.RayPPOTrainer._validate, "course_monitor", False),
                os.getpid(),
            )

        @ray.remote
        class Worker:
            def probe(self):
                return installed(), os.environ.get("COURSE_PROBE")

        task = ray.get(ray.remote(installed).remote())
        actor = Worker.options(runtime_env={"env_vars": {"COURSE_PROBE": "1"}}).remote()
        (in_actor, env) = ray.get(actor.probe.remote())
    finally:
        ray.shutdown()
    assert task[:4] == (True, True, True, True) and task[4] != os.getpid()
    assert in_actor[:4] == (True, True, True, True) and env == "1"


@pytest.mark.parametrize("method", ["gigpo", "aepo", "snr_top_p", "mi_monitor"])
def test_the_entry_module_runs_verls_main_with_the_hook(method, monkeypatch, tmp_path):
    """`python -m course_lib.integrations.verl_patch <overrides>` up to the point where verl starts Ray: verl's own
    `main` composes the overrides, `validate_config` accepts them (batch sizes included), the legacy `TaskRunner`
    is chosen, and the runtime env carries the setup hook (added by the entry module, not by the user)."""
    from verl.trainer import main_ppo

    from course_lib.integrations import verl_launch

    seen = {}
    monkeypatch.setattr(
        main_ppo, "run_ppo", lambda config, task_runner_class: seen.update(config=config, runner=task_runner_class)
    )
    monkeypatch.setattr("sys.argv", ["verl_patch"])
    monkeypatch.chdir(tmp_path)  # hydra writes its run folder (outputs/<date>/<time>) under the working directory
    verl_patch.main(verl_launch.overrides(method))
    assert seen["config"].ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == verl_patch.SETUP_HOOK
    from verl.trainer.main_ppo_v0 import TaskRunner

    assert seen["runner"] is TaskRunner  # the legacy trainer (trainer.use_v1=False), where the patch applies
