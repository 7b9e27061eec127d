"""Exercise 16.1: does SmolLM2 follow the answer format when it samples greedily?

P2 samples at temperature 1 over the full vocabulary, as RL samples. Here the same 16 held-out questions of chapter
00, with the same system message, are answered greedily (the most likely token each step) and at temperature 1, both
alone and after the calculator's result: the share of answers inside <answer> tags and the share right.
"""

import torch

from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import ch16_real_model as ch16
from course_lib.engine.prompt_format import ChatFormat
from course_lib.envs.base import distinct_seeds
from course_lib.tokenizer import encode

model, tokenizer = ch16.load_model()
chat = ChatFormat(system=ch16.ARITHMETIC_INSTRUCTION)
seeds = distinct_seeds(lambda: ch00.make_env("test"), 16, start=900_000)


def prefixes(with_result):
    made, envs = [], []
    for seed in seeds:
        env = ch00.make_env("test")
        question, _ = env.reset(seed=seed)
        prefix = chat.prompt_ids(tokenizer, question)
        if with_result:
            a, op, b = env.problem
            call = encode(tokenizer, f"<tool_call> {a} {op} {b} </tool_call>")
            response = env.step(tokenizer.decode(call))[0]
            prefix = [*prefix, *call, *chat.observation_ids(tokenizer, response, call[-1])]
        made.append(prefix)
        envs.append(env)
    return made, envs


for with_result in (False, True):
    for rule in ("greedy", "temperature 1"):
        made, envs = prefixes(with_result)
        turns = [ids for ids, _ in ch16.sample_turns(model, tokenizer, made, 32, torch.Generator().manual_seed(0),
                                                     ("</answer>",), greedy=rule == "greedy")]  # fmt: skip
        texts = [ch16.turn_text(tokenizer, ids) for ids in turns]
        tagged = sum("<answer>" in text and "</answer>" in text for text in texts)
        right = sum(bool(env.step(text)[4].get("success")) for env, text in zip(envs, texts))
        arm = "after the result" if with_result else "alone"
        print(f"{arm:16} {rule:13}: in <answer> tags {tagged}/16, right {right}/16; e.g. {texts[0][:60]!r}")
