"""Chapter 08's first half: demonstrations (training questions only, token for token what a rollout of the same
actions holds, the demonstrator's share of precise searches and its mistake rate), the entropy measure after tool
responses on hand-made trajectories, and the evaluation of the committed base."""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import pytest
import torch

from course_lib import data, models
from course_lib.chapters import ch08_arpo as ch08
from course_lib.chapters import command
from course_lib.engine.bookkeeping import alignment_errors
from course_lib.engine.rollout import RolloutEngine, Trajectory
from course_lib.envs.two_hop_qa import all_questions, expert_actions, split_of, vocabulary
from course_lib.models import build_model
from course_lib.rl.train import evaluate_policy
from course_lib.rl.warm_start import demonstration_examples
from course_lib.tasks import bases, two_hop_search
from course_lib.tokenizer import build_tokenizer, encode

QUESTIONS = {f"<question> {q.text()} </question>": q for q in all_questions()}
"""Prompt text -> question."""


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(vocabulary())


def hop2_person(completion: str) -> str:
    """The person a demonstration's second search asks about."""
    return " ".join(completion.split("<tool_call>")[2].split()[1:3])


def hop1_is_precise(completion: str) -> bool:
    """Whether a demonstration's first search is the precise company query `NAME in CITY ROLE` (a company name
    is two words, neither of them `in`)."""
    return completion.split("</tool_call>")[0].split()[4] == "in"


def test_demonstrations_are_training_questions_of_both_kinds(tokenizer):
    texts = ch08.demonstration_texts(600, seed=3)
    questions = [QUESTIONS[prompt] for prompt, _ in texts]
    assert all(split_of(q.name) == "train" for q in questions)
    assert 0.4 < sum(q.ambiguous for q in questions) / len(questions) < 0.6
    for prompt, completion in texts:
        assert tokenizer.unk_token_id not in encode(tokenizer, f"{prompt} {completion}")
        assert completion.count("<tool_call>") == 2 and completion.endswith("</answer>")


class ScriptedEngine(RolloutEngine):
    """A rollout engine whose 'sampling' emits a fixed token sequence (one trajectory at a time): a scripted
    policy played through the engine's own bookkeeping."""

    def __init__(self, model, tokenizer, config, script: list[int]):
        super().__init__(model, tokenizer, config)
        self.script = deque(script)

    def sample(self, logits, generator):
        assert logits.shape[0] == 1, "one trajectory at a time"
        return [self.script.popleft()], [0.0], [0.0]


def actions_only(completion: str) -> str:
    """A demonstration's completion without its tool responses: the tokens the policy writes."""
    kept, inside = [], False
    for word in completion.split():
        inside = inside or word == "<tool_response>"
        if not inside:
            kept.append(word)
        inside = inside and word != "</tool_response>"
    return " ".join(kept)


def test_demonstrations_are_token_for_token_what_the_engine_produces(tokenizer):
    """Replaying a demonstration's actions through `RolloutEngine.rollout` on its question gives exactly the
    token ids of `demonstration_examples`, and the loss mask too (tool responses masked in both)."""
    config = ch08.Chapter08Config()
    torch.manual_seed(0)
    model = build_model(tokenizer, "tiny", max_positions=128, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64).eval()  # fmt: skip
    count, seed = 24, 5
    texts = ch08.demonstration_texts(count, seed, config)
    examples = demonstration_examples(tokenizer, texts)
    wrong = 0
    for task_seed, (prompt, completion), (ids, mask) in zip(
        ch08.demonstration_seeds(count, seed), texts, examples, strict=True
    ):
        engine = ScriptedEngine(model, tokenizer, config.sampling, encode(tokenizer, actions_only(completion)))
        [trajectory] = engine.rollout([ch08.make_env("train", config)], [task_seed])
        assert not engine.script, "every scripted token was used"
        assert trajectory.env.transcript.observations[0] == prompt
        assert trajectory.token_ids == ids and trajectory.loss_mask == mask
        assert alignment_errors(trajectory, tokenizer) == []
        assert trajectory.terminated and not trajectory.cut
        wrong += not trajectory.success
    assert wrong > 0, "the naive episodes should pick a wrong candidate in some of these ambiguous questions"
    assert 0 < sum(hop1_is_precise(completion) for _, completion in texts) < count, "both hop-1 queries occur"


