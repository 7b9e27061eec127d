"""Exercise 15.3: a bug hunt. Which three of the four suspects hide in `bug_hunt.mystery_loop`?

The hunt for seed 0 (a class gives each student a seed), from the loop's evidence only, as one debugs one's own
trainer: first the checks whose numbers point at one cause (action tokens the loss misses: a shifted mask; a ratio
outside the clip on the loop's own batch: stale data), then the observation share on the mask with the shift undone,
then the loop run again with what was found fixed, to see whether the entropy still runs away.
"""

import sys

import torch

from course_lib.course import bug_hunt, pitfalls

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 0  # python exercises/solutions/ch15_3.py [your seed]
evidence = bug_hunt.mystery_loop(SEED)
batch = evidence.batch
found = []

aligned = pitfalls.check_advantage_alignment(evidence.advantages, evidence.loss_mask, batch.loss_mask, on_flag="return")
print("advantage alignment:", aligned.message)
if aligned.numbers["missed"] > 0:  # the loss skips action tokens: only a shifted mask does that
    found.append("alignment")
stale = pitfalls.check_staleness(evidence.logprobs, batch.old_logprobs, batch.loss_mask, on_flag="return")
print("staleness:", stale.message)
if stale.flagged:
    found.append("staleness")
mask = torch.nn.functional.pad(evidence.loss_mask[:, 1:], (0, 1)) if "alignment" in found else evidence.loss_mask
share = pitfalls.check_observation_share(mask, batch.loss_mask, on_flag="return")
print("observation share" + (" (shift undone)" if "alignment" in found else "") + ":", share.message)
if share.flagged:
    found.append("observations")
print("entropy, as run:", pitfalls.check_entropy(evidence.history, on_flag="return").message)
rerun = bug_hunt.mystery_loop(SEED, fixed=found)
entropy = pitfalls.check_entropy(rerun.history, on_flag="return")
print(f"entropy, run again with {', '.join(found)} fixed:", entropy.message)
if entropy.flagged:
    found.append("entropy")
print(bug_hunt.accuse(SEED, found))
