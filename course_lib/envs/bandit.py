"""`bandit`: a two-armed bandit with a safe and a risky arm, renamed at test (chapters 09-10, RAGEN).

RAGEN's bandit offers two arms named by words whose meaning hints at their risk (Phoenix, Dragon); the held-out
test renames them (Trader, Librarian), so that a policy must read the description, not memorise a name. Here the
prompt names two arms and describes each, in random order: `arms phoenix steady dragon gamble`. The `steady` arm
pays `safe_reward` (0.2) always; the `gamble` arm pays `risky_reward` (1.0) with probability `risky_probability`
(0.5), so its mean (0.5) is higher: the right choice is the gamble, and its reward is noisy. One turn:
`<think> ... </think> <answer> NAME </answer>` (`envs.reasoning`); an answer that is not one of the two names,
or a broken format, is invalid (RAGEN's format penalty -0.1).

Training episodes draw both names from `TRAIN_NAMES`, held-out ones from `TEST_NAMES` (disjoint), so no
held-out prompt occurs in training. The reasoning channel has something to say about the input: which name is
the gamble. `info["risky"]` is the risky arm's name, `info["chose_risky"]` whether the answer picked it.
"""

from __future__ import annotations

import random
from typing import Any

from course_lib.envs import register
from course_lib.envs.base import InvalidAction, TextEnv
from course_lib.envs.reasoning import FEEDBACK_WORDS, FORMAT_PENALTY, parse_turn, turn_text

TRAIN_NAMES = (
    "phoenix", "dragon", "tiger", "falcon", "wolf", "raven", "otter", "heron", "lynx", "badger", "cobra", "bison",
    "viper", "moose", "crane", "panda", "shark", "hyena", "gecko", "koala",
)  # fmt: skip
TEST_NAMES = ("trader", "librarian", "baker", "sailor", "farmer", "tailor", "miner", "potter")
DESCRIPTIONS = ("steady", "gamble")
WORDS = ("arms", "is", "the", "pick", *DESCRIPTIONS)


def vocabulary() -> list[str]:
    """Every word this environment emits or accepts, besides the tokenizer's tags."""
    return [*FEEDBACK_WORDS, *WORDS, *TRAIN_NAMES, *TEST_NAMES]


class BanditEnv(TextEnv):
    """Two arms, one turn; see the module docstring."""

    stop_tags = ("</answer>",)

    max_turns = 1
    invalid_penalty = FORMAT_PENALTY

    def __init__(
        self, split: str = "train", safe_reward: float = 0.2, risky_reward: float = 1.0,
        risky_probability: float = 0.5, max_think_words: int = 8,
    ) -> None:  # fmt: skip
        super().__init__()
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split, self.safe_reward, self.risky_reward = split, safe_reward, risky_reward
        self.risky_probability, self.max_think_words = risky_probability, max_think_words
        self.arms: tuple[str, str] = ("", "")
        self.risky = ""
        self.rng = random.Random(0)

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.rng = random.Random(seed)
        names = TRAIN_NAMES if self.split == "train" else TEST_NAMES
        first, second = self.rng.sample(names, 2)
        self.arms = (first, second)
        self.risky = self.rng.choice(self.arms)
        described = " ".join(f"{name} {'gamble' if name == self.risky else 'steady'}" for name in self.arms)
        return f"arms {described} pick", {"risky": self.risky, "success": False}

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        _, answer = parse_turn(action, self.max_think_words)
        if answer not in self.arms:
            raise InvalidAction("answer one of arms")
        chose_risky = answer == self.risky
        if chose_risky:
            reward = self.risky_reward if self.rng.random() < self.risky_probability else 0.0
        else:
            reward = self.safe_reward
        return "", reward, True, {"risky": self.risky, "chose_risky": chose_risky, "success": chose_risky}

    def valid_action(self, rng: random.Random) -> str:
        """One of the two arms, in the reasoning-then-answer format."""
        return turn_text([], rng.choice(self.arms))

    def reward_range(self) -> tuple[float, float]:
        """An arm's payout (the gamble's may be 0), or the format penalty."""
        return (min(self.invalid_penalty, 0.0, self.safe_reward), max(self.safe_reward, self.risky_reward, 0.0))

    def anchor(self) -> tuple:
        return (self.arms, self.risky, self.turn)


def reasoning(env: BanditEnv, answer: str) -> list[str]:
    """A demonstrator's reasoning before choosing `answer`: the arm and its description (`NAME is gamble`), words that
    depend on the input."""
    return [answer, "is", "gamble" if answer == env.risky else "steady"]


register("bandit", BanditEnv)