@pytest.mark.parametrize("precise_share", [0.0, ch08.Chapter08Config().precise_share, 0.6, 1.0])
def test_demonstrator_searches_precisely_its_precise_share_and_picks_wrong_half_the_rest(precise_share):
    config = ch08.Chapter08Config(precise_share=precise_share)
    texts = ch08.demonstration_texts(4000, seed=1, config=config)
    precise = [hop1_is_precise(completion) for _, completion in texts]
    # 4,000 demonstrations: the standard error of the share is at most 0.008
    assert sum(precise) / len(precise) == pytest.approx(precise_share, abs=0.03)
    for (prompt, completion), is_precise in zip(texts, precise, strict=True):
        question = QUESTIONS[prompt]
        expected = (
            f"search {question.name} in {question.city} {question.role}"
            if is_precise
            else (f"search {question.name} {question.role}")
        )
        assert completion.startswith(f"<tool_call> {expected} </tool_call> <tool_response> ")
        if is_precise:  # one candidate listed, the right one
            assert completion.split("</tool_response>")[0].count(";") == 0
            assert hop2_person(completion) == question.bridge
    picks = [
        hop2_person(completion) == QUESTIONS[prompt].bridge
        for (prompt, completion), is_precise in zip(texts, precise, strict=True)
        if QUESTIONS[prompt].ambiguous
    ]
    wrong = 1 - sum(picks) / len(picks)
    # about 2,000 ambiguous demonstrations: the standard error of the rate is at most 0.011
    assert wrong == pytest.approx((1 - precise_share) / 2, abs=0.04)
    if precise_share == 1.0:
        assert wrong == 0.0


def test_unambiguous_demonstrations_are_always_right():
    for prompt, completion in ch08.demonstration_texts(300, seed=2):
        question = QUESTIONS[prompt]
        if not question.ambiguous:
            assert hop2_person(completion) == question.bridge
            assert completion.endswith(f"<answer> {question.answer} </answer>")


def fake(turns: list[tuple[list[float], int]], infos: list[dict]) -> Trajectory:
    """A trajectory with a 3-token prompt and, per turn, policy tokens of the given entropies followed by that
    many observation tokens (given entropy 9.9, which a correct measure never reads: they are not the policy's)."""
    t = Trajectory(env=None, token_ids=[], loss_mask=[], logprobs=[], entropies=[], turn_ids=[], infos=infos)

    def add(mask: int, turn: int, entropy: float) -> None:
        t.token_ids.append(0)
        t.loss_mask.append(mask)
        t.logprobs.append(0.0)
        t.entropies.append(entropy)
        t.turn_ids.append(turn)

    for _ in range(3):
        add(0, -1, 9.9)
    for turn, (policy, observed) in enumerate(turns):
        for entropy in policy:
            add(1, turn, entropy)
        for _ in range(observed):
            add(0, turn, 9.9)
    return t


