"""Chapter 14 (appendix): bring your own model. Chapter 00 on a stand-in for a real checkpoint (random-init Qwen2
weights, a byte-level BPE tokenizer of 600 tokens with a ChatML template, saved and loaded with `from_pretrained`),
and the multi-turn pitfalls such a tokenizer brings, each measured and caught by its check.

A real checkpoint changes three things for the course: tags and numbers are several tokens each (stop strings
span tokens), text round trips are not id round trips (re-tokenizing a transcript changes ids), and turns are
rendered by a chat template (which may render earlier turns differently once later ones follow). The engine
keeps every id as it was made (`engine.rollout`, `engine.prompt_format`); this appendix shows what would
go wrong otherwise, on numbers, and that chapter 00 still trains on such a model end to end.
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from course_lib import course_config
from course_lib.chapters import skeleton
from course_lib.course import chance, leakage, recorded, standins
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all, nontrivial_base
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.rl import checkpoint
from course_lib.rl.train import stored_logprob_error
from course_lib.tasks import demonstrators, tool_arithmetic

TOKENIZER_TEXT_SEED = 0
"""`standins.default_tokenizer` is trained on `environment_texts(300)` drawn with this seed (train problems)."""


@dataclass
class Chapter14Config:
    """Everything the appendix varies, with the cpu preset's values as defaults."""

    family: str = "qwen2"
    """The stand-in's model family (`standins.FAMILIES`); its weights are random, initialised with seed 0."""
    pitfall_episodes: int = 20
    """Demonstrator episodes per chapter of 00, 07 and 08 (train problems) the tokenizer pitfalls are counted on."""
    logprob_batch: int = 16
    """Episodes of the trained stand-in whose engine log-probs are recomputed by one full forward (C14.2)."""
    chapter00: tool_arithmetic.ArithmeticConfig = field(default_factory=tool_arithmetic.ArithmeticConfig)
    """Chapter 00's settings: demonstrations, warm start (every weight: a random model needs it), GRPO, evaluation."""


def preset(scale: str | None = None) -> Chapter14Config:
    """The appendix at `COURSE_SCALE` (`cpu` or `gpu`): chapter 00's budget at that scale. On a GPU the point is a
    real checkpoint instead (`python -m course_lib.lab.gpu_preset --model ...`, docs/bring-your-own-model.md)."""
    return Chapter14Config(chapter00=tool_arithmetic.preset(scale or course_config.scale()))


def pitfalls(tokenizer, count: int, seed: int) -> dict[str, float]:
    """The tokenizer's multi-turn pitfalls, counted on `count` demonstrator episodes of each of chapters 00, 07 and 08
    (`standins.environment_episodes`, drawn with `seed + 1` so they are not the tokenizer's own training text):

    - `drift_*`: turns joined by a newline (the usual tool loop) and encoded at once versus turn by turn
      (`standins.retokenization_drift`); `drift_space_boundaries` the same joined by a space.
    - `overshoot_*`: stop strings whose last character ends inside a token when a newline follows
      (`standins.stop_overshoot`).
    - `breaks_*`: episodes with reasoning whose chat rendering is not incremental, under the stand-in's ChatML and
      under a copy that strips earlier reasoning as Qwen3's does (`standins.template_breaks`); `followed` counts the
      episodes with an assistant turn another message follows (the ones a stripping template can break).
    """
    episodes = standins.environment_episodes(count, seed + 1)
    newline = standins.retokenization_drift(tokenizer, episodes, separator="\n")
    space = standins.retokenization_drift(tokenizer, episodes, separator=" ")
    stops = standins.stop_overshoot(tokenizer, episodes, separator="\n")
    thinking = standins.with_reasoning(episodes)
    stripping = copy.deepcopy(tokenizer)
    stripping.chat_template = standins.chat_template(tokenizer.bos_token is not None, strip_reasoning=True)
    return {
        "episodes": float(len(episodes)),
        "drift_episodes": float(newline["drifted_episodes"]),
        "drift_boundaries": float(newline["drifted_boundaries"]),
        "boundaries": float(newline["boundaries"]),
        "drift_space_boundaries": float(space["drifted_boundaries"]),
        "overshoot_stops": float(stops["stops"]),
        "overshoot": float(stops["overshoot"]),
        "followed": float(sum(any(role == "assistant" for role, _ in e[:-1]) for e in episodes)),
        "breaks_chatml": float(standins.template_breaks(tokenizer, thinking)["broken"]),
        "breaks_stripping": float(standins.template_breaks(stripping, thinking)["broken"]),
    }


def logprob_error(model, tokenizer, sampling: SamplingConfig, count: int, seed: int) -> float:
    """`train.stored_logprob_error` on `count` chapter 00 episodes the engine samples from `model` (C14.3)."""
    engine = RolloutEngine(model, tokenizer, sampling)
    envs = [tool_arithmetic.make_env() for _ in range(count)]
    trajectories = engine.rollout(envs, list(range(count)), generator=torch.Generator().manual_seed(seed))
    return stored_logprob_error(model, trajectories, engine.pad_id)


