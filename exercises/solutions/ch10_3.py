"""Chapter 10, exercise 3: RAGEN-2's two aggregates. The base's first-turn MI on its held-out episodes, with each
reasoning scored by its per-token mean log-probability (the headline) and by its sequence sum."""

import torch

from course_lib import data
from course_lib.chapters import ch09_ragen as ch09
from course_lib.chapters import ch10_ragen2 as ch10
from course_lib.course import recorded
from course_lib.diagnostics import first_turn_reasoning, reasoning_mutual_information

SEED = 0
cfg = ch10.preset("cpu")
model, tokenizer = data.load_base(ch10.BASE_NAME, "cpu")
trajectories = ch09.evaluate(model, tokenizer, cfg, SEED + 1, keep=True)["trajectories"]
for index, trajectory in enumerate(trajectories):  # every map is its own prompt, as in ch10.evaluate
    trajectory.group_id = index
think, end = tokenizer.convert_tokens_to_ids("<think>"), tokenizer.convert_tokens_to_ids("</think>")
lengths = [len(pair[1]) for t in trajectories if (pair := first_turn_reasoning(t, think, end))]
print(f"{len(trajectories)} held-out maps; first reasonings of {min(lengths)} to {max(lengths)} tokens")
for aggregate in ("mean", "sum"):
    mi = reasoning_mutual_information(
        model, tokenizer, trajectories, cfg.mi_samples, aggregate, torch.Generator().manual_seed(SEED + 1)
    )
    print(
        f"{aggregate:4}: MI {mi['mi']:.3f} nats, retrieval {mi['retrieval_accuracy']:.3f} "
        f"(chance {mi['chance']:.4f}), H(Z|X) {mi['conditional_entropy']:.3f}"
    )
base_mi = recorded.load("ch10")["seeds"][str(SEED)]["numbers"]["base_mi"]
print(f"recorded base MI of seed {SEED} (the chapter's evaluation, per-token mean): {base_mi:.3f}")
