"""Chapter 00, exercise 5: where the clip acts, with 8 optimizer updates per batch instead of 4. Does the share of
clipped policy tokens keep growing with each further update on the same batch?"""

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00

SEED = 0
cfg = ch00.preset()
model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
fractions = ch00.clip_activity(model, tokenizer, cfg, SEED, updates=8)
print("share of policy tokens clipped at updates 1..8 on the same batch:")
for iteration in (0, 2, 5, 9):
    print(f"  iteration {iteration}: " + " ".join(f"{f:.3f}" for f in fractions[iteration]))
