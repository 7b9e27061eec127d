"""Chapter 16, the survey on a real model: the survey's premises and core comparisons on SmolLM2-135M-Instruct.

The course's word-level models are trained from scratch, and most mechanisms of chapters 08-12 did not appear on
them. The chapter's first half measures whether the properties the mechanisms act on are there in the untrained
real model (`python -m course_lib.data build smollm2`), on the course's own
environments. Each premise is pre-registered in `docs/experiments/real-model-premises.md`:

- P1 (ARPO): the entropy of the first tokens after a tool response, minus that of the first tokens of the turn;
- P2 (TORL): held-out arithmetic success with the calculator's result in context, minus success alone;
- P3 (RAGEN-2): retrieval accuracy of first-turn reasonings over chance (input-dependent reasoning);
- P4 (AEPO): the top-3 branch share of ARPO's entropy-guided tree over a uniform reference;
- P5: the engine's exactness on the real tokenizer (a mechanism), retokenization drift and template stripping
  (descriptions).

    python -m course_lib.chapters.ch16_real_model --seeds 0 1 2 3 4 --record

The second half warm-starts the model on the survey's tasks, measures the premises again and trains GiGPO's, ARPO's,
AEPO's and StarPO-S's comparisons (`course_lib.tasks.real_model`, pre-registered in
`docs/experiments/real-model-survey.md`, recorded by `python -m course_lib.lab.real_survey`); this module declares
their claims (`SETTINGS`), each decided on its own file.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from course_lib import course_config, real_models
from course_lib.algos.aepo import uniform_top_share
from course_lib.chapters import skeleton
from course_lib.course import chance, leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, Setting, at_least, evaluate_all
from course_lib.diagnostics import mutual_information, reasoning_span, teacher_forced_logp
from course_lib.engine.bookkeeping import alignment_errors, expected_tokens
from course_lib.engine.prompt_format import ChatFormat
from course_lib.engine.rollout import RolloutEngine
from course_lib.engine.tree_rollout import TreeConfig, sample_trees
from course_lib.engine.turn_sampler import sample_turns, turn_text
from course_lib.envs.base import distinct_seeds
from course_lib.rl import checkpoint
from course_lib.tasks import lake_reasoning, real_model, tool_arithmetic, two_hop_search
from course_lib.tokenizer import encode

MODEL = "smollm2"
"""The course's real model (`course_lib.real_models`)."""

ARITHMETIC_INSTRUCTION = "Solve the arithmetic question. Give the final answer as a number inside <answer> </answer>."
"""P1 and P2's system message: the format the environment's answer check reads, and nothing about the tool (the
tool call of the arm that has one is teacher-forced)."""
GRID_INSTRUCTION = (
    "You play a game on a 4 by 4 grid. The board lists your cell, the goal's cell and the holes' cells; r is the row "
    "(1 at the top) and c the column (1 at the left). Reach the goal without stepping into a hole. First think step "
    "by step inside <think> </think>, then give one move, up, down, left or right, inside <answer> </answer>."
)
"""P3's system message: the board's notation and the think-then-act format RAGEN-2's reasoning lives in."""
SEARCH_INSTRUCTION = (
    "Answer the question with a search tool. To search, write <tool_call> search QUERY </tool_call>; the result comes "
    "back in <tool_response> </tool_response>. Search as often as you need, then give the final answer inside "
    "<answer> </answer>."
)
"""P4's system message: chapter 08's search tool and answer format."""


@dataclass
class Chapter16Config:
    """What the premises vary; the defaults are the pre-registration's."""

    prompts: int = 64
    """Distinct held-out problems per seed and premise."""
    answer_tokens: int = 32
    """P1/P2: the longest sampled turn (ends earlier at `</answer>` or the end-of-turn token)."""
    entropy_tokens: int = 4
    """P1: how many first sampled tokens a turn's entropy averages."""
    think_tokens: int = 64
    """P3: the longest first turn (its reasoning must close `</think>` within it to be scored)."""
    tree: TreeConfig = field(
        default_factory=lambda: TreeConfig(global_samples=4, alpha=0.5, beta=0.2, entropy_tokens=4, rule="arpo")
    )
    """P4: ARPO's tree as chapter 08 runs it (N = 4 global samples, alpha 0.5, beta 0.2, k = 4)."""
    tree_budget: int = 8
    """P4: trajectories per question."""
    tree_prompts: int = 16
    """P4: questions per seed (the plan's 64 cut to 16 for CPU time, disclosed in the pre-registration)."""


