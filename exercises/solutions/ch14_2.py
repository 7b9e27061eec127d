"""Chapter 14, exercise 2: join turns with a blank line. Do more or fewer boundaries drift than with one newline?"""

import tempfile

from course_lib.chapters import ch14_own_model as ch14
from course_lib.course import standins
from course_lib.rl import checkpoint
from course_lib.tokenizer import pieces

SEED = 0
cfg = ch14.preset()
path = standins.build_standin(tempfile.mkdtemp(), cfg.family)
_, tokenizer = checkpoint.load_checkpoint(path)
episodes = standins.environment_episodes(cfg.pitfall_episodes, SEED + 1)  # the episodes ch14.pitfalls counts on
print("separator  drifted boundaries  of  drifted episodes")
for separator in (" ", "\n", "\n\n"):
    drift = standins.retokenization_drift(tokenizer, episodes, separator=separator)
    print(f"{separator!r:9}  {drift['drifted_boundaries']:18}  {drift['boundaries']:3}  {drift['drifted_episodes']:16}")
print("pieces around a boundary:")
for separator in ("\n", "\n\n"):
    print(f"  {separator!r:6} {pieces(tokenizer, f'</tool_call>{separator}<tool_response>')}")