def test_entropy_after_tool_by_hand(tokenizer):
    tool = {"tool_result": "some result"}
    trajectories = [
        # ambiguous: search, search, answer
        fake([([0.3, 0.6, 0.9], 2), ([1.2, 0.0, 0.6], 1), ([0.5, 0.5], 0)],
             [{**tool, "ambiguous": True}, {**tool, "ambiguous": True}, {"ambiguous": True}]),
        # unambiguous: an invalid action first (feedback is no tool response), then one search, then an answer
        fake([([0.1], 2), ([0.2, 0.4], 2), ([2.0], 0)],
             [{"valid": False, "ambiguous": False}, {**tool, "ambiguous": False}, {"ambiguous": False}]),
        # ambiguous, cut by the length cap right after its first tool response: nothing after it
        fake([([0.7, 0.7, 0.7], 4)], [{**tool, "ambiguous": True}]),
    ]  # fmt: skip
    log_v = math.log(len(tokenizer))
    result = two_hop_search.entropy_after_tool(trajectories, tokenizer, k=2)
    expected = {
        "initial": (0.45 + 0.1 + 0.7) / 3,
        "after_tool_1": (0.6 + 2.0) / 2,
        "after_tool_1_ambiguous": 0.6,
        "after_tool_1_unambiguous": 2.0,
        "after_tool_2": 0.5,
        "after_tool_2_ambiguous": 0.5,
    }
    for key, value in expected.items():
        assert result[key] == pytest.approx(value / log_v), key
    assert math.isnan(result["after_tool_2_unambiguous"]) and result["count_after_tool_2_unambiguous"] == 0
    counts = {key: result[f"count_{key}"] for key in expected}
    assert counts == {"initial": 3, "after_tool_1": 2, "after_tool_1_ambiguous": 1, "after_tool_1_unambiguous": 1,
                      "after_tool_2": 1, "after_tool_2_ambiguous": 1}  # fmt: skip
    # a longer window takes every policy token of the turn (ARPO's code reads up to 20)
    assert two_hop_search.entropy_after_tool(trajectories, tokenizer, k=20)["initial"] == pytest.approx(
        (0.6 + 0.1 + 0.7) / 3 / log_v
    )


def test_test_seeds_are_the_whole_test_split():
    config = ch08.preset("cpu")
    seeds = ch08.test_seeds(config.eval_tasks)
    env = ch08.make_env("test", config)
    questions = set()
    for seed in seeds:
        env.reset(seed=seed)
        questions.add(env.question)
    assert len(questions) == len(seeds) == config.eval_tasks == 258
    assert all(split_of(q.name) == "test" for q in questions)


def test_env_follows_the_config():
    config = ch08.Chapter08Config(ambiguous_share=0.25, max_tool_calls=2, max_turns=5)
    env = ch08.make_env("test", config)
    assert (env.split, env.ambiguous_share, env.max_tool_calls, env.max_turns) == ("test", 0.25, 2, 5)


def test_sampling_fits_the_longest_action_and_episode(tokenizer):
    config = ch08.preset("cpu")
    question = next(q for q in all_questions() if q.ambiguous)
    env = ch08.make_env("train", config)
    prompt, _ = env.reset(options={"question": question})
    precise = expert_actions(question)[0]  # the longest action
    assert len(encode(tokenizer, precise)) == 8 <= config.sampling.max_turn_tokens
    hop1 = f"<tool_call> search {question.name} {question.role} </tool_call>"
    length = 1 + len(encode(tokenizer, prompt))
    for _ in range(config.max_tool_calls):  # every search allowed, each answered by hop 1's long response
        observation, *_ = env.step(hop1)
        length += len(encode(tokenizer, f"{hop1} {observation}"))
        assert len(encode(tokenizer, hop1)) <= config.sampling.max_turn_tokens
    length += len(encode(tokenizer, f"<answer> {question.answer} </answer>"))
    assert length <= config.sampling.max_total_tokens <= two_hop_search.MAX_POSITIONS


@pytest.fixture(scope="module")
def base_evaluation():
    """The committed base on the whole test split (seed 1): `evaluate`'s numbers and the trajectories behind them."""
    model, tokenizer = data.load_base(ch08.BASE_NAME)
    config = ch08.preset("cpu")
    stats = ch08.evaluate(model, tokenizer, config, seed=1)
    _, trajectories = evaluate_policy(
        model, tokenizer, lambda: ch08.make_env("test", config), ch08.test_seeds(config.eval_tasks), config.sampling, 1
    )
    return stats, trajectories, tokenizer, config


