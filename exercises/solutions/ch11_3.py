"""Chapter 11, exercise 3: the entropy gate AEPO does not have, as a policy-loss seam."""

import copy

import numpy as np
import torch

from course_lib import course_config, data
from course_lib.algos import aepo
from course_lib.algos.grpo import masked_aggregate
from course_lib.chapters import ch11_aepo as ch11
from course_lib.rl import seams

SEED = 0
COUNTS = {"updates": 0, "above": 0, "dropped": 0}
"""Over every update of the gated run: tokens above the bound, and those the gate gave the hard clip's zero gradient."""


def entropy_gated(logprobs, old_logprobs, advantages, loss_mask, cfg):
    """AEPO's balanced clip on tokens more surprising than the batch's median policy token, the hard clip elsewhere.
    The seam gets no entropies: the sampled token's surprisal -log pi_old, whose mean is the entropy, stands in."""
    balanced, above = aepo.balanced_clip_losses(logprobs, old_logprobs, advantages, cfg.clip_low, cfg.clip_high)
    hard, _ = aepo.balanced_clip_losses(logprobs, old_logprobs, advantages, cfg.clip_low, cfg.clip_high, balanced=False)
    mask = loss_mask.bool()
    surprisal = -old_logprobs.detach()
    gate = surprisal > surprisal[mask].median()
    _, stats = seams.entropy_balanced(logprobs, old_logprobs, advantages, loss_mask, cfg)  # the seam's own stats
    COUNTS["updates"] += 1
    COUNTS["above"] += int((above & mask).sum())
    COUNTS["dropped"] += int((above & ~gate & mask).sum())
    stats["median_surprisal"] = float(surprisal[mask].median())
    return masked_aggregate(torch.where(gate, balanced, hard), loss_mask, cfg.aggregation), stats


seams.register("policy_loss", "entropy_gated", entropy_gated)
ch11.ARMS["aepo_gated"] = {**ch11.ARMS["aepo"], "policy_loss": "entropy_gated"}

cfg = ch11.preset("cpu")
base, tokenizer = data.load_base(ch11.BASE_NAME, "cpu")
print(f"{cfg.grpo.iterations} iterations of {cfg.grpo.prompts_per_iteration} x {cfg.grpo.group_size}, seed {SEED}")
for arm in ("aepo", "aepo_gated"):
    model = copy.deepcopy(base)
    course_config.seed_everything(SEED)
    history = ch11.train(model, tokenizer, cfg, SEED, arm)
    passes = ch11.pass_at_k(model, tokenizer, cfg, SEED + 1)
    steps = [row for row in history if "clip_fraction" in row]
    print(f"{arm:10}  clip_fraction {np.mean([r['clip_fraction'] for r in steps]):.4f}  upper clip acted on "
          f"{np.mean([r['upper_clip_fraction'] for r in steps]):.4f} of policy tokens  pass@1 "
          f"{passes['pass_1']:.3f}  pass@{cfg.pass_k} {passes[f'pass_{cfg.pass_k}']:.3f}")  # fmt: skip
    if arm == "aepo_gated":
        median = np.mean([r["median_surprisal"] for r in steps])
        print(f"  over all {COUNTS['updates']} updates: {COUNTS['above']} tokens above the bound with A > 0, "
              f"{COUNTS['dropped']} of them below the batch's median surprisal")  # fmt: skip
        print(f"  the median surprisal averaged {median:.4f} nats: most policy tokens are near-certain")
