"""Chapter 09: RAGEN, multi-turn RL that collapses (the Echo Trap) and StarPO-S (arXiv 2504.20073).

A tiny policy plays a slippery 4x4 FrozenLake (`envs.frozen_lake`) in trajectory mode: every turn is
`<think> you r2 c3 go down </think> <answer> down </answer>`, a short reasoning then a move, and the whole
episode is one growing sequence whose environment tokens are masked out of the loss (StarPO). The base is
warm-started on a noisy demonstrator whose reasoning names the agent's cell, so the reasoning carries the input
and there is input dependence to lose. From it the chapter trains, at the same budget:

- StarPO with GRPO's advantage and with PPO's (a critic and GAE, `course_lib.rl.critic`);
- StarPO-S: keep the top quarter of groups by reward std (`algos.filters.top_groups_by_reward_std`), clip-higher
  (0.2/0.28), no KL, with and without the critic;
- freshness and diversity at a fixed rollout budget: rollouts reused for several updates against fresh ones on the
  same number of episodes; more distinct maps with fewer samples each against fewer maps with more.

It reads the Echo Trap's warning signals from the runs' logs (within-group reward std, entropy, gradient norm),
dates each one, and measures templated reasoning directly: the share of turns whose reasoning names the agent's
true cell, and the share of distinct first-turn reasonings over distinct held-out maps. The base is built by
`python -m course_lib.data build ch09`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.chapters import skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all, positive_effects
from course_lib.diagnostics import collapse
from course_lib.diagnostics.collapse import eval_curve
from course_lib.engine.rollout import Trajectory
from course_lib.rl import seams
from course_lib.rl.critic import Critic, CriticConfig, build_critic
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import bases, lake_reasoning
from course_lib.tasks.lake_reasoning import (
    BASE_NAME,
    MAX_POSITIONS,
    HeldOutEvaluator,
    LakeConfig,
    build_base,
    evaluate,
    make_env,
    reasoning_words,
    test_seeds,
    turn_texts,
    without_trajectories,
)

CRITIC = "ch09_critic"
"""The advantage-seam name under which a run registers its own critic's estimator."""


@dataclass
class Chapter09Config(LakeConfig):
    """Everything chapter 09 varies: the lake task's settings (`tasks.lake_reasoning.LakeConfig`) and the chapter's
    RL, critic, budget arms and the Echo Trap's thresholds, with the cpu preset's values as defaults."""

    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=60, prompts_per_iteration=8, group_size=8, learning_rate=5e-4, eval_every=10
        )
    )
    """StarPO: trajectory-level updates, environment tokens masked, no KL, one on-policy update per batch of
    8 maps x 8 episodes, clip 0.2/0.2, token-mean."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """The PPO arms' critic (learning rate 2x the actor's here; RAGEN's is 10x, at 1e-5 against 1e-6)."""
    critic_preset: str = "micro"
    """The critic's size, a key of `models.MODEL_PRESETS`. RAGEN's critic is a copy of the actor; the course's is a
    quarter of the policy's width (`micro`), trained from scratch, so the two critic arms fit the chapter's time."""
    budget_iterations: int = 20
    """Updates of the freshness and diversity arms (C9.4), compared with StarPO's evaluation at that update."""
    reuse: int = 4
    """The reused arm samples a batch every `reuse` updates (RAGEN's rollout-frequency ablation)."""
    signal_window: int = collapse.WINDOW
    """Iterations per window when dating the warning signals (`signal_onsets`)."""
    signal_drop: float = collapse.SIGNAL_DROP
    """A signal has moved when its windowed mean falls this share below its first window's."""
    collapse_drop: float = collapse.COLLAPSE_DROP
    """Success has collapsed when a held-out evaluation after the peak falls this far below the peak."""


def preset(scale: str | None = None) -> Chapter09Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    return lake_reasoning.preset(
        scale, Chapter09Config, critic_preset="small", budget_iterations=60,
        grpo=dataclasses.replace(Chapter09Config().grpo, iterations=200, prompts_per_iteration=16),
    )  # fmt: skip


# Warm start -------------------------------------------------------------------------------------
build_data = bases.base_data(BASE_NAME, build_base)
"""`python -m course_lib.data build ch09 [--scale gpu]`: the warm-started base."""


# Measurements -----------------------------------------------------------------------------------