def preset(scale: str | None = None) -> Chapter16Config:
    """One configuration: the measurements are inference on one fixed model (the gpu preset changes nothing)."""
    return course_config.by_scale(Chapter16Config(), Chapter16Config(), scale)


def load_model():
    """The cached real model and its tokenizer, float32, in evaluation mode (the hashes are checked on load); built
    first, with a line saying so, where it is not built yet (`real_models.ensure`)."""
    model, tokenizer = checkpoint.load_checkpoint(real_models.ensure(MODEL))
    return model.float().eval(), tokenizer


# P1 and P2: the calculator ----------------------------------------------------------------------
def arithmetic_premises(model, tokenizer, config: Chapter16Config, seed: int) -> dict[str, float]:
    """P1 and P2 on `config.prompts` distinct held-out questions of chapter 00: per question, the model answers
    alone, and after a teacher-forced tool call with the calculator's true result in the tool role. Returns
    `success_alone`, `success_with_result`, `with_result_minus_alone` (P2), `entropy_first_turn`,
    `entropy_after_tool`, `entropy_after_tool_minus_first` (P1: the mean entropy of the first
    `entropy_tokens` sampled tokens, per question, then averaged), and the share of answers closed by
    `</answer>` alone and with the result (`answer_tag_share_*`: success reads only answers in the tags)."""
    chat = ChatFormat(system=ARITHMETIC_INSTRUCTION, observation_role="tool")
    seeds = distinct_seeds(lambda: tool_arithmetic.make_env("test"), config.prompts, start=10_000 * seed)
    alone_envs, tool_envs = (
        [tool_arithmetic.make_env("test") for _ in seeds],
        [tool_arithmetic.make_env("test") for _ in seeds],
    )
    alone_prefixes, tool_prefixes = [], []
    for env, other, task in zip(alone_envs, tool_envs, seeds, strict=True):
        question, _ = env.reset(seed=task)
        other.reset(seed=task)
        alone_prefixes.append(chat.prompt_ids(tokenizer, question))
        a, op, b = other.problem
        call = encode(tokenizer, f"<tool_call> {a} {op} {b} </tool_call>")  # the demonstrations' own call
        response, _, _, _, _ = other.step(tokenizer.decode(call))
        tool_prefixes.append(
            [*chat.prompt_ids(tokenizer, question), *call, *chat.observation_ids(tokenizer, response, call[-1])]
        )
    generator = torch.Generator().manual_seed(seed)
    stops = ("</answer>",)
    alone = sample_turns(model, tokenizer, alone_prefixes, config.answer_tokens, generator, stops)
    with_result = sample_turns(model, tokenizer, tool_prefixes, config.answer_tokens, generator, stops)

    def success(envs, turns) -> list[float]:
        return [float(env.step(turn_text(tokenizer, ids))[4].get("success", False)) for env, (ids, _) in
                zip(envs, turns, strict=True)]  # fmt: skip

    def first_entropy(turns) -> list[float]:
        return [float(np.mean(ent[: config.entropy_tokens])) for _, ent in turns]

    def tag_share(turns) -> float:
        return float(np.mean(["</answer>" in turn_text(tokenizer, ids) for ids, _ in turns]))

    first, after = first_entropy(alone), first_entropy(with_result)
    success_alone, success_tool = success(alone_envs, alone), success(tool_envs, with_result)
    return {
        "success_alone": float(np.mean(success_alone)),
        "success_with_result": float(np.mean(success_tool)),
        "with_result_minus_alone": float(np.mean(success_tool) - np.mean(success_alone)),
        "entropy_first_turn": float(np.mean(first)),
        "entropy_after_tool": float(np.mean(after)),
        "entropy_after_tool_minus_first": float(np.mean(np.subtract(after, first))),
        "answer_tag_share_alone": tag_share(alone),
        "answer_tag_share_with_result": tag_share(with_result),
    }


