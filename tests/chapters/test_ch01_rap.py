"""Chapter 01: RAP's reward arithmetic, the LM's roles, and search over a (bad) learned world model."""

import math
from dataclasses import replace

import pytest
import torch

from course_lib import data
from course_lib.chapters import ch01_rap as ch01
from course_lib.envs.blocksworld import (
    distances_to,
    draw_problem,
    optimal_actions,
    parse_goal,
    parse_state,
    render_goal,
    render_state,
    split_of,
)
from course_lib.models import build_model
from course_lib.rl.warm_start import supervised_warm_start
from course_lib.search.blocks_lm import (
    BlocksLM,
    CorpusConfig,
    SplitRolesLM,
    build_blocks_tokenizer,
    corpus,
    examples,
    forgotten_hand,
    held_out_pairs,
    held_out_transition,
    held_out_transitions,
    split_plan,
    world_corpus,
)
from course_lib.search.mcts import MCTS, MCTSConfig
from course_lib.search.rap import ImaginedBlocksworld, RewardConfig, combine, state_confidence
from course_lib.tasks import blocks_planning

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer():
    return build_blocks_tokenizer()


@pytest.fixture(scope="module")
def random_lm(tokenizer):
    torch.manual_seed(0)
    return BlocksLM(build_model(tokenizer, "tiny", max_positions=64, **TINY).eval(), tokenizer)


def test_combine_is_rap_weighted_geometric_mean():
    terms = {"likelihood": 0.5, "confidence": 1.0, "self_eval": 0.25, "heuristic": 1.5}
    config = RewardConfig()
    m = (0.5 * 1.0 * 0.25) ** (1 / 3)
    assert combine(terms, config) == pytest.approx(m**0.5 * 1.5**0.5)
    # simulation's local reward leaves out the sampled confidence
    assert combine(terms, config, fast=True) == pytest.approx((0.5 * 0.25) ** 0.25 * 1.5**0.5)
    assert combine(terms, replace(config, components=("heuristic",))) == 1.5
    assert combine(terms, replace(config, components=("likelihood", "self_eval"))) == pytest.approx(math.sqrt(0.125))
    # the goal bonus dominates: 100 ** 0.5 = 10 times the model term
    assert combine({**terms, "heuristic": 100.0}, config) == pytest.approx(m**0.5 * 10)


def test_state_confidence():
    assert state_confidence(["x", "x", "y", "x"]) == 0.75
    assert state_confidence(["x", "y"]) == 0.5
    assert state_confidence([]) == 0.0


def test_split_plan():
    assert split_plan("unstack b a put-down b pick-up c stack c a") == [
        "unstack b a",
        "put-down b",
        "pick-up c",
        "stack c a",
    ]
    assert split_plan("a pick-up") == ["a", "pick-up"]
    assert split_plan("") == []


def test_corpus_formats_and_held_out_transitions(tokenizer):
    texts = corpus(CorpusConfig(plans=20, steps=20, transitions=50), seed=0)
    for kind, prefix in (("plan", "goal"), ("step", "goal"), ("world", "state")):
        assert len(texts[kind]) >= 20 and all(p.startswith(prefix) for p, _ in texts[kind])
    for prompt, _ in texts["world"]:
        state, action = prompt[len("state ") : -len(" next")].split(" act ")
        assert not held_out_transition(state, action)
    assert all(c.endswith(("good", "bad")) for _, c in texts["step"])
    rows = examples(tokenizer, texts["plan"][:3])
    for ids, mask in rows:
        assert tokenizer.unk_token_id not in ids and len(ids) == len(mask) and mask[-1] == 1 and mask[0] == 0
    held = held_out_transitions()
    total = len(held_out_transitions(share=1.0))
    assert 0.1 < len(held) / total < 0.3 and all(held_out_transition(s, a) for s, a, _ in held[:50])


def test_step_examples_follow_episodes_and_are_labelled_by_optimality():
    """Steps are recorded along demonstrator episodes: labels say whether the action is optimal,
    no held-out problem appears, and states one step from the goal are common (drawing states
    uniformly made them about 1 in 30 examples, and the policy prior never learnt them)."""
    steps = corpus(CorpusConfig(plans=1, steps=600, transitions=1), seed=3)["step"]
    assert len(steps) == 600
    near = 0
    for prompt, completion in steps:
        goal_text, state_text = prompt.removeprefix("goal ").removesuffix(" act").split(" state ")
        goal, state = parse_goal(goal_text), parse_state(state_text)
        action, label = completion.removesuffix(" eval good").removesuffix(" eval bad"), completion.split()[-1]
        assert split_of(state, goal) == "train" and state != goal
        assert label == ("good" if action in optimal_actions(state, goal) else "bad")
        near += distances_to(goal)[state] == 1
    assert near / len(steps) > 0.05


def _prompt_pair(prompt: str, word: str) -> tuple[str, str]:
    goal, _, rest = prompt.removeprefix("goal ").partition(" state ")
    return rest.removesuffix(f" {word}"), goal


