"""Exercise 16.3: one seed of one arm. Does RL use the room for a tool that P2 found?

On seed 0, the calculator's warm start (60 LoRA steps on the top 8 blocks) answers 0.141 of 64 held-out word
problems right, every right answer through the calculator (P2). Here one arm, GRPO at chapter 00's SmolLM2 shape (8
iterations of 4 prompts x 8 at 2e-4, the update under bf16 autocast), trains from that warm start on the calculator
task; held-out success and the share of answers that call the calculator are measured before and after, on the same
64 problems. One seed: a reading, not a verdict.
"""

from course_lib.lab.real_survey import SMOLLM2_RL
from course_lib.tasks import real_model

numbers = real_model.train_and_evaluate(
    "calculator", 0, real_model.WARM_STARTS["calculator"], SMOLLM2_RL, extra=("code_ratio", "executable_ratio")
)
for when in ("before", "after"):
    print(f"{when:6} RL: held-out success {numbers[f'{when}_success']:.3f}, answers that call the calculator "
          f"{numbers[f'{when}_code_ratio']:.3f}, whose code all ran {numbers[f'{when}_executable_ratio']:.3f}, "
          f"invalid actions {numbers[f'{when}_invalid_rate']:.3f}")  # fmt: skip
print(f"gain {numbers['gain']:+.3f}; training success in the last iteration {numbers['train_success_last']:.3f}")
