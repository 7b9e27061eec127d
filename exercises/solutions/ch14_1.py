"""Chapter 14, exercise 1: the pitfall counts on a Llama-style stand-in (a tokenizer with BOS) against Qwen2's."""

import tempfile

from course_lib.chapters import ch14_own_model as ch14
from course_lib.course import standins
from course_lib.rl import checkpoint

SEED = 0
cfg = ch14.preset()
KEYS = ("drift_boundaries", "boundaries", "drift_space_boundaries", "overshoot", "overshoot_stops", "breaks_stripping",
        "breaks_chatml")  # fmt: skip
print(f"{'':24}" + "".join(f"{family:>8}" for family in ("qwen2", "llama")))
counts = {}
for family in ("qwen2", "llama"):
    path = standins.build_standin(tempfile.mkdtemp(), family)
    _, tokenizer = checkpoint.load_checkpoint(path)
    counts[family] = ch14.pitfalls(tokenizer, cfg.pitfall_episodes, SEED)
    counts[family]["bos"] = tokenizer.bos_token
for key in KEYS:
    print(f"{key:24}" + "".join(f"{int(counts[family][key]):8}" for family in ("qwen2", "llama")))
print(f"BOS token: qwen2 {counts['qwen2']['bos']}, llama {counts['llama']['bos']}")