def reasoning_samples(trajectories: Sequence[Trajectory], tokenizer, count: int = 4) -> list[str]:
    """`count` held-out episodes: the first turn after the observation it answered, then the episode's last turn
    (where a collapse shows first: late turns are the least trained and the first to loop)."""
    lines = []
    for trajectory in trajectories[:count]:
        prompt = [token for token, turn in zip(trajectory.token_ids, trajectory.turn_ids, strict=True) if turn < 0]
        turns = turn_texts(trajectory, tokenizer)
        lines.append(f"{tokenizer.decode(prompt, skip_special_tokens=True)}  ->  {turns[0] if turns else '(none)'}")
        if len(turns) > 1:
            lines.append(f"    ... turn {len(turns)} of {len(turns)}: {turns[-1]}")
    return lines


def common_broken_turns(trajectories: Sequence[Trajectory], tokenizer, count: int = 4) -> list[tuple[int, str]]:
    """The `count` most frequent turns that break the format, with how often each occurs (what collapse writes)."""
    broken = Counter(
        text
        for trajectory in trajectories
        for text in turn_texts(trajectory, tokenizer)
        if reasoning_words(text) is None
    )
    return [(n, text) for text, n in broken.most_common(count)]


# Arms -------------------------------------------------------------------------------------------
ARMS: dict[str, dict] = {
    "starpo": {},
    "starpo_ppo": {"advantage": CRITIC},
    "starpo_s": {"batch_filter": "starpo_s", "clip_high": 0.28},
    "starpo_s_ppo": {"batch_filter": "starpo_s", "clip_high": 0.28, "advantage": CRITIC},
}
"""The full-length runs: StarPO (GRPO), StarPO-PPO (critic), StarPO-S (top 25% of groups by reward std,
clip-higher 0.28, no KL) with GRPO and with the critic."""


