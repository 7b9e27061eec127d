"""Chapter 17, exercise 1: GraphGPO's omega. The recipe's small omegas (0.1 on ALFWorld, 0.8 on Sokoban) against the
chapter's 0.95, on seed 0 of chapter 07's task, where the invalid-action penalty is 0.1."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.algos.graphgpo import graphgpo_advantages
from course_lib.chapters import ch17_what_came_next as ch17
from course_lib.tasks import key_door_grid

SEED = 0
cfg = ch17.preset("cpu")
model, tokenizer = data.load_base(cfg.grid.base, "cpu")
table = ch17.step_table(model, tokenizer, cfg, SEED)
print("one batch of the base: in how many step groups (of 2 or more steps) does the distance term spread less")
print("than the invalid-action penalty (0.1), so that a penalty outweighs any progress?")
for omega in (0.1, 0.8, 0.95):
    pure = graphgpo_advantages(**table, omega=omega, invalid_penalty=0.0).graph_returns
    groups: dict = {}
    for anchor, group, value in zip(table["anchors"], table["group_ids"], pure):
        groups.setdefault((group, anchor), []).append(value)
    shared = [values for values in groups.values() if len(values) > 1]
    narrow = sum(max(values) - min(values) < 0.1 for values in shared)
    print(f"omega {omega:4}: {narrow} of {len(shared)} step groups ({narrow / len(shared):.0%})")
print(f"\nheld-out success on seed {SEED} after 20 iterations")
for omega in (0.1, 0.8, 0.95):
    course_config.seed_everything(SEED)
    grpo = ch17.grid_arm(dataclasses.replace(cfg, omega=omega), "graphgpo")
    history = key_door_grid.train(copy.deepcopy(model), tokenizer, cfg.grid, SEED, grpo)
    print(f"GraphGPO, omega {omega:4}: {history[-1]['eval_success']:.3f}")