def first_search(trajectory: Trajectory) -> dict | None:
    """The info of a trajectory's first search step (None if it made none)."""
    return next((info for info in trajectory.infos if "tool_result" in info), None)


def test_committed_base_is_in_the_band_and_uncertain_after_ambiguous_responses(base_evaluation):
    """The course's rule before RL (held-out success between 10% and 60%) and C8.1's premise: right after the
    first tool response the base is more uncertain on ambiguous questions than on unambiguous ones."""
    stats, trajectories, _, _ = base_evaluation
    for key in ("success", "success_ambiguous", "success_unambiguous", "tool_calls", "tool_calls_per_solved",
                "invalid_rate", "entropy_initial", "entropy_after_tool_1_ambiguous",
                "entropy_after_tool_1_unambiguous", "entropy_after_tool_2"):  # fmt: skip
        assert key in stats and 0.0 <= stats[key] <= 3.0, key
    assert stats["success"] == pytest.approx(sum(t.success for t in trajectories) / len(trajectories))
    assert (stats["count_ambiguous"], stats["count_unambiguous"]) == (132, 126)
    assert 0.1 <= stats["success"] <= 0.6
    assert stats["success_unambiguous"] >= 0.9, "the base copies a single candidate's name and the answer"
    assert stats["success_ambiguous"] < 0.3
    # the invalid actions are mostly what it writes after a mixed-name search found no one
    assert 1.9 <= stats["tool_calls"] <= 2.1 and stats["invalid_rate"] < 0.08
    assert stats["entropy_after_tool_1_ambiguous"] > 5 * stats["entropy_after_tool_1_unambiguous"]
    assert stats["entropy_after_tool_1_ambiguous"] > 5 * stats["entropy_initial"]


def test_committed_base_searches_precisely_sometimes_and_then_succeeds(base_evaluation):
    """What RL can reinforce: the base's hop 1 is sometimes the precise query (copied from the question), and then
    it solves ambiguous held-out questions too; it is uncertain after a two-candidate response, not after one."""
    _, trajectories, tokenizer, config = base_evaluation
    firsts = [first_search(t) for t in trajectories]
    precise = [bool(info and info["precise"]) for info in firsts]
    assert 0.02 <= sum(precise) / len(precise) <= 0.12
    solved = [t.success for t, p in zip(trajectories, precise, strict=True) if p and t.infos[0]["ambiguous"]]
    assert len(solved) >= 3 and sum(solved) / len(solved) >= 0.8
    two = [t for t, info in zip(trajectories, firsts, strict=True) if info and " ; " in info["tool_result"]]
    one = [t for t, info in zip(trajectories, firsts, strict=True) if info and " ; " not in info["tool_result"]]
    assert len(two) >= 90 and len(one) >= 100
    after_two = two_hop_search.entropy_after_tool(two, tokenizer, config.entropy_tokens)
    after_one = two_hop_search.entropy_after_tool(one, tokenizer, config.entropy_tokens)
    assert after_two["after_tool_1"] >= 0.03 and after_two["after_tool_1"] > 5 * after_one["after_tool_1"]
    assert after_two["after_tool_1"] > 5 * after_two["initial"]


