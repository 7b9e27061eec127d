"""ToolRL's function-calling task: the noisy demonstrator (every kind of mistake, never a held-out triple) and the
examples the warm start trains on."""

import random

import pytest

from course_lib.chapters import ch05_toolrl as ch05
from course_lib.envs.function_calling import draw_task
from course_lib.tasks import function_calling


@pytest.fixture(scope="module")
def tokenizer():
    return ch05.build_tokenizer_for_chapter()


def test_noise_free_demonstrations_are_correct(tokenizer):
    clean = function_calling.Noise(format=0, name=0, key=0, value=0, missing=0, no_tool_call=0)
    import random

    from course_lib.envs.toolrl_reward import toolrl_reward

    rng = random.Random(0)
    for seed in range(50):
        task = draw_task(seed, "train")
        best = 4.0 if task.calls else 1.0
        assert toolrl_reward(function_calling.noisy_answer(task, rng, clean), list(task.calls))["total"] == best


def test_noisy_demonstrations_make_every_kind_of_mistake():
    import random

    from course_lib.envs.toolrl_reward import toolrl_reward

    rng = random.Random(0)
    scores = []
    for seed in range(400):
        task = draw_task(seed, "train")
        if task.calls:
            answer = function_calling.noisy_answer(task, rng, function_calling.Noise())
            scores.append(toolrl_reward(answer, list(task.calls)))
    assert any(s["format"] == 0 for s in scores)
    assert any(-3 < s["correct"] < 3 for s in scores)
    assert 0.1 < sum(s["total"] == 4.0 for s in scores) / len(scores) < 0.6


def test_missing_call_noise_drops_the_last_call_of_a_multi_call_answer():
    import random

    from course_lib.envs.toolrl_reward import parse_calls

    only_missing = function_calling.Noise(format=0, name=0, key=0, value=0, missing=1, no_tool_call=0)
    rng = random.Random(0)
    for seed in range(20):
        task = draw_task(seed, "train", no_tool_share=0.0, two_call_share=0.5, three_call_share=0.5)
        calls = parse_calls(function_calling.noisy_answer(task, rng, only_missing))
        assert [name for name, _ in calls] == [name for name, _ in task.calls[:-1]]


def test_noise_never_writes_a_held_out_triple_but_still_errs():
    """The warm start's value, key and tool-name noise must not write a (tool, parameter, value) triple that
    only the novel split asks for (the leak the audit found before the base was rebuilt), yet still make
    each kind of mistake."""
    from course_lib.envs.function_calling import held_out
    from course_lib.envs.toolrl_reward import parse_calls

    heavy = function_calling.Noise(format=0, name=0.5, key=0.5, value=0.5, missing=0, no_tool_call=0)
    rng = random.Random(0)
    wrong_value = wrong_key = wrong_name = 0
    for seed in range(3000):
        task = draw_task(seed, "train", no_tool_share=0.0)
        calls = parse_calls(function_calling.noisy_answer(task, rng, heavy))
        assert not [(n, k, v) for n, args in calls for k, v in args if held_out(n, k, v)], task
        for (name, args), (true_name, true_args) in zip(calls, task.calls, strict=True):
            wrong_name += name != true_name
            wrong_key += any(k != tk for (k, _), (tk, _) in zip(args, true_args, strict=True))
            wrong_value += any(v != tv for (_, v), (_, tv) in zip(args, true_args, strict=True))
    assert min(wrong_value, wrong_key, wrong_name) > 1000


def test_examples_mask_only_the_response(tokenizer):
    ids, mask = function_calling.demonstration_examples(tokenizer, 1, 0, function_calling.Noise())[0]
    first = mask.index(1)
    assert tokenizer.convert_ids_to_tokens(ids[first]) in ("<think>", "<tool_call>", "<response>")
    assert all(mask[first:])


def test_the_warm_start_tokenises_the_audited_texts(tokenizer):
    """The warm start's token ids are the audited texts' (`demonstration_pairs`), each as BOS, question, response."""
    from course_lib.tokenizer import encode

    config = ch05.preset("cpu")
    built = function_calling.demonstration_examples(tokenizer, 50, 3, config.noise, config.demo_mix)
    texts = function_calling.demonstration_pairs(50, 3, config.noise, config.demo_mix)
    assert [ids for ids, _ in built] == [
        [tokenizer.bos_token_id, *encode(tokenizer, q), *encode(tokenizer, r)] for q, r in texts
    ]
