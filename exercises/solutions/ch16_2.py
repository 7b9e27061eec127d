"""Exercise 16.2: one worked example in the prompt, and P3's reasoning has something to score.

P3 asks SmolLM2 to think in <think> tags on chapter 09's grid and gets no closed reasoning at temperature 1. Here the
system message also shows one worked turn (on a map that is not among the 16 asked), and the first turns of 16
held-out maps are sampled at temperature 1 with and without it: the share with a closed, non-empty reasoning, and for
those the retrieval accuracy of RAGEN-2's cross-scoring against chance.
"""

import torch

from course_lib.chapters import ch09_ragen as ch09
from course_lib.chapters import ch16_real_model as ch16
from course_lib.diagnostics import mutual_information, teacher_forced_logp
from course_lib.engine.prompt_format import ChatFormat
from course_lib.envs.base import distinct_seeds

EXAMPLE = (
    " Example. Board: you r1 c1 goal r2 c2 holes r1 c2. Reply: <think> the hole is right of me, so I go down first"
    " </think> <answer> down </answer>"
)
model, tokenizer = ch16.load_model()
seeds = distinct_seeds(lambda: ch09.make_env("test"), 16, start=900_000)
for name, system in (("instruction only", ch16.GRID_INSTRUCTION), ("with a worked example", ch16.GRID_INSTRUCTION
                                                                      + EXAMPLE)):  # fmt: skip
    chat = ChatFormat(system=system)
    prompts = [chat.prompt_ids(tokenizer, ch09.make_env("test").reset(seed=s)[0]) for s in seeds]
    turns = ch16.sample_turns(model, tokenizer, prompts, 64, torch.Generator().manual_seed(0), ("</answer>",))
    pairs = []
    for prompt, (ids, _) in zip(prompts, turns):
        span = ch16.reasoning_span(tokenizer, ids)
        if span:
            pairs.append(([*prompt, *ids[: span[0]]], ids[span[0] : span[1]]))
    line = f"{name:22}: closed reasoning {len(pairs)}/16"
    if len(pairs) >= 2:
        found = mutual_information(
            teacher_forced_logp(model, *zip(*pairs), reuse_prompts=True), list(range(len(pairs)))
        )
        line += f", retrieval {found['retrieval_accuracy']:.2f} against chance {found['chance']:.2f}"
    print(line + f"; e.g. {ch16.turn_text(tokenizer, turns[0][0])[:70]!r}")