def test_gpu_preset_builds_and_evaluates_on_cpu(tmp_path):
    """The gpu preset's model size runs end to end (shrunk budgets, CPU)."""
    config = ch08.preset("gpu")
    assert config.model_preset == "small" and config.demonstrations > ch08.preset("cpu").demonstrations
    config = dataclasses.replace(
        config, demonstrations=32, sft=dataclasses.replace(config.sft, steps=3, batch_size=4, warmup_steps=1),
        eval_tasks=8,
    )  # fmt: skip
    history = ch08.build_base(tmp_path, seed=0, progress=False, config=config)
    assert len(history) >= 1
    model, tokenizer = models.load(tmp_path)
    assert models.count_parameters(model) > 1_000_000
    stats = ch08.evaluate(model, tokenizer, config, seed=0)
    assert 0.0 <= stats["success"] <= 1.0 and stats["count_ambiguous"] + stats["count_unambiguous"] == 8


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Two RL iterations, eight questions per sampler: every claim number is there and finite, both samplers
    used the same budget, and the soft/hard credit identity holds on the base's tree (C8.4 is exact)."""
    config = ch08.preset()
    config = dataclasses.replace(
        config, grpo=dataclasses.replace(config.grpo, iterations=2, eval_every=1), variance_prompts=8, eval_tasks=40,
        ablations={"arpo_n2": config.ablations["arpo_n2"]},
    )  # fmt: skip
    results = ch08.run(0, config)
    numbers = ch08.claim_numbers(results)
    assert all(math.isfinite(value) for value in numbers.values())
    assert set(results["histories"]) == {"grpo", "arpo", "arpo_n2"}
    for arm in ("grpo", "arpo", "arpo_n2"):
        assert 0.0 <= numbers[f"{arm}_precise"] <= 1.0 and 0.0 <= numbers[f"{arm}_success"] <= 1.0
    assert "arpo_n2_train_branch_share" in numbers and "grpo_train_branch_share" not in numbers
    assert {key.split("/")[0] for key in ch08.curves(results)} == {"grpo", "arpo", "arpo_n2"}
    n2 = results["samplers"]["arpo_n2"]
    assert n2["tree_branch_share"] + n2["tree_refill_share"] == pytest.approx(1 - 2 / config.grpo.group_size)
    assert "arpo_n2_varied_share" in numbers and len(ch08.sampler_lines(results["samplers"])) == 3
    assert results["samplers"]["arpo"]["tree_branch_share"] + results["samplers"]["arpo"]["tree_refill_share"] == (
        pytest.approx(1 - config.grpo.tree.global_samples / config.grpo.group_size)
    )
    assert results["samplers"]["arpo"]["policy_tokens"] < results["samplers"]["grpo"]["policy_tokens"]
    verdicts = {claim.id: claim.passed for claim in ch08.claims(results)}
    assert verdicts["C8.4"] and set(verdicts) == {"C8.1", "C8.2", "C8.3", "C8.4"}
    assert "tree_branches" in results["histories"]["arpo"][0] and "tree_branches" not in results["histories"]["grpo"][0]


def test_ablation_arms_change_only_the_tree():
    config = ch08.Chapter08Config()
    assert ch08.arm_names(config) == ["grpo", "arpo", "arpo_n2", "arpo_n6", "arpo_entropy"]
    arpo = ch08.arm_config(config, "arpo")
    for arm, tree in config.ablations.items():
        ablation = ch08.arm_config(config, arm)
        assert ablation.sampler == "tree" and ablation.tree == tree
        assert dataclasses.replace(ablation, tree=arpo.tree) == arpo
    assert [config.ablations[arm].global_samples for arm in ("arpo_n2", "arpo_n6")] == [2, 6]
    assert ch08.GLOBAL_SAMPLES_ARMS == {2: "arpo_n2", 4: "arpo", 6: "arpo_n6", 8: "grpo"}
    assert arpo.tree.global_samples == 4 and ch08.arm_config(config, "grpo").sampler == "groups"


def _step(**info) -> dict:
    return {"ambiguous": True, **info}


def test_precise_first_search_reads_the_first_search_only():
    def make(infos: list[dict]) -> Trajectory:
        return Trajectory(env=None, token_ids=[], loss_mask=[], logprobs=[], entropies=[], turn_ids=[], infos=infos)

    # an invalid action first (feedback is no tool response), then the searches
    precise_then_not = make([_step(), _step(tool_result="a", precise=True), _step(tool_result="b", precise=False)])
    not_then_precise = make([_step(), _step(tool_result="a", precise=False), _step(tool_result="b", precise=True)])
    no_search = make([_step(), _step()])
    assert two_hop_search.first_search_precise(precise_then_not)
    assert not two_hop_search.first_search_precise(not_then_precise) and not two_hop_search.first_search_precise(
        no_search
    )
    stats = two_hop_search.episode_stats([precise_then_not, not_then_precise, no_search, precise_then_not])
    assert stats["precise_first_search"] == pytest.approx(0.5)