def _plan_states(prompt: str, completion: str) -> list[str]:
    """The states a plan demonstration passes through, its start included and its goal left out."""
    from course_lib.envs.blocksworld import apply_action

    state_text, _ = _prompt_pair(prompt, "plan")
    state, states = parse_state(state_text), []
    for action in split_plan(completion):
        states.append(render_state(state))
        state = apply_action(state, action)
    return states


def test_corpus_leaves_out_every_sub_problem_of_the_held_out_problems():
    """Held-out problems chosen among the unfiltered corpus's own prompts (so the test can fail): with them
    held out, no plan or step prompt is one of their (state, goal) sub-problems and no plan passes through one."""
    small = CorpusConfig(plans=400, steps=400, transitions=1)
    plain = corpus(small, seed=5)
    problems = [_prompt_pair(p, "act") for p, _ in plain["step"][:60]]  # (init, goal): a start on the path
    problems += [_prompt_pair(p, "plan") for p, _ in plain["plan"][:60]]
    pairs = held_out_pairs(problems)
    assert {_prompt_pair(p, "act") for p, _ in plain["step"]} & pairs  # the leak the filter must remove
    filtered = corpus(replace(small, held_out=lambda: problems), seed=5)
    assert len(filtered["step"]) == len(filtered["plan"]) == 400
    assert not {_prompt_pair(p, "act") for p, _ in filtered["step"]} & pairs
    assert not {_prompt_pair(p, "plan") for p, _ in filtered["plan"]} & pairs
    assert not any(
        (state, _prompt_pair(p, "plan")[1]) in pairs for p, c in filtered["plan"] for state in _plan_states(p, c)
    )


def test_chapter_corpus_holds_out_exactly_the_task_sets_validation_and_test_problems():
    tasks = data.load_tasks(blocks_planning.TASKS_NAME)
    pool = {(r["init"], r["goal"]) for split in ("validation", "test") for r in tasks[split]}
    assert set(blocks_planning.held_out_problems()) == pool and len(pool) == 1080
    assert ch01.preset("cpu").corpus.held_out is blocks_planning.held_out_problems
    assert ch01.preset("gpu").corpus.held_out is blocks_planning.held_out_problems
    # no train-split problem of the task set is held out (that split stays disjoint from the pool)
    assert not {(r["init"], r["goal"]) for r in tasks["train"]} & pool


def test_world_corpus_optimistic_errors_are_forgotten_hands_on_unstack_only():
    clean = world_corpus(3000, seed=1)
    optimistic = world_corpus(3000, seed=1, optimistic_share=0.5)
    assert [p for p, _ in clean] == [p for p, _ in optimistic]  # same draws, only labels differ
    changed = 0
    for (prompt, right), (_, label) in zip(clean, optimistic, strict=True):
        state_text, action = prompt.removeprefix("state ").removesuffix(" next").split(" act ")
        assert not held_out_transition(state_text, action)
        if forgotten_hand(state_text, action, 0.5):
            changed += 1
            block = action.split()[1]
            after = parse_state(right)  # the true next state holds the block; the optimistic one has put it down
            assert after[1] == block and parse_state(label) == (tuple(sorted([*after[0], (block,)])), None)
        else:
            assert label == right
    assert 0.08 < changed / len(clean) < 0.3
    assert not forgotten_hand("a b | hand empty", "pick-up c", 1.0) and forgotten_hand(
        "a b | hand empty", "unstack b a", 1.0
    )


def test_split_roles_lm_takes_next_states_from_the_world_lm_only(random_lm, tokenizer):
    world = BlocksLM(random_lm.model, tokenizer)
    world.world_cache[("a | b | hand empty", "pick-up a")] = "b | hand a"
    policy = BlocksLM(random_lm.model, tokenizer)
    policy.world_cache[("a | b | hand empty", "pick-up a")] = "garbage"
    both = SplitRolesLM(policy, world)
    assert both.predict([("a | b | hand empty", "pick-up a")]) == ["b | hand a"]
    both.step_scores("b a", "a | b | hand empty", ["pick-up a"])
    assert policy.calls["step"] == 1 and world.calls["step"] == 0


def test_step_scores_are_log_probs_and_probabilities(random_lm):
    scores = random_lm.step_scores("a b", "a | b | hand empty", ["pick-up a", "pick-up b"])
    for logp, p_good in scores:
        assert logp < 0 and 0 < p_good < 1
    # cached: the same call does not run the model again
    calls = random_lm.calls["step"]
    assert random_lm.step_scores("a b", "a | b | hand empty", ["pick-up a"])[0] == scores[0]
    assert random_lm.calls["step"] == calls