def run(seed: int, config: Chapter14Config | None = None) -> dict:
    """The appendix for one seed: a stand-in checkpoint written to a temporary folder, its tokenizer's pitfalls
    counted, then chapter 00 on it (`checkpoint.using`: warm start of every weight, exactness checks, GRPO, held-out
    evaluation) and the engine's log-probs checked on the trained model."""
    config = config or preset()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        path = standins.build_standin(folder, config.family)
        model_files = sorted(p.name for p in path.iterdir())
        with checkpoint.using(path, full_finetune=True):
            chapter = tool_arithmetic.train_and_evaluate(seed, config.chapter00)
    tokenizer = chapter["tokenizer"]
    results = {key: chapter[key] for key in ("base", "trained", "checks", "history", "model", "tokenizer", "sampling")}
    results["files"] = model_files
    results["pitfalls"] = pitfalls(tokenizer, config.pitfall_episodes, seed)
    model = chapter["model"].eval()
    results["logprob_error"] = logprob_error(model, tokenizer, chapter["sampling"], config.logprob_batch, seed)
    results["minutes"] = (time.perf_counter() - start) / 60
    return results


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number the appendix's claims use: held-out success of the warm-started and the trained stand-in,
    chapter 00's exactness checks on it, the pitfall counts and the log-prob check."""
    base, trained = results["base"]["success"], results["trained"]["success"]
    numbers = {"base_success": base, "trained_success": trained, "success_gain": trained - base}
    numbers |= {f"checks_{key}": float(value) for key, value in results["checks"].items()}
    numbers |= {f"pitfall_{key}": value for key, value in results["pitfalls"].items()}
    return numbers | {"logprob_error": results["logprob_error"]}


CLAIMS: tuple[ClaimSpec, ...] = (
    nontrivial_base(
        "C14.1",
        "the warm-started stand-in",
        "no paper: chapter 00's C0.1 on a byte-level BPE checkpoint warm-started through its chat template",
    ),
    ClaimSpec(
        "C14.2",
        "GRPO raises the stand-in's held-out success by at least 15 points",
        "DeepSeekMath's GRPO (arXiv 2402.03300) on a BPE checkpoint with a chat template; the bar is C0.2's",
        "success_gain",
        lambda n: at_least(n["success_gain"], 0.15),
        # the course's engine on another tokenizer, not a paper's finding: a mechanism, far above the bar
        kind="mechanism",
        chance=chance.next_seed("success_gain", 0.15),
    ),
    ClaimSpec(
        "C14.3",
        "on a real batch, the stand-in's ids, loss mask and turn texts are the environment's transcript, exactly, and "
        "the engine's log-probs are a full forward's (to 1e-4)",
        "no paper: C0.3 and C0.4 with tags split into pieces and the turns in a chat template; an exact check",
        "checks_id_errors",
        lambda n: (
            n["checks_id_errors"] == n["checks_mask_errors"] == n["checks_text_errors"] == 0
            and n["checks_tool_calls"] > 0
            and n["logprob_error"] <= 1e-4
        ),
        kind="mechanism",
        chance=chance.compared_exactly(
            "ids, mask and texts are compared with the transcript; log-probs with a full forward", "checks_tool_calls"
        ),
    ),
    ClaimSpec(
        "C14.4",
        "re-tokenizing would change ids: sampled turns re-encode to other ids, and turns joined by a newline encode "
        "to other ids at once than turn by turn",
        "no paper: retokenization drift (TRL issue 5224, verl issue 2165), the reason the engine keeps sampled ids",
        "checks_retokenized_tokens",
        lambda n: n["checks_retokenized_tokens"] > 0 and n["pitfall_drift_boundaries"] > 0,
        # Whether a seed's 64 checked episodes hold a non-canonical piece depends on what the stand-in happens to
        # sample (seed 2's held none): a description of how often drift shows, not a check that cannot fail.
        required=False,
        kind="description",
    ),
    ClaimSpec(
        "C14.5",
        "the incremental-rendering check flags every episode a reasoning-stripping template re-renders, and no "
        "episode under plain ChatML",
        "no paper: Qwen3-style templates drop earlier reasoning (verl issue 6854); `standins.template_breaks`",
        "pitfall_breaks_stripping",
        lambda n: n["pitfall_breaks_stripping"] == n["pitfall_followed"] > 0 and n["pitfall_breaks_chatml"] == 0,
        kind="mechanism",
        chance=chance.compared_exactly(
            "each rendering is compared with the last, episode by episode", "pitfall_followed"
        ),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """The appendix's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    n = claim_numbers(results)
    return [
        f"stand-in {results['files']}",
        f"held-out success: warm-started {n['base_success']:.3f} -> after GRPO {n['trained_success']:.3f}",
        f"checks {results['checks']}, log-prob error {n['logprob_error']:.1e}",
        f"pitfalls {results['pitfalls']}",
    ]


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    """The run's GRPO curves on the stand-in (`grpo/<key>`, chapter 00's keys), for seed bands in the notebook."""
    return recorded.history_curves({"grpo": results["history"]}, tool_arithmetic.CURVE_KEYS)


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """Chapter 00's held-out problems against what the appendix's stand-in learns from: the BPE tokenizer's training
    text (chapter 00's demonstrator episodes on train problems), the warm start's demonstrations (drawn with seed 0,
    as `bases.base_for` draws them for a checkpoint) and GRPO's task draws under the appendix's run seeds."""
    config = preset("cpu").chapter00
    text_episodes = -(-standins.TOKENIZER_TEXTS // len(demonstrators()))  # per task (`environment_texts`)
    tokenizer_draws = [TOKENIZER_TEXT_SEED * 10_000_019 + i for i in range(text_episodes)]
    draws = [*leakage.grpo_draws("ch14", config.grpo), *tokenizer_draws]
    demos = tool_arithmetic.demonstration_texts(config.demonstrations, 0, config.tool_share, config.direct_correct)
    held_out = tool_arithmetic.test_seeds(config.eval_tasks)
    return leakage.held_out_split("ch14", tool_arithmetic.make_env, held_out, draws, leakage.prompts_of(demos))


CHAPTER = skeleton.Chapter(
    "ch14", "Chapter 14 (appendix), chapter 00 on a BPE stand-in", run, claim_numbers, CLAIMS, curves=curves,
    report=report, audit=held_out_audit
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()