def _seed_numbers(success: list[float], precise: list[float]) -> dict[str, float]:
    arms = ch08.GLOBAL_SAMPLES_ARMS.values()
    return {f"{arm}_success": s for arm, s in zip(arms, success, strict=True)} | {
        f"{arm}_precise": p for arm, p in zip(arms, precise, strict=True)
    }


def test_global_samples_trend_verdicts_by_hand():
    rising = [0.1, 0.2, 0.3, 0.4]
    # two seeds whose means rise strictly although one seed alone does not
    seeds = [_seed_numbers([0.1, 0.3, 0.2, 0.5], rising), _seed_numbers([0.1, 0.1, 0.6, 0.5], rising)]
    trend = ch08.global_samples_trend(seeds)
    assert trend["success"] == pytest.approx([0.1, 0.2, 0.4, 0.5]) and trend["precise"] == pytest.approx(rising)
    assert (trend["p1"], trend["p2"], trend["weak"], trend["verdict"]) == (True, True, True, "supported")
    trend = ch08.global_samples_trend([_seed_numbers([0.1, 0.2, 0.5, 0.4], rising)])  # N=6 above N=8
    assert (trend["p1"], trend["weak"], trend["verdict"]) == (False, True, "partly supported")
    trend = ch08.global_samples_trend([_seed_numbers(rising, [0.1, 0.1, 0.3, 0.4])])  # a tie is not a rise
    assert (trend["p2"], trend["weak"], trend["verdict"]) == (False, False, "not supported")
    assert ch08.global_samples_trend([_seed_numbers([0.4, 0.3, 0.2, 0.1], rising)])["verdict"] == "not supported"
    assert len(ch08.trend_lines(trend)) == 4
    with pytest.raises(ValueError):
        ch08.global_samples_trend([])


def test_entropy_traces_by_hand(tokenizer):
    two = {"tool_result": "x in a ceo p q ; x in b ceo r s"}
    one = {"tool_result": "x in a ceo p q"}
    none = {"tool_result": "no result"}
    trajectories = [
        fake([([0.2, 0.4, 0.6], 2), ([1.0, 2.0], 1), ([0.5], 0)], [two, one, {}]),  # the second search is ignored
        fake([([0.4], 2), ([3.0, 1.0, 5.0], 0)], [two, {}]),
        fake([([0.6, 0.2], 2), ([0.1], 0)], [one, {}]),
        fake([([0.0], 2), ([7.0], 0)], [none, {}]),  # a search that found no one: its next turn is left out
        fake([([0.3], 0)], [{"valid": False}]),  # no search at all: only its first action counts
    ]
    log_v = math.log(len(tokenizer))
    traces = ch08.entropy_traces(trajectories, tokenizer, positions=3)
    expected = {
        "first action": [(0.2 + 0.4 + 0.6 + 0.0 + 0.3) / 5, (0.4 + 0.2) / 2, 0.6],
        "after two candidates": [(1.0 + 3.0) / 2, (2.0 + 1.0) / 2, 5.0],
        "after one candidate": [0.1, math.nan, math.nan],
    }
    for kind, values in expected.items():
        assert traces[kind] == pytest.approx([v / log_v for v in values], nan_ok=True), kind
    assert [int(traces[f"count {kind}"]) for kind in ch08.TRACE_KINDS] == [5, 1, 2]


