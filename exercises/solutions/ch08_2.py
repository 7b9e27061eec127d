"""Chapter 08, exercise 2: root uncertainty. A base whose demonstrator searches precisely half the time (not 5%):
does the first turn's entropy rise, does the 4-token window see it, and where does the tree branch?"""

import dataclasses
import tempfile

from course_lib import course_config, data
from course_lib.chapters import ch08_arpo as ch08
from course_lib.tasks import two_hop_search

cfg = ch08.preset("cpu")
root = dataclasses.replace(cfg, precise_share=0.5)
folder = tempfile.mkdtemp()
ch08.build_base(folder, seed=0, progress=False, config=root)
bases = {
    "committed base (5% precise)": data.load_base(ch08.BASE_NAME, "cpu"),
    "root base (50% precise)": data.load_base(folder, "cpu"),
}

for name, (model, tokenizer) in bases.items():
    course_config.seed_everything(0)
    held_out = ch08.evaluate(model, tokenizer, cfg, seed=1, keep=True)
    trajectories = held_out["trajectories"]
    window = {k: two_hop_search.entropy_after_tool(trajectories, tokenizer, k) for k in (4, 6)}
    first = ch08.entropy_traces(trajectories, tokenizer)["first action"]
    print(
        f"{name}: held-out success {held_out['success']:.3f}, "
        f"precise first search {held_out['precise_first_search']:.3f}"
    )
    print("  first action, entropy per token 1-6: " + " ".join(f"{v:.3f}" for v in first))
    for k, e in window.items():
        rise = e["after_tool_1_ambiguous"] - e["initial"]
        print(
            f"  window {k}: initial {e['initial']:.3f}, "
            f"after two candidates {e['after_tool_1_ambiguous']:.3f}, rise {rise:+.3f}"
        )
    tree = ch08.sample_both(model, tokenizer, dataclasses.replace(cfg, variance_prompts=32, ablations={}), seed=0)[
        "tree"
    ]
    for line in ch08.decision_lines(ch08.branch_decisions(tree["trajectories"], tree["stats"])):
        print("  tree (window 4): " + line)