# P3: input-dependent reasoning ------------------------------------------------------------------
@torch.no_grad()
def reasoning_premise(model, tokenizer, config: Chapter16Config, seed: int) -> dict[str, float]:
    """P3 on `config.prompts` distinct held-out maps of chapter 09: one first turn per map, sampled after
    `GRID_INSTRUCTION`; every closed reasoning scored under every valid map's prompt (its own prefix up to and
    including `<think>`). Returns RAGEN-2's `mi`, `retrieval_accuracy`, `chance` (1 / maps with valid reasoning),
    `retrieval_minus_chance` (P3) and `valid_share`; NaN for the estimates with fewer than two valid reasonings."""
    chat = ChatFormat(system=GRID_INSTRUCTION, observation_role="tool")
    seeds = distinct_seeds(lambda: lake_reasoning.make_env("test"), config.prompts, start=10_000 * seed)
    prompts = [chat.prompt_ids(tokenizer, lake_reasoning.make_env("test").reset(seed=s)[0]) for s in seeds]
    turns = sample_turns(model, tokenizer, prompts, config.think_tokens, torch.Generator().manual_seed(seed),
                         ("</answer>",))  # fmt: skip
    pairs = []
    for prompt, (ids, _) in zip(prompts, turns, strict=True):
        span = reasoning_span(tokenizer, ids)
        if span is not None:
            pairs.append(([*prompt, *ids[: span[0]]], ids[span[0] : span[1]]))
    numbers = {"valid_share": len(pairs) / len(prompts), "valid_reasonings": float(len(pairs))}
    if len(pairs) < 2:
        nan = float("nan")
        return numbers | {"mi": nan, "retrieval_accuracy": nan, "chance": nan, "retrieval_minus_chance": nan}
    logp = teacher_forced_logp(model, [x for x, _ in pairs], [z for _, z in pairs], reuse_prompts=True)
    found = mutual_information(logp, list(range(len(pairs))))
    numbers |= {key: found[key] for key in ("mi", "retrieval_accuracy", "chance")}
    numbers["retrieval_minus_chance"] = found["retrieval_accuracy"] - found["chance"]
    numbers["mean_reasoning_tokens"] = float(np.mean([len(z) for _, z in pairs]))
    return numbers