def test_malformed_world_model_predictions_are_failed_nodes(random_lm):
    """An untrained world model writes garbage: the search must survive it, marking failed nodes."""
    expand = ImaginedBlocksworld(random_lm, "a b c", RewardConfig(confidence_samples=2), torch.Generator())
    children = expand("a | b | c | hand empty", 0)
    assert [c.action for c in children] == ["pick-up a", "pick-up b", "pick-up c"]
    assert all(c.failed and c.reward == 0.0 for c in children)
    assert expand("this is not a state", 0) == []
    random_lm.world_cache[("a | b | c | hand empty", "pick-up a")] = "b | c | hand a"  # a good prediction
    random_lm.world_cache[("a | b | c | hand empty", "pick-up b")] = "a | a | hand b"  # a block twice
    children = expand("a | b | c | hand empty", 0)
    assert not children[0].failed and children[0].reward > 0 and children[1].failed
    result = MCTS(expand, MCTSConfig(iterations=5, depth_limit=4)).search("a | b | c | hand empty")
    assert not result.solved


def test_perfect_world_model_solves(random_lm, tokenizer):
    """With every prediction right (filled in from the simulator) the search finds the plan."""
    from course_lib.envs.blocksworld import draw_problem, successors

    init, goal = draw_problem(0, "test", 4)
    lm = BlocksLM(random_lm.model, tokenizer)
    frontier = [init]
    for _ in range(4):  # fill the world model's cache with the simulator's next state for every reachable step
        next_frontier = []
        for state in frontier:
            for action, nxt in successors(state).items():
                lm.world_cache[(render_state(state), action)] = render_state(nxt)
                next_frontier.append(nxt)
        frontier = next_frontier
    filled = dict(lm.world_cache)
    expand = ImaginedBlocksworld(lm, render_goal(goal), RewardConfig(components=("heuristic",)), torch.Generator())
    result = MCTS(expand, MCTSConfig(iterations=20, depth_limit=4)).search(render_state(init))
    assert lm.world_cache == filled  # every prediction the search used came from the simulator
    assert result.solved and ch01.execute(result.plan, render_state(init), render_goal(goal))["success"]


def test_execute_counts_and_rejects():
    assert ch01.execute(["pick-up a", "stack a b"], "a | b | hand empty", "b a") == {
        "success": True,
        "steps": 2,
        "invalid": False,
    }
    assert ch01.execute(["stack a b"], "a | b | hand empty", "b a")["invalid"]
    assert not ch01.execute([], "a | b | hand empty", "b a")["success"]
    assert not ch01.execute(["pick-up a", "put-down a"], "a | b | hand empty", "b a")["success"]


def test_validation_split_is_held_out_distinct_and_disjoint_from_test():
    rows = blocks_planning.validation_rows(per_length=8, test_draws=40)
    assert [rows["length"].count(n) for n in ch01.LENGTHS] == [8, 8, 8]
    pairs = list(zip(rows["init"], rows["goal"], strict=True))
    assert len(set(pairs)) == len(pairs)
    test = {(render_state(i), render_goal(g)) for n in ch01.LENGTHS for i, g in
            (draw_problem(seed, "test", n) for seed in range(40))}  # fmt: skip
    assert not test & set(pairs)
    for (init, goal), length in zip(pairs, rows["length"], strict=True):
        state, target = parse_state(init), parse_goal(goal)
        assert split_of(state, target) == "test"
        assert distances_to(target)[state] == length


def test_validation_split_refuses_more_problems_than_exist():
    with pytest.raises(ValueError, match="2-step"):
        blocks_planning.validation_rows(per_length=30, test_draws=10, max_draws=20)


def test_committed_validation_split_is_what_the_build_writes():
    committed = ch01.validation_problems()
    rows = blocks_planning.validation_rows()
    assert committed == {n: [(i, g) for i, g, m in zip(rows["init"], rows["goal"], rows["length"], strict=True)
                             if m == n] for n in ch01.LENGTHS}  # fmt: skip


def test_gpu_preset_builds_and_trains_a_few_steps(tokenizer):
    config = ch01.preset("gpu")
    assert config.model_preset == "small" and config.tasks_per_length >= 200
    model = build_model(tokenizer, config.model_preset, max_positions=64)
    texts = corpus(replace(config.corpus, plans=10, steps=10, transitions=10), seed=0)
    rows = [r for kind in texts for r in examples(tokenizer, texts[kind])]
    history = supervised_warm_start(
        model,
        rows,
        tokenizer.pad_token_id,
        replace(config.sft, steps=2, batch_size=4),
        torch.Generator().manual_seed(0),
    )
    assert history and math.isfinite(history[-1]["loss"])


def test_claims_logic():
    base = {"greedy": {2: 0.5, 4: 0.2, 6: 0.0}, "pass_k": {2: 0.9, 4: 0.5, 6: 0.1}}
    good = {
        1: {n: {"imagined": 0.5, "real": 0.4} for n in (2, 4, 6)},
        10: {n: {"imagined": 0.8, "real": 0.7} for n in (2, 4, 6)},
        20: {2: {"imagined": 1.0, "real": 1.0}, 4: {"imagined": 0.9, "real": 0.8}, 6: {"imagined": 0.7, "real": 0.5}},
    }
    assert all(c.passed for c in ch01.claims({**base, "mcts": good}))
    flat = {k: {n: {"imagined": 0.3, "real": 0.3} for n in (2, 4, 6)} for k in (1, 10, 20)}
    assert not any(c.passed for c in ch01.claims({**base, "mcts": flat}))
