"""Chapter 13, exercise 1: chapter 06's multi-turn environment under TRL. Does its reward rise as in chapter 06?"""

import numpy as np

from course_lib.integrations import course_trl

trainer = course_trl.rollout_trainer("06", course_trl.TRLSettings(steps=20, prompts=8, group=8, seed=0))
course_trl.quiet_train(trainer)
rows = [row for row in trainer.state.log_history if "reward" in row]
print("step  mean reward  policy tokens per completion")
for row in rows[::5] + rows[-1:]:
    print(f"{row['step']:4}  {row['reward']:11.3f}  {row['completions/mean_length']:28.1f}")
first, last = np.mean([r["reward"] for r in rows[:5]]), np.mean([r["reward"] for r in rows[-5:]])
print(f"mean reward, steps 1-5: {first:.3f}; steps 16-20: {last:.3f}")