# P4: where ARPO's tree branches -----------------------------------------------------------------
def branching_premise(model, tokenizer, config: Chapter16Config, seed: int) -> dict[str, float]:
    """P4 on `config.tree_prompts` distinct held-out questions of chapter 08, tree-sampled by ARPO's rule
    (`config.tree`, `config.tree_budget` per question) in the chat format after `SEARCH_INSTRUCTION`, the
    chapter's sampling budgets measured in this tokenizer. Returns `top3_share`
    (`algos.aepo.top_branch_share` over the questions that branched), `uniform_top3_share` (`algos.aepo
    .uniform_top_share`), `top3_over_uniform` (P4), `branch_share` (of the budget), `questions_branched`, and the
    share of episodes that made a valid tool call."""
    chapter = two_hop_search.preset("cpu")
    sampling = checkpoint.chat_sampling(
        chapter.sampling, tokenizer, two_hop_search.demonstration_texts(512, 0, chapter)
    )
    sampling = dataclasses.replace(sampling, snapshot_envs=True)
    engine = RolloutEngine(model, tokenizer, sampling, ChatFormat(system=SEARCH_INSTRUCTION, observation_role="tool"))
    seeds = distinct_seeds(lambda: two_hop_search.make_env("test", chapter), config.tree_prompts, start=10_000 * seed)
    made = [two_hop_search.make_env("test", chapter) for _ in range(len(seeds) * config.tree_budget)]
    rows, stats = sample_trees(engine, made, seeds, config.tree_budget, config.tree,
                               torch.Generator().manual_seed(seed))  # fmt: skip
    questions = range(len(seeds))
    branches = [sum(p is not None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in questions]
    roots = [sum(p is None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in questions]
    counts = stats.counts(config.tree_budget, len(seeds))
    top = counts["tree_top3_branch_share"]
    uniform = uniform_top_share(branches, roots, 3, seed)
    return {
        "top3_share": top,
        "uniform_top3_share": uniform,
        "top3_over_uniform": top - uniform,
        "branch_share": counts["tree_branch_share"],
        "questions_branched": float(sum(b > 0 for b in branches)),
        "tool_call_share": float(
            np.mean([max((i.get("tool_calls", 0) for i in t.infos), default=0) > 0 for t in rows])
        ),
    }


# P5: the multi-turn pitfalls on the real tokenizer ----------------------------------------------
def template_keeps_turns(tokenizer, messages: Sequence[Mapping[str, str]]) -> bool:
    """Whether rendering the conversation up to each assistant message, then with the next message added, keeps the
    first rendering as a prefix (a template that strips earlier turns' content, as Qwen3's does with reasoning,
    breaks it)."""
    for k, message in enumerate(messages[:-1]):
        if message["role"] != "assistant":
            continue
        shorter = tokenizer.apply_chat_template(list(messages[: k + 1]), tokenize=False)
        longer = tokenizer.apply_chat_template(list(messages[: k + 2]), tokenize=False)
        if not longer.startswith(shorter):
            return False
    return True


def pitfall_checks(model, tokenizer, config: Chapter16Config, seed: int) -> dict[str, float]:
    """P5 on `config.prompts` of chapter 00's episodes sampled by the engine as `--model smollm2` runs them (chat
    format, tool role, the chapter's budgets in this tokenizer): the exactness counts of
    `ch00_tool_agent.exactness_checks` (ids and mask rebuilt from the environment's transcript around the sampled
    action ids, and the sampled ids decoded against the text the environment received: 0 errors on a correct
    engine); `drift_share`, the share of episodes whose transcript re-encoded from its text has other ids than the
    engine's (`bookkeeping.expected_tokens`); and `template_keeps_turns_share`, the share whose every assistant turn
    the template keeps as a prefix when the next message is added (`template_keeps_turns`)."""
    engine = RolloutEngine(model, tokenizer, tool_arithmetic.chat_sampling(tokenizer))
    made = [tool_arithmetic.make_env("test") for _ in range(config.prompts)]
    seeds = distinct_seeds(lambda: tool_arithmetic.make_env("test"), config.prompts, start=10_000 * seed)
    episodes = engine.rollout(made, seeds, generator=torch.Generator().manual_seed(seed))
    id_errors = mask_errors = text_errors = drifted_tokens = 0
    drifted, kept = [], []
    for t in episodes:
        ids, mask = expected_tokens(t, tokenizer, engine.format, "sampled")
        id_errors += tool_arithmetic.differences(ids, t.token_ids)
        mask_errors += tool_arithmetic.differences(mask, t.loss_mask)
        text_errors += len(alignment_errors(t, tokenizer, engine.format))
        reencoded = tool_arithmetic.differences(expected_tokens(t, tokenizer, engine.format)[0], t.token_ids)
        drifted_tokens += reencoded
        drifted.append(reencoded > 0)
        transcript = t.env.transcript
        messages = [{"role": "user", "content": transcript.observations[0]}]
        for step, action in enumerate(transcript.actions):
            messages.append({"role": "assistant", "content": action})
            if step + 1 < len(transcript.observations) and transcript.observations[step + 1]:
                messages.append({"role": "tool", "content": transcript.observations[step + 1]})
        kept.append(template_keeps_turns(tokenizer, messages))
    return {
        "id_errors": float(id_errors),
        "mask_errors": float(mask_errors),
        "text_errors": float(text_errors),
        "exact_errors": float(id_errors + mask_errors + text_errors),
        "policy_tokens": float(sum(sum(t.loss_mask) for t in episodes)),
        "turns": float(np.mean([len(t.env.transcript.actions) for t in episodes])),
        "retokenized_tokens": float(drifted_tokens),
        "drift_share": float(np.mean(drifted)),
        "template_keeps_turns_share": float(np.mean(kept)),
    }


# The chapter ------------------------------------------------------------------------------------
def run(seed: int, config: Chapter16Config | None = None, progress: bool = False) -> dict:
    """Every premise on one seed; returns each premise's numbers and the minutes each took."""
    config = config or preset()
    model, tokenizer = load_model()
    results, minutes = {}, {}
    for name, measure in (("arithmetic", arithmetic_premises), ("reasoning", reasoning_premise),
                          ("branching", branching_premise), ("pitfalls", pitfall_checks)):  # fmt: skip
        start = time.perf_counter()
        torch.manual_seed(seed)
        results[name] = measure(model, tokenizer, config, seed)
        minutes[name] = (time.perf_counter() - start) / 60
        if progress:
            print(f"seed {seed} {name} ({minutes[name]:.1f} min): {results[name]}", flush=True)
    results["minutes"] = sum(minutes.values())
    results["phase_minutes"] = minutes
    return results


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every premise's numbers, flat, with the premise's name as a prefix (`arithmetic_success_alone`, ...)."""
    numbers = {}
    for name in ("arithmetic", "reasoning", "branching", "pitfalls"):
        numbers |= {f"{name}_{key}": float(value) for key, value in results[name].items()}
    return numbers


def premise(claim_id: str, statement: str, source: str, number: str, margin: float, **fields) -> ClaimSpec:
    """A premise as a finding (not required): `number`, a paired difference per seed, exceeds `margin` (strictly
    above 0 for a margin of 0: "higher"), decided by the course's rule on its interval against `margin`. `fields`:
    what makes it testable (`scored`, `reach`)."""
    check = (lambda n: n[number] > 0) if margin == 0 else (lambda n: at_least(n[number], margin))
    return ClaimSpec(claim_id, statement, source, number, check, effects=((number, margin),), required=False,
                     **fields)  # fmt: skip


CLAIMS: tuple[ClaimSpec, ...] = (
    premise(
        "C16.1",
        "the first tokens after a tool response have higher entropy than the first tokens of the turn",
        "ARPO (Dong et al. 2025), section 2: entropy rises right after a tool's response; P1 of the pre-registration",
        "arithmetic_entropy_after_tool_minus_first",
        0.0,
    ),
    premise(
        "C16.2",
        "reading the calculator's result raises held-out success by at least 20 points on average over the seeds "
        "(95% t-interval above 0)",
        "TORL (Li et al. 2025): a model that computes badly alone has room for a tool; P2 of the pre-registration",
        "arithmetic_with_result_minus_alone",
        0.20,
        scored="arithmetic_answer_tag_share_with_result",  # a gain shows only in answers written after the result
    ),
    premise(
        "C16.3",
        "first-turn reasoning retrieves its own input above chance by at least 5 points on average over the seeds "
        "(95% t-interval above 0)",
        "RAGEN-2 (2026): template collapse is reasoning that stops depending on the input, so a pretrained model's "
        "starts input-dependent; P3 of the pre-registration",
        "reasoning_retrieval_minus_chance",
        0.05,
        scored="reasoning_valid_reasonings",  # retrieval reads closed, non-empty reasonings
    ),
    premise(
        "C16.4",
        "ARPO's entropy-guided tree concentrates its branches beyond the uniform reference by at least 5 points on "
        "average over the seeds (95% t-interval above 0)",
        "AEPO (Dong et al. 2025): ARPO's branching piles onto a few high-entropy roots; P4 of the pre-registration",
        "branching_top3_over_uniform",
        0.05,
        reach=lambda n: 1.0 - n["branching_uniform_top3_share"],  # the top-3 share is at most 1
    ),
    ClaimSpec(
        "C16.5",
        "the engine's ids, masks and text are exact on the real tokenizer and template (0 errors)",
        "no paper: chapters 14 and 15's exactness, on a real BPE tokenizer and ChatML; P5 of the pre-registration",
        "pitfalls_exact_errors",
        lambda n: n["pitfalls_exact_errors"] == 0 and n["pitfalls_policy_tokens"] > 0,
        kind="mechanism",
        chance=chance.exact("ids, masks and decoded text are compared with the transcript's, token by token"),
    ),
    ClaimSpec(
        "C16.6",
        "retokenization drift: the share of episodes whose transcript, re-encoded from text, has other ids",
        "Chapter 15's pitfall on the real tokenizer (P5's description)",
        "pitfalls_drift_share",
        lambda n: n["pitfalls_drift_share"] > 0,  # written after seed 0 showed drift; a description decides nothing
        required=False,
        kind="description",
        shown=(("pitfalls_drift_share", "share of episodes that drift"),),
    ),
    ClaimSpec(
        "C16.7",
        "template: the share of episodes whose every assistant turn survives the template as a prefix",
        "Chapter 15's pitfall on ChatML as SmolLM2 ships it (P5's description)",
        "pitfalls_template_keeps_turns_share",
        lambda n: n["pitfalls_template_keeps_turns_share"] == 1.0,  # the pre-registration's expectation for ChatML
        required=False,
        kind="description",
        shown=(("pitfalls_template_keeps_turns_share", "share of episodes kept"),),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """The chapter's claims on one run's results. The premises are findings a live run of a few problems does not
    decide (`required=False`: a run is not stopped when one fails); the exactness check is required."""
    return evaluate_all(CLAIMS, claim_numbers(results))


def summary(results: Mapping) -> list[str]:
    """One line per premise, for the command line."""
    return [f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[name].items())
            for name in ("arithmetic", "reasoning", "branching", "pitfalls")]  # fmt: skip


# The second half: the survey on the warm-started model (docs/experiments/real-model-survey.md) -------------
SURVEY = "docs/experiments/real-model-survey.md"
"""The second half's pre-registration: warm starts, premises, comparisons, their margins and the seed plan."""
ROOM = "valid actions on at least half of the held-out steps and success at most 0.85 (a format, and room for RL)"


def warm_start_claim(claim_id: str, task: str, what: str) -> ClaimSpec:
    """A description of `task`'s warm start on `results/ch16_warm_start.json`: its held-out success and valid
    actions, and whether it left what RL needs (`ROOM`, the sizing rule's aim)."""
    valid, success = f"{task}_valid_rate", f"{task}_success"
    return ClaimSpec(
        claim_id, f"after its LoRA warm start on {what}, SmolLM2 has {ROOM}",
        "no paper: the sizing rule of the survey's pre-registration", success,
        lambda n: n[valid] >= 0.5 and n[success] <= 0.85, required=False, kind="description",
        shown=((success, "held-out success"), (valid, "valid actions")),
    )  # fmt: skip


def comparison_claim(claim_id: str, statement: str, source: str) -> ClaimSpec:
    """A pre-registered comparison (its own file, `results/ch16_<comparison>.json`): the method's held-out success
    minus its baseline's, paired per seed, at least 5 points on average (95% t-interval above 0); not testable where
    no arm of any deciding seed reached 5% success (`comparable`)."""
    return ClaimSpec(
        claim_id, f"on SmolLM2 warm-started on the task, {statement} by at least 5 points of held-out success on "
        "average over the seeds (95% t-interval above 0)", source, "difference",
        lambda n: at_least(n["difference"], 0.05), required=False, effects=(("difference", 0.05),),
        scored="comparable",
    )  # fmt: skip


LORA_BLOCKS_CLAIMS = (
    ClaimSpec(
        "C16.8d",
        "LoRA on the top 8 of 30 blocks gains at least as much held-out success from chapter 00's GRPO as LoRA on "
        "every block, less 10 points (3 seeds: a check before relying on it, not a verdict)",
        "no paper: the fast path's adapter (docs/bring-your-own-model.md)",
        "top8_minus_all_gain",
        lambda n: n["top8_minus_all_gain"] >= -0.10,
        required=False,
        kind="description",
        shown=(("all_gain", "gain, LoRA on all blocks"), ("top8_gain", "on the top 8"),
               ("top8_minus_all_gain", "top 8 minus all")),
    ),
)  # fmt: skip
WARM_START_CLAIMS = (
    warm_start_claim("C16.9d", "calculator", "chapter 04's calculator word problems"),
    warm_start_claim("C16.10d", "key_door", "chapter 07's key-and-door grid"),
    warm_start_claim("C16.11d", "two_hop", "chapter 08's two-hop search"),
    warm_start_claim("C16.12d", "lake", "the lake with reasoning of chapters 09-10"),
    premise(
        "C16.13d",
        "after a warm start on two-hop search, the first tokens after a search result have higher entropy than the "
        "first tokens of the episode's first turn",
        "ARPO (Dong et al. 2025), section 2; P1 of the survey's pre-registration",
        "two_hop_entropy_after_result_minus_first",
        0.0,
        scored="two_hop_entropy_scored",  # the episodes whose first action returned a result
    ),
    premise(
        "C16.14d",
        "after a warm start on the calculator word problems, held-out success with the calculator running exceeds "
        "success with calls answered by nothing by at least 10 points on average over the seeds (95% t-interval "
        "above 0)",
        "TORL (Li et al. 2025): C = 1 against C = 0; P2 of the survey's pre-registration",
        "calculator_calculator_on_minus_off",
        0.10,
        reach=lambda n: n["calculator_calculator_reach"],  # 1 minus the success with the calculator off
    ),
    premise(
        "C16.15d",
        "after a warm start on the lake with reasoning, first-turn reasoning retrieves its own map above chance by "
        "at least 5 points on average over the seeds (95% t-interval above 0)",
        "RAGEN-2 (2026): input-dependent reasoning; P3 of the survey's pre-registration",
        "lake_reasoning_retrieval_minus_chance",
        0.05,
        scored="lake_reasoning_scored",  # closed, non-empty reasonings
    ),
    premise(
        "C16.16d",
        "after a warm start on two-hop search, ARPO's entropy-guided tree concentrates its branches beyond the "
        "uniform reference by at least 5 points on average over the seeds (95% t-interval above 0)",
        "AEPO (Dong et al. 2025); P4 of the survey's pre-registration",
        "two_hop_branching_top3_over_uniform",
        0.05,
        scored="two_hop_branching_scored",  # the questions that branched
        reach=lambda n: n["two_hop_branching_reach"],  # 1 minus the uniform reference
    ),
)
COMPARISON_CLAIMS = {
    "gigpo": comparison_claim("C16.17d", "GiGPO beats GRPO on the key-and-door grid",
                              "GiGPO (Feng et al. 2025): step groups from repeated states beat GRPO on ALFWorld and "
                              "WebShop; chapter 07's C7.1 on the course model"),
    "arpo": comparison_claim("C16.18d", "ARPO beats GRPO at an equal rollout budget on two-hop search",
                             "ARPO (Dong et al. 2025): entropy-guided branching beats trajectory-level sampling"),
    "aepo": comparison_claim("C16.19d", "AEPO beats ARPO on two-hop search",
                             "AEPO (Dong et al. 2025): entropy-balanced rollout and update beat ARPO"),
    "starpo_s": comparison_claim("C16.20d", "StarPO-S beats StarPO on the lake with reasoning",
                                 "RAGEN (Wang et al. 2025): StarPO-S's variance filter delays collapse"),
}  # fmt: skip
"""The pre-registered comparisons' claims, by comparison (`tasks.real_model.COMPARISONS`)."""
MISMATCH_CLAIMS = (
    ClaimSpec(
        "C16.21d",
        "the pitfall of the fast path: an update that took the bf16 sampler's log-probs as its old ones would find "
        "some policy tokens' ratio outside PPO's clip range before its first step (float32 update)",
        "no paper: a sampler-trainer mismatch (chapter 15's staleness check, `pitfalls.ratio_stats`), which the "
        "update's own old log-probs avoid (`GRPOConfig.old_logprobs`)",
        "outside_clip_none",
        lambda n: n["outside_clip_none"] > 0,
        required=False,
        kind="description",
        shown=(("mean_abs_gap_none", "mean |log-prob gap|, float32 update"), ("outside_clip_none", "outside clip"),
               ("mean_abs_gap_bf16", "mean |gap|, bf16 update"), ("outside_clip_bf16", "outside clip")),
    ),
)  # fmt: skip


SURVEY_TASKS = ("calculator", "key_door", "two_hop", "lake")
"""The survey's tasks (`real_model.TASKS` less chapter 00's arithmetic, which only C16.8d trains)."""


def warm_start_tables() -> str:
    """Per survey task, its recorded warm starts' held-out success, valid-action rate and minutes (Markdown), or the
    command that records them."""
    columns = (("success", "held-out success"), ("valid_rate", "valid actions"), ("warm_start_minutes", "minutes"))
    return "\n\n".join(f"**{task}**\n\n" + recorded.seed_table_or_command(
        real_model.warm_start_results(task), [(f"{task}_{key}", label) for key, label in columns])
        for task in SURVEY_TASKS)  # fmt: skip


MISMATCH_COLUMNS = (("policy_tokens", "policy tokens"), *MISMATCH_CLAIMS[0].shown)
"""The mismatch table's columns: the bf16 sampler's log-probs against the update's forward in each precision."""
BESIDE = (
    ("ARPO: entropy after a tool's response; ARPO against GRPO", "C16.1", "C16.13d", "C16.18d", "C8.3"),
    ("TORL: room for a tool", "C16.2", "C16.14d", "", ""),
    ("RAGEN-2: input-dependent reasoning; StarPO-S against StarPO", "C16.3", "C16.15d", "C16.20d", "C9.3"),
    ("AEPO: branch concentration; AEPO against ARPO", "C16.4", "C16.16d", "C16.19d", "C11.3"),
    ("GiGPO: repeated states (by construction); GiGPO against GRPO", "", "", "C16.17d", "C7.1"),
)
"""Per method, its premise on the untrained and on the warm-started SmolLM2, its comparison on SmolLM2, and the same
comparison on the course's own model (`lab.verdicts.beside`; the comparisons' order is the pre-registration's)."""
BESIDE_HEADERS = ("method", "premise, untrained", "premise, warm-started", "comparison, SmolLM2", "course model")
TRAINED_IF = {"C16.18d": "C16.13d", "C16.19d": "C16.16d", "C16.20d": "C16.15d"}
"""Section 3's rule of the pre-registration: a comparison (ARPO's, AEPO's, StarPO-S's) is trained only where its
premise on the warm-started model holds; GiGPO's in any case (`lab.verdicts.beside`'s `gated`)."""
SETTINGS = (
    Setting(real_model.MISMATCH_RESULTS, MISMATCH_CLAIMS, SURVEY),
    Setting(real_model.LORA_BLOCKS_RESULTS, LORA_BLOCKS_CLAIMS, SURVEY),
    *(
        Setting(
            real_model.warm_start_results(task),
            tuple(spec for spec in WARM_START_CLAIMS if spec.value.startswith(task)),
            SURVEY,
        )
        for task in SURVEY_TASKS
    ),
    *(Setting(real_model.comparison_results(name), (spec,), SURVEY) for name, spec in COMPARISON_CLAIMS.items()),
)
"""The survey's settings, each decided on its own file once recorded (`course_lib.lab.verdicts`); their commands are
`python -m course_lib.lab.real_survey ...` (`recorded.record_command`)."""


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The first half measures an untrained pretrained model: nothing of the course's trains it (its own
    pretraining corpus is not the course's to audit). The second half trains it: each survey task's held-out split
    against its warm starts and RL draws (`leakage.survey_split`). Chapter 00 on that model (`ch00_smollm2`) is inside
    chapter 00's audit."""
    return [leakage.survey_split("ch16", name) for name in real_model.TASKS]


CHAPTER = skeleton.Chapter(
    "ch16", "Chapter 16, the survey on a real model", run, claim_numbers, CLAIMS, report=summary, audit=held_out_audit
)


if __name__ == "__main__":
    CHAPTER.main()