def test_branch_decisions_by_hand():
    from course_lib.engine.tree_rollout import TreeNode, TreeStats

    two = {"tool_result": "x in a ceo p q ; x in b ceo r s"}
    one = {"tool_result": "x in a ceo p q"}
    trajectories = [
        fake([([0.1], 1), ([0.2], 1), ([0.3], 0)], [two, one, {}]),
        fake([([0.1], 1), ([0.2], 0)], [one, {}]),
    ]
    node = lambda index, step, probability, branched: TreeNode(index, step, 0.0, 0.0, probability, branched)  # noqa: E731
    # trajectory 0 after its first search (two candidates) and its second (one); trajectory 1 after its first (one)
    stats = TreeStats(
        nodes=[node(0, 1, 0.6, True), node(0, 2, 0.5, False), node(1, 1, 0.3, True), node(0, 1, 0.8, False)]
    )
    out = ch08.branch_decisions(trajectories, stats)
    assert out["points_two_candidates"] == 2 and out["points_one_candidate"] == 2 and out["points_no_result"] == 0
    assert out["probability_two_candidates"] == pytest.approx(0.7) and out["branched_two_candidates"] == 0.5
    assert out["probability_one_candidate"] == pytest.approx(0.4) and out["branched_one_candidate"] == 0.5
    assert math.isnan(out["probability_no_result"]) and math.isnan(out["branched_no_result"])
    assert [ch08.response_kind(r) for r in ("no result", one["tool_result"], two["tool_result"])] == [
        "no result", "one candidate", "two candidates"
    ]  # fmt: skip


def test_a_fork_on_another_environment_runs_and_drops_the_claim_it_cannot_have(number_line_base):
    """Chapter 08 on the template environment (`number_line`) with a base folder of its own and the environment's
    stop tag: both samplers and every arm run (the tree forks the environment through `TextEnv.fork`), and C8.1,
    which reads two_hop_qa's planted ambiguity, prints "not applicable" while the other claims get verdicts."""
    from course_lib.course.claims import NOT_APPLICABLE
    from course_lib.engine.rollout import SamplingConfig

    config = ch08.preset("cpu")
    config = dataclasses.replace(
        config,
        env_name="number_line",
        base=number_line_base,
        sampling=SamplingConfig(max_turn_tokens=4, max_total_tokens=60, stop_tags=("</move>",)),
        grpo=dataclasses.replace(config.grpo, iterations=1, prompts_per_iteration=2, eval_every=1),
        eval_tasks=8,
        variance_prompts=2,
        ablations={},
    )
    results = ch08.run(0, config)
    assert set(results["histories"]) == set(ch08.ARMS)
    verdicts = {claim.id: claim for claim in ch08.claims(results)}
    assert verdicts["C8.1"].status.startswith(NOT_APPLICABLE) and "number_line has none" in verdicts["C8.1"].status
    assert all(verdicts[i].measured for i in ("C8.2", "C8.3", "C8.4"))


def test_a_fork_takes_its_environments_stop_tags_or_is_refused_naming_what_to_set(number_line_base, monkeypatch,
                                                                                   capsys):  # fmt: skip
    """Issue 42, item 1: `--set env_name=... --set base=...` kept chapter 08's stop tags, so turns ran to the 10-token
    cap instead of stopping at `</move>`. A fork whose sampling still stops at two_hop_qa's tags takes its
    environment's (`TextEnv.stop_tags`), and the run uses them; an environment that declares none is refused, by the
    command before anything runs, naming what to set; tags set for the fork are kept. The chapter's own config
    resolves to itself, unchanged."""
    from course_lib import envs
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.envs.template import NumberLineEnv

    own = ch08.preset("cpu")
    assert ch08.on_environment(own) == own and ch08.on_environment(own).sampling == ch08.Chapter08Config().sampling
    fork = dataclasses.replace(own, env_name="number_line", base=number_line_base)
    resolved = ch08.on_environment(fork)
    assert resolved.sampling == dataclasses.replace(own.sampling, stop_tags=("</move>",))
    assert "turns stop at ('</move>',), number_line's stop_tags" in capsys.readouterr().out
    chosen = dataclasses.replace(fork, sampling=SamplingConfig(max_turn_tokens=4, stop_tags=("</move>", "!")))
    assert ch08.on_environment(chosen) == chosen

    class Stopped(Exception):
        pass

    def base_for(base, config, texts, **kwargs):
        seen.append(config.sampling.stop_tags)
        raise Stopped

    seen = []
    monkeypatch.setattr(bases, "base_for", base_for)
    with pytest.raises(Stopped):
        ch08.run(0, fork)
    assert seen == [("</move>",)], "the run samples with the environment's stop tags"

    class Untagged(NumberLineEnv):
        stop_tags = ()

    envs.register("untagged_line_08", Untagged)
    untagged = dataclasses.replace(fork, env_name="untagged_line_08")
    with pytest.raises(ValueError, match=r"would stop its turns at \('</tool_call>', '</answer>'\), two_hop_qa's"):
        ch08.on_environment(untagged)
    with pytest.raises(SystemExit):
        command.main(ch08.CHAPTER, ["--seeds", "0", "--set", "env_name=untagged_line_08",
                                     "--set", f"base={number_line_base}"])  # fmt: skip
    error = capsys.readouterr().err
    assert "set sampling.stop_tags" in error and "Untagged.stop_tags" in error and seen == [("</move>",)]


