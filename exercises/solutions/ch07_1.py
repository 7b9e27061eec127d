"""Chapter 07, exercise 1: what aliased anchors do to GiGPO's step credit, on one batch the base plays."""

import dataclasses
from collections import defaultdict

from course_lib import course_config, data
from course_lib.algos.gigpo import discounted_returns, step_group_advantages
from course_lib.chapters import ch07_gigpo as ch07
from course_lib.engine.rollout import RolloutEngine
from course_lib.rl import seams

SEED = 0
cfg = ch07.preset("cpu")
model, tokenizer = data.load_base(ch07.BASE_NAME, "cpu")

# One training batch (4 tasks x 8 episodes) played in the full view, each step anchored by its true state:
# (row, column, key held, door open).
grpo = dataclasses.replace(cfg.grpo, anchor_source="state")
factory = ch07.EnvFactory("train", cfg, "full")
made = [factory() for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
tasks = [10_000_000 + p for p in range(grpo.prompts_per_iteration)]
engine = RolloutEngine(model, tokenizer, cfg.sampling)
episodes = seams.independent_groups(engine, made, tasks, grpo, course_config.seed_everything(SEED + 2)).episodes
print(f"{len(episodes)} episodes, {sum(e.total_reward > 0 for e in episodes)} reach the goal")

# The aliased text names the agent's cell, and the key, door and goal where they were at reset: within a task
# (a group) it tells states apart by the agent's cell only.
returns, true_anchors, aliased_anchors, groups = [], [], [], []
for episode in episodes:
    returns += discounted_returns(episode.rewards, cfg.grpo.gigpo.gamma)
    true_anchors += episode.anchors
    aliased_anchors += [state[:2] for state in episode.anchors]
    groups += [episode.group_id] * len(episode.anchors)

states = defaultdict(set)
for group, aliased, true in zip(groups, aliased_anchors, true_anchors, strict=True):
    states[group, aliased].add(true)
mixed = sum(len(s) > 1 for s in states.values())
print(
    f"{len(returns)} steps; step groups: {len(set(zip(groups, true_anchors)))} by true state, "
    f"{len(states)} by aliased text, {mixed} of which mix true states"
)

true_advantages = step_group_advantages(returns, true_anchors, groups)
aliased_advantages = step_group_advantages(returns, aliased_anchors, groups)
changed = [(a, b) for a, b in zip(true_advantages, aliased_advantages, strict=True) if abs(a - b) > 1e-9]
flipped = sum((a > 0) != (b > 0) for a, b in changed if a != 0 and b != 0)
lost = sum(a != 0 and b == 0 for a, b in changed)
gained = sum(a == 0 and b != 0 for a, b in changed)
mean_change = sum(abs(a - b) for a, b in changed) / len(returns)
print(
    f"step advantage A^S changed on {len(changed)} of {len(returns)} steps: sign flipped on {flipped}, "
    f"lost (became 0) on {lost}, gained (was 0) on {gained}; mean |change| over all steps {mean_change:.3f}"
)