def budget_arms(config: Chapter09Config) -> dict[str, dict]:
    """The freshness and diversity arms (C9.4), each `budget_iterations` updates from the base, compared with
    StarPO's first `budget_iterations` updates (8 maps x 8 episodes, a fresh batch per update):

    - `reused`: a batch every `reuse` updates (the same number of updates on a quarter of the rollouts);
    - `fresh_equal`: a fresh batch every update for `budget_iterations / reuse` updates, the reused arm's number of
      episodes (C9.4 compares the two at an equal rollout budget; StarPO's own evaluation at `budget_iterations` is
      the equal-updates comparison, shown beside it);
    - `maps_16x4`: 16 maps x 4 episodes per batch (more distinct initial states, the same 64 episodes);
    - `maps_4x16`: 4 maps x 16 episodes (fewer states, more samples each)."""
    steps = config.budget_iterations
    return {
        "reused": {"updates_per_batch": config.reuse, "iterations": steps // config.reuse},
        "fresh_equal": {"iterations": steps // config.reuse},
        "maps_16x4": {"prompts_per_iteration": 16, "group_size": 4, "iterations": steps},
        "maps_4x16": {"prompts_per_iteration": 4, "group_size": 16, "iterations": steps},
    }


def arm_settings(config: Chapter09Config, arm: str) -> dict:
    return ARMS[arm] if arm in ARMS else budget_arms(config)[arm]


def arm_config(config: Chapter09Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm` (a key of `ARMS` or of `budget_arms`)."""
    grpo = dataclasses.replace(config.grpo, filter=FilterConfig(keep_fraction=0.25))
    settings = arm_settings(config, arm)
    if arm not in ARMS:  # the budget arms evaluate only at their start and end
        grpo = dataclasses.replace(grpo, eval_every=max(settings["iterations"], 1))
    return dataclasses.replace(grpo, **settings)


def train(
    model, tokenizer, config: Chapter09Config, seed: int, arm: str, evaluator: HeldOutEvaluator | None = None
) -> list[dict]:
    """RL of `arm` from `model` (changed in place), evaluated by `evaluator` (default: a `HeldOutEvaluator` with
    seed `seed + 1`); a critic arm builds and trains its own critic (seeded)."""
    grpo = arm_config(config, arm)
    if grpo.advantage == CRITIC:
        course_config.seed_everything(seed + 7)
        critic = Critic(build_critic(tokenizer, config.critic_preset, MAX_POSITIONS), config.critic)
        seams.register("advantage", CRITIC, critic.advantages, replace=True)  # a new critic per seed
    course_config.seed_everything(seed)
    evaluator = evaluator or HeldOutEvaluator(tokenizer, config, seed + 1)
    return train_grpo(model, tokenizer, lambda: make_env("train"), config.sampling, grpo, seed, evaluate=evaluator)


def all_arms(config: Chapter09Config) -> list[str]:
    """Every arm one seed of the chapter trains: `ARMS`, then `budget_arms`."""
    return [*ARMS, *budget_arms(config)]


LIVE_ARMS = ("starpo", "starpo_s", "reused", "fresh_equal", "maps_16x4", "maps_4x16")
"""The arms the notebook trains live (about 2.5 of the 4.2 minutes all arms take on a 2-core CPU): the critic arms
(`starpo_ppo`, `starpo_s_ppo`) are read from the recorded seeds instead."""


def run(seed: int, config: Chapter09Config | None = None, arms: Sequence[str] | None = None) -> dict:
    """The whole chapter for one seed: the base's evaluation, every arm of `ARMS` and `budget_arms` from it (or
    only `arms`, in the chapter's order), and the base's and the final StarPO policy's held-out reasonings. Every
    arm starts from the base with its own seeded generators, so an arm's result does not depend on which others
    ran."""
    config = config or preset()
    chosen = all_arms(config) if arms is None else [arm for arm in all_arms(config) if arm in arms]
    if arms is not None and (unknown := set(arms) - set(chosen)):
        raise ValueError(f"unknown arms {sorted(unknown)}; choose from {all_arms(config)}")
    start = time.perf_counter()
    course_config.seed_everything(seed)
    base, tokenizer = data.load_base(BASE_NAME, course_config.device())
    base_eval = evaluate(base, tokenizer, config, seed + 1, keep=True)
    results: dict = {"base": without_trajectories(base_eval), "histories": {}, "final": {}}
    results["samples"] = {"base": reasoning_samples(base_eval["trajectories"], tokenizer)}
    results["broken_turns"] = {"base": common_broken_turns(base_eval["trajectories"], tokenizer)}
    for arm in chosen:
        evaluator = HeldOutEvaluator(tokenizer, config, seed + 1, start=results["base"])
        results["histories"][arm] = train(copy.deepcopy(base), tokenizer, config, seed, arm, evaluator)
        results["final"][arm] = results["histories"][arm][-1]
        if arm == "starpo":  # the final evaluation's episodes
            results["samples"]["starpo"] = reasoning_samples(evaluator.trajectories, tokenizer)
            results["broken_turns"]["starpo"] = common_broken_turns(evaluator.trajectories, tokenizer)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["base_model"], results["tokenizer"] = base, tokenizer
    return results


# The Echo Trap's timeline -----------------------------------------------------------------------
def timeline(history: Sequence[Mapping], config: Chapter09Config) -> dict[str, float]:
    """The Echo Trap's dates of one run under the chapter's thresholds (`diagnostics.collapse.timeline`)."""
    return collapse.timeline(history, config.collapse_drop, config.signal_window, config.signal_drop)


def plot_timeline(history: Sequence[Mapping], config: Chapter09Config, title: str = ""):
    """The timeline of one run on four panels, under the chapter's thresholds (`diagnostics.collapse.plot_timeline`)."""
    return collapse.plot_timeline(history, config.collapse_drop, config.signal_window, config.signal_drop, title,
                                  config.eval_tasks)  # fmt: skip


# Claims -----------------------------------------------------------------------------------------
def claim_numbers(results: Mapping, config: Chapter09Config | None = None) -> dict[str, float]:
    """Every number chapter 09's claims use, flat."""
    config = config or preset()
    base, final, histories = results["base"], results["final"], results["histories"]
    numbers = {"base_success": base["success"], "base_tracks_state": base["reasoning_tracks_state"],
               "base_distinct_first": base["distinct_first_reasoning"]}  # fmt: skip
    for arm in histories:
        numbers[f"{arm}_success"] = final[arm]["eval_success"]
        numbers[f"{arm}_tracks_state"] = final[arm]["eval_reasoning_tracks_state"]
        numbers[f"{arm}_distinct_first"] = final[arm]["eval_distinct_first_reasoning"]
    for arm in ARMS:
        if arm in histories:
            for key, value in timeline(histories[arm], config).items():
                numbers[f"{arm}_{key}"] = value
    if "starpo" in histories:
        numbers["starpo_early_minus_base"] = numbers["starpo_early_success"] - numbers["base_success"]
        numbers["starpo_early_minus_late"] = numbers["starpo_early_success"] - numbers["starpo_late_success"]
        # equal updates, four times the reused arm's episodes: shown, not checked
        numbers["fresh_success"] = dict(eval_curve(histories["starpo"]))[config.budget_iterations]
    differences = {"fresh_updates_minus_reused": ("fresh", "reused"), "fresh_minus_reused": ("fresh_equal", "reused"),
                   "maps16_minus_maps4": ("maps_16x4", "maps_4x16"), "starpo_s_minus_starpo": ("starpo_s", "starpo"),
                   "starpo_s_ppo_minus_starpo_ppo": ("starpo_s_ppo", "starpo_ppo")}  # fmt: skip
    for key, (arm, other) in differences.items():  # only between arms this run trained (see `run`'s `arms`)
        if f"{arm}_success" in numbers and f"{other}_success" in numbers:
            numbers[key] = numbers[f"{arm}_success"] - numbers[f"{other}_success"]
    return numbers


def _echo_trap(n: Mapping[str, float]) -> bool:
    return at_least(n["starpo_early_minus_base"], 0.05) and at_least(n["starpo_early_minus_late"], 0.05)


def _warnings_first(n: Mapping[str, float]) -> bool:
    collapse = n["starpo_collapse_iteration"]
    return (
        not math.isnan(collapse)
        and n["starpo_reward_std_onset"] <= collapse
        and n["starpo_entropy_onset"] <= collapse
        and abs(n["starpo_grad_norm_peak_iteration"] - collapse) <= 10
    )


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C9.1",
        "vanilla StarPO (GRPO) improves, then collapses: its mean held-out success over the early window (evaluations "
        "after 0 up to half the run) is at least 5 points above the base's, and over the late window (the last third) "
        "at least 5 points below the early window's (windows fixed before the runs; each on average over the seeds, "
        "95% t-interval above 0)",
        "RAGEN: StarPO-PPO and -GRPO improve, then collapse on Bandit, Sokoban and FrozenLake (Qwen2.5-0.5B)",
        "starpo_early_minus_late",
        _echo_trap,
        required=False,
        effects=(("starpo_early_minus_base", 0.05), ("starpo_early_minus_late", 0.05)),
    ),
    ClaimSpec(
        "C9.2",
        "in that run, within-group reward std and entropy fall 20% below their first window before the collapse, "
        "and the largest gradient norm comes within 10 iterations of it",
        "RAGEN: reward std and entropy drop before success collapses; gradient-norm spikes mark the collapse",
        "starpo_entropy_onset",
        _warnings_first,
        required=False,
    ),
    ClaimSpec(
        "C9.3",
        "StarPO-S ends at or above StarPO with the same estimator, with GRPO and with the critic",
        "RAGEN: StarPO-S (top 25% of groups, clip-higher, no KL) delays or removes the collapse and raises success",
        "starpo_s_minus_starpo",
        lambda n: at_least(n["starpo_s_minus_starpo"], 0) and at_least(n["starpo_s_ppo_minus_starpo_ppo"], 0),
        required=False,
        effects=(("starpo_s_minus_starpo", 0.0), ("starpo_s_ppo_minus_starpo_ppo", 0.0)),
    ),
    positive_effects(
        "C9.4",
        "at the same number of episodes (a quarter of StarPO's first 20 updates' worth), fresh rollouts (a new batch "
        "every update) end above rollouts each used for 4 updates; and at the same 1,280 episodes, 16 maps x 4 "
        "episodes end above 4 maps x 16",
        "RAGEN: fresher rollouts and more diverse initial states (with fewer responses each) train better",
        "fresh_minus_reused",
        "maps16_minus_maps4",
        required=False,
    ),
)


def claim_arms(config: Chapter09Config) -> dict[str, tuple[str, ...]]:
    """The arms each claim compares (a run without one of them cannot decide it)."""
    return {"C9.1": ("starpo",), "C9.2": ("starpo",), "C9.3": tuple(ARMS), "C9.4": ("starpo", *budget_arms(config))}


def unmeasured_claims(results: Mapping, config: Chapter09Config | None = None) -> set[str]:
    """Ids of the claims whose arms this run did not train (`run`'s `arms`)."""
    trained = set(results["histories"])
    return {claim for claim, arms in claim_arms(config or preset()).items() if not set(arms) <= trained}


def claims(results: Mapping, config: Chapter09Config | None = None) -> list[Claim]:
    """Chapter 09's claims, evaluated on `claim_numbers(results, config)`; those whose arms this run did not train
    get no verdict this run (`unmeasured_claims`)."""
    return evaluate_all(CLAIMS, claim_numbers(results, config), unmeasured_claims(results, config))


CURVE_KEYS = ("success", "reward_std", "entropy", "grad_norm", "invalid_rate", "eval_success",
              "eval_reasoning_tracks_state")  # fmt: skip
"""History keys whose curves `--record` stores, per arm: `<arm>/<key>`."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves({arm: results["histories"][arm] for arm in ARMS}, CURVE_KEYS)


def summary_lines(results: Mapping, config: Chapter09Config | None = None) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    config = config or preset()
    base = results["base"]
    lines = [f"base: success {base['success']:.3f}, reasoning names the true cell {base['reasoning_tracks_state']:.3f}"
             f", distinct first reasonings {base['distinct_first_reasoning']:.3f}"]  # fmt: skip
    for arm, final in results["final"].items():
        lines.append(f"{arm:13} success {final['eval_success']:.3f}, reasoning names the true cell "
                     f"{final['eval_reasoning_tracks_state']:.3f}, distinct first reasonings "
                     f"{final['eval_distinct_first_reasoning']:.3f}")  # fmt: skip
    for arm in [arm for arm in ARMS if arm in results["histories"]]:
        t = timeline(results["histories"][arm], config)
        lines.append(f"{arm:13} peak {t['peak_success']:.3f} at {t['peak_iteration']:.0f}, collapse at "
                     f"{t['collapse_iteration']:.0f}; reward std moved at {t['reward_std_onset']:.0f}, entropy at "
                     f"{t['entropy_onset']:.0f}; largest grad norm {t['grad_norm_peak']:.2f} at "
                     f"{t['grad_norm_peak_iteration']:.0f}")  # fmt: skip
    return lines


def budget_lines(results: Mapping, config: Chapter09Config | None = None) -> list[str]:
    """C9.4's arms beside StarPO's evaluation after `budget_iterations` updates: updates, episodes, held-out success."""
    config = config or preset()
    steps = config.budget_iterations
    fresh = dict(eval_curve(results["histories"]["starpo"]))[steps]
    plain = config.grpo
    rows = [("starpo", "8 maps x 8, a new batch every update", steps,
             steps * plain.prompts_per_iteration * plain.group_size, fresh)]  # fmt: skip
    names = {"fresh_equal": "8 maps x 8, a new batch every update",
             "reused": f"8 maps x 8, each batch used for {config.reuse} updates",
             "maps_16x4": "16 maps x 4 episodes, fresh", "maps_4x16": "4 maps x 16 episodes, fresh"}  # fmt: skip
    for arm, text in names.items():
        grpo = arm_config(config, arm)
        rows.append((arm, text, grpo.iterations * grpo.updates_per_batch,
                     grpo.iterations * grpo.prompts_per_iteration * grpo.group_size,
                     results["final"][arm]["eval_success"]))  # fmt: skip
    return [f"{arm:12} {text:42} updates {updates:3d}  episodes {episodes:5d}  held-out success {success:.3f}"
            for arm, text, updates, episodes, success in rows]  # fmt: skip


# Leakage audit ----------------------------------------------------------------------------------


def held_out_audit() -> list[leakage.SplitAudit]:
    """The test maps against every arm's draws and the demonstrations (`leakage.lake_split`)."""
    config = preset("cpu")
    keys = leakage.problem_keys(lambda: make_env("test"), test_seeds(config.eval_tasks))
    # every arm draws seed * 1_000_003 + iteration * prompts + p: the longest arms cover the others' draws
    arms = [arm_config(config, arm) for arm in [*ARMS, *budget_arms(config)]]
    draws = max(grpo.iterations * grpo.prompts_per_iteration for grpo in arms)
    seeds = leakage.grpo_task_seeds(1, draws, leakage.run_seeds("ch09"))
    training = set(leakage.problem_keys(lambda: make_env("train"), seeds))
    return [leakage.lake_split("ch09", keys, training, leakage.demonstrated_lakes())]


CHAPTER = skeleton.Chapter(
    "ch09",
    "Chapter 09, RAGEN",
    run,
    claim_numbers,
    CLAIMS,
    curves=curves,
    report=summary_lines,
    audit=held_out_audit,
    arms=skeleton.arm_table(arm_config, all_arms),
)


if __name__ == "__main__":
    CHAPTER.main()