def test_a_fork_without_ambiguity_prints_no_ambiguous_nan():
    """Issue 42, item 16: on an environment without two_hop_qa's planted ambiguity (C8.1 not applicable), the summary
    leaves the ambiguous and unambiguous numbers out instead of printing `ambiguous nan`; the chapter's own keeps
    them."""
    nan = float("nan")
    base = {"success": 0.5, "success_ambiguous": nan, "success_unambiguous": nan, "entropy_initial": 0.1,
            "entropy_after_tool_1_ambiguous": nan, "entropy_after_tool_1_unambiguous": nan}  # fmt: skip
    final = {"eval_success": 0.6, "eval_success_ambiguous": nan, "eval_tool_calls_per_solved": 0.0,
             "eval_precise_first_search": 0.0}  # fmt: skip
    credit = {"credit_leaves": 0.0, "credit_gap_token_mean": nan, "credit_gap_seq_mean": nan}
    fork = dataclasses.replace(ch08.Chapter08Config(), env_name="x")
    results = {"base": base, "samplers": {}, "final": {"grpo": final}, "credit": credit,
               "not_applicable": ch08.not_applicable(fork)}  # fmt: skip
    lines = ch08.summary_lines(results)
    assert not any("ambiguous" in line for line in lines), lines
    assert lines[0] == "base success 0.500; entropy initial 0.100"
    own = dict(results, not_applicable={})
    assert "ambiguous nan" in ch08.summary_lines(own)[0], "the chapter's own lines are unchanged"


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_the_chapters_own_sampling_resolves_to_todays(scale):
    """Issue 42: the resolution of a fork's sampling leaves the chapter's own config as it is, object and values:
    today's stop tags and caps, on both presets."""
    from course_lib.engine.rollout import SamplingConfig

    own = ch08.preset(scale)
    assert ch08.on_environment(own) is own
    assert own.sampling == SamplingConfig(temperature=1.0, max_turn_tokens=10, max_total_tokens=96,
                                          stop_tags=("</tool_call>", "</answer>"))  # fmt: skip


def test_the_two_hop_environment_defaults_are_chapter_08s_setting():
    """`envs.make("two_hop_qa")` is chapter 08's setting (the preset chapters 11 and 12, verl's export and the
    stand-ins reuse through the chapter's task): its defaults and the chapter's fields must not drift apart."""
    import inspect

    from course_lib.envs.two_hop_qa import TwoHopQAEnv

    defaults = {name: p.default for name, p in inspect.signature(TwoHopQAEnv).parameters.items() if name != "split"}
    config = ch08.Chapter08Config()
    assert defaults == {name: getattr(config, name) for name in defaults}
    made, plain = ch08.make_env("train", config), TwoHopQAEnv("train")
    assert {name: getattr(made, name) for name in defaults} == {name: getattr(plain, name) for name in defaults}
