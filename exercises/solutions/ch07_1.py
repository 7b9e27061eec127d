"""Chapter 07, exercise 1: GiGPO in the aliased view, and how many step groups mix true states."""

import copy
import dataclasses
from collections import defaultdict

from course_lib import config, data
from course_lib.chapters import ch07_gigpo as ch07
from course_lib.course import results as recorded
from course_lib.engine.rollout import RolloutEngine
from course_lib.rl import loop

SEED = 0
cfg = ch07.preset("cpu")
model, tokenizer = data.load_base(ch07.BASE_NAME, "cpu")
config.seed_everything(SEED)

base = ch07.evaluate(model, tokenizer, cfg, SEED + 1, view="aliased")["success"]
print(f"base, held-out success in the aliased view: {base:.3f}")
aliased = copy.deepcopy(model)
history = ch07.train(aliased, tokenizer, cfg, SEED, ch07.arm_config(cfg, "gigpo"), view="aliased")
curve = ", ".join(f"{r['iteration']}: {r['eval_success']:.3f}" for r in history if "eval_success" in r)
print(f"GiGPO trained in the aliased view, held-out success by iteration: {curve}")
full = recorded.recorded_numbers(recorded.load("ch07"), "gigpo_success")[SEED]
print(f"GiGPO in the full view (recorded, seed {SEED}): {full:.3f}")


def step_anchors(policy, view: str, source: str) -> list[tuple]:
    """(episode group, anchor) of every step of one training batch, anchored by `source`."""
    factory = ch07.EnvFactory("train", cfg, view)
    made = [factory() for _ in range(cfg.grpo.prompts_per_iteration * cfg.grpo.group_size)]
    grpo = dataclasses.replace(cfg.grpo, anchor_source=source)
    tasks = [10_000_000 + p for p in range(grpo.prompts_per_iteration)]
    engine = RolloutEngine(policy, tokenizer, cfg.sampling)
    episodes = loop.independent_groups(engine, made, tasks, grpo, config.seed_everything(SEED + 2)).episodes
    return [(episode.group_id, anchor) for episode in episodes for anchor in episode.anchors]


for view in ("aliased", "full"):
    states = defaultdict(set)
    texts, truths = step_anchors(aliased, view, "observation"), step_anchors(aliased, view, "state")
    for (group, text), (_, state) in zip(texts, truths, strict=True):
        states[group, text].add(state)
    mixed = sum(len(s) > 1 for s in states.values())
    print(f"{view:8} view: {len(texts)} steps in {len(states)} step groups, {mixed} of them mix true states")
