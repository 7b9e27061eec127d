"""Chapter 13, exercise 2: Dr. GRPO in TRL (scale_rewards="none": advantages not divided by the group's std).
Does C13.4 (TRL within 10 points of chapter 00's loop) still hold on seed 0?"""

import copy

from course_lib import course_config, data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import ch13_scale_out as ch13
from course_lib.course import recorded
from course_lib.integrations import course_trl
from course_lib.tasks import tool_arithmetic

SEED = 0
cfg = ch13.preset()
standard = course_trl.grpo_config


def dr_grpo_config(settings, output_dir, max_completion_length):
    trl_config = standard(settings, output_dir, max_completion_length)
    trl_config.scale_rewards = "none"
    return trl_config


course_trl.grpo_config = dr_grpo_config  # the adapter builds TRL's config through this function
course_config.seed_everything(SEED)
model, tokenizer = data.load_base(ch00.BASE_NAME, course_config.device())
trl_model = copy.deepcopy(model)
trainer = course_trl.rollout_trainer(tool_arithmetic.tool_task(), cfg.trl, trl_model, tokenizer)
print(f"TRL's scale_rewards: {trainer.args.scale_rewards!r}")
course_trl.quiet_train(trainer)
trl_model.eval()
success = tool_arithmetic.evaluate(trl_model, tokenizer, cfg.chapter00, SEED + 1)["success"]
numbers = recorded.load("ch13")["seeds"][str(SEED)]["numbers"]
print(
    f"held-out success: TRL, Dr. GRPO {success:.3f}; recorded: TRL, std-scaled {numbers['trl_success']:.3f}, "
    f"course loop {numbers['course_success']:.3f}"
)
gap = success - numbers["course_success"]
side = "inside" if abs(gap) <= 0.10 else "outside"
print(f"TRL (Dr. GRPO) - course loop: {100 * gap:+.1f} points, {side} C13.4's margin of 10 points on this seed")
