"""RAP's reward and expansion over a learned world model (chapter 01).

Every node holds a state *predicted* by the LM's world model (text); the real environment is never
consulted during search. Candidate actions are enumerated from the node's state, as RAP does on
Blocksworld (`generate_all_actions`); a state text that does not parse is a failed node.

The reward of taking action a in state s (Hao et al., arXiv 2305.14992, the "reward design" of RAP):

- r_lik   = softmax over the candidates of log p(a | goal, s)          (action likelihood)
- r_conf  = share of K sampled next states equal to the most common one  (state confidence)
- r_eval  = P("good" | goal, s, a)                                       (self-evaluation)
- h       = goal_fraction(s') + 0.5, or `goal_bonus` when s' is the goal  (task heuristic)

combined as RAP's weighted geometric mean, r = m^alpha * h^(1 - alpha), where m is the geometric
mean of the enabled model terms. The goal check and the heuristic read the *predicted* state and
the goal given in the prompt: they are symbolic checks on imagined text, not the real environment.
Simulation uses the same reward without r_conf (RAP skips the costly sampled term there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.envs.blocksworld import goal_fraction, legal_actions, parse_goal, parse_state, render_state, supports
from course_lib.search.blocks_lm import BlocksLM
from course_lib.search.mcts import Child

COMPONENTS = ("likelihood", "confidence", "self_eval", "heuristic")


@dataclass
class RewardConfig:
    """Which reward terms RAP combines, and how."""

    components: tuple[str, ...] = COMPONENTS
    """Enabled terms (the ablation removes some)."""
    alpha: float = 0.5
    """Weight of the model terms in r = m^alpha * h^(1 - alpha)."""
    goal_bonus: float = 100.0
    """h when the predicted state is the goal (RAP's Blocksworld code uses 100)."""
    confidence_samples: int = 4
    """K next states sampled per (state, action) for r_conf."""


def combine(terms: dict[str, float], config: RewardConfig, fast: bool = False) -> float:
    """r = m^alpha * h^(1 - alpha); terms disabled by `config` (or r_conf when `fast`) are left out."""
    model = [terms[k] for k in ("likelihood", "confidence", "self_eval") if k in config.components]
    if fast and "confidence" in config.components:
        model = [terms[k] for k in ("likelihood", "self_eval") if k in config.components]
    m = math.exp(sum(math.log(max(v, 1e-9)) for v in model) / len(model)) if model else 1.0
    if "heuristic" not in config.components:
        return m
    if not model:
        return terms["heuristic"]
    return m**config.alpha * terms["heuristic"] ** (1 - config.alpha)


def state_confidence(samples: list[str]) -> float:
    """Share of the sampled next states that equal the most common one (0 for no samples)."""
    if not samples:
        return 0.0
    return max(samples.count(s) for s in set(samples)) / len(samples)


class ImaginedBlocksworld:
    """`expand(state_text, depth)` for `MCTS`: children from the world model, rewards from the LM."""

    def __init__(self, lm: BlocksLM, goal_text: str, config: RewardConfig, generator: torch.Generator):
        self.lm, self.goal_text, self.config, self.generator = lm, goal_text, config, generator
        self.goal = parse_goal(goal_text)
        self.blocks = tuple(sorted(supports(self.goal)))

    def __call__(self, state_text: str, depth: int) -> list[Child]:
        state = parse_state(state_text, self.blocks)
        if state is None:
            return []
        state_text = render_state(state)
        actions = legal_actions(state)
        predictions = self.lm.predict([(state_text, a) for a in actions])
        scores = self.lm.step_scores(self.goal_text, state_text, actions)
        likelihood = torch.softmax(torch.tensor([s[0] for s in scores]), 0).tolist()
        if "confidence" in self.config.components:
            samples = self.lm.sample_next(
                [(state_text, a) for a in actions], self.config.confidence_samples, self.generator
            )
        else:
            samples = [[] for _ in actions]
        children = []
        for i, action in enumerate(actions):
            nxt = parse_state(predictions[i], self.blocks)
            solved = nxt is not None and nxt == self.goal
            terms = {
                "likelihood": likelihood[i],
                "confidence": state_confidence(samples[i]),
                "self_eval": scores[i][1],
                "heuristic": 0.0
                if nxt is None
                else (self.config.goal_bonus if solved else goal_fraction(nxt, self.goal) + 0.5),
            }
            children.append(
                Child(
                    action=action,
                    state=predictions[i] if nxt is None else render_state(nxt),
                    reward=0.0 if nxt is None else combine(terms, self.config),
                    fast_reward=0.0 if nxt is None else combine(terms, self.config, fast=True),
                    solved=solved,
                    failed=nxt is None,
                    info={"terms": terms},
                )
            )
        return children
