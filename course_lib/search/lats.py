"""LATS: tree search whose nodes hold real observations (chapter 02; arXiv 2310.04406).

Differences from RAP (`search.rap`), following the LATS paper (Zhou et al., arXiv 2310.04406):

- **Grounded nodes.** Expanding a node samples n distinct actions from the policy and *executes* each in a
  copy of the real environment (LATS needs a revertible environment; every step counts as one
  interaction). A node's state is the observation the environment returned, never a prediction.
- **Value** V(s) = lambda * LM(s) + (1 - lambda) * SC(s): LM(s) is the model's self-evaluation
  P(good) of the step that led to s, SC(s) the share of the n sampled actions equal to this one
  (self-consistency). Selection uses UCT with w = sqrt(2) and a running-mean backup.
- **Reflection, in miniature.** After a simulation ends at a failed leaf, its (state, action)
  pairs enter a memory; later expansions sample those actions with their probability multiplied by
  `memory_penalty` per recorded failure. This stands in for LATS's verbal self-reflection, which
  chapter 01's 0.43M-parameter model cannot write.
- **No leak of the evaluation.** Inside the search the only task signal is the agent's own check
  that the observed state text equals the goal text it was given. The environment's reward and
  `terminated` flag, which the held-out evaluation uses, are never read (LATS's released HotPotQA
  and HumanEval code stopped the search on the gold answer or the hidden tests, a leak we avoid).

The same grounded pieces give the baselines of chapter 02: a single ReAct-style rollout, retries
with the memory of failures (the Reflexion analogue), and best-of-k independent rollouts.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import torch

from course_lib.envs.base import TextEnv
from course_lib.envs.blocksworld import legal_actions, parse_goal, parse_state
from course_lib.search.blocks_lm import BlocksLM
from course_lib.search.mcts import MCTS, Child, MCTSConfig, StopSearch


@dataclass
class LATSConfig:
    """LATS's settings (the paper's HotPotQA defaults where they fit the miniature)."""

    children: int = 3
    """n actions sampled per expansion (LATS uses 5; Blocksworld states have 2 to 6 legal actions)."""
    value_weight: float = 0.5
    """lambda in V = lambda * LM + (1 - lambda) * SC."""
    w_exp: float = math.sqrt(2)
    """UCT exploration weight of LATS's HotPotQA code."""
    memory_penalty: float = 0.2
    """Factor on the sampling probability of an action per failure recorded at that state."""
    temperature: float = 1.0
    """Policy sampling temperature (LATS samples at 1.0)."""
    iterations: int = 1000
    """MCTS iterations (in practice the interaction budget ends the search first)."""


@dataclass
class Grounded:
    """A node's state: the real observation and the environment copy that produced it."""

    observation: str
    env: TextEnv = field(repr=False)

    def __str__(self) -> str:
        return self.observation


class Budget:
    """Counts environment interactions; `spend` raises `StopSearch` when none are left."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def spend(self) -> None:
        if self.used >= self.limit:
            raise StopSearch
        self.used += 1


@dataclass
class Memory:
    """Failed (state, action) pairs and how often each failed (the stand-in for reflections)."""

    failures: Counter = field(default_factory=Counter)

    def record(self, steps: list[tuple[str, str]]) -> None:
        self.failures.update(steps)

    def weights(self, state: str, actions: list[str], penalty: float) -> list[float]:
        return [penalty ** self.failures[(state, a)] for a in actions]


def policy_probabilities(
    lm: BlocksLM, goal: str, state: str, actions: list[str], temperature: float = 1.0,
    memory: Memory | None = None, penalty: float = 1.0,
) -> list[float]:  # fmt: skip
    """p(a | goal, state) over the legal candidates (softmax of their log-likelihoods), times the
    memory's penalties, renormalised."""
    logps = torch.tensor([s[0] for s in lm.step_scores(goal, state, actions)])
    probs = torch.softmax(logps / max(temperature, 1e-6), 0)
    if memory is not None:
        probs = probs * torch.tensor(memory.weights(state, actions, penalty))
    return (probs / probs.sum()).tolist()


class GroundedExpansion:
    """`expand(node_state, depth)` for `MCTS`: sample n actions, execute each in a copy of the env."""

    def __init__(self, lm: BlocksLM, goal: str, config: LATSConfig, budget: Budget, memory: Memory,
                 generator: torch.Generator):  # fmt: skip
        self.lm, self.goal_text, self.config = lm, goal, config
        self.budget, self.memory, self.generator = budget, memory, generator
        self.goal = parse_goal(goal)

    def __call__(self, node: Grounded, depth: int) -> list[Child]:
        state = parse_state(node.observation)
        if state is None:
            return []
        actions = legal_actions(state)
        probs = policy_probabilities(
            self.lm, self.goal_text, node.observation, actions, self.config.temperature, self.memory,
            self.config.memory_penalty,
        )  # fmt: skip
        weights = torch.tensor(probs)
        # Self-consistency counts n samples with replacement; the children are n *distinct* actions
        # (the sampled ones first), so a peaked policy still opens new branches when it is wrong.
        picks = torch.multinomial(weights, self.config.children, replacement=True, generator=self.generator)
        counts = Counter({a: 0 for a in actions})
        counts.update(actions[i] for i in picks.tolist())
        distinct = list(dict.fromkeys(actions[i] for i in picks.tolist()))
        rest = [i for i, a in enumerate(actions) if a not in distinct]
        extra = min(self.config.children - len(distinct), len(rest))
        if extra > 0:
            more = torch.multinomial(weights[rest] + 1e-9, extra, replacement=False, generator=self.generator)
            distinct += [actions[rest[i]] for i in more.tolist()]
        evaluations = dict(zip(actions, self.lm.step_scores(self.goal_text, node.observation, actions), strict=True))
        children = []
        for action in distinct:
            count = counts[action]
            self.budget.spend()
            env = node.env.fork()
            observation, *_ = env.step(action)  # reward and terminated are deliberately ignored
            solved = parse_state(observation) == self.goal
            consistency = count / self.config.children
            value = self.config.value_weight * evaluations[action][1] + (1 - self.config.value_weight) * consistency
            children.append(
                Child(action, Grounded(observation, env), 1.0 if solved else value, solved=solved,
                      info={"self_eval": evaluations[action][1], "consistency": consistency})
            )  # fmt: skip
        return children


@dataclass
class Outcome:
    """What a method returns for one problem: its plan, the interactions spent, and whether the
    agent believes it solved the task (its own goal check on observations)."""

    plan: list[str]
    interactions: int
    believed_solved: bool
    tree: object = None
    path: list[int] = field(default_factory=list)


def _fresh_env(make_env, init: str, goal: str) -> tuple[TextEnv, str]:
    env = make_env()
    observation, _ = env.reset(options={"init": init, "goal": goal})
    return env, observation


def lats(lm, make_env, init: str, goal: str, depth: int, budget: int, config: LATSConfig,
         generator: torch.Generator) -> Outcome:  # fmt: skip
    """LATS from `init` with at most `budget` environment interactions."""
    env, observation = _fresh_env(make_env, init, goal)
    spent, memory = Budget(budget), Memory()

    def on_leaf(tree, path):
        if not tree.nodes[path[-1]]["solved"] and len(path) > 1:
            memory.record([(str(tree.nodes[a]["state"]), tree.nodes[b]["action"]) for a, b in zip(path, path[1:])])

    search = MCTS(
        GroundedExpansion(lm, goal, config, spent, memory, generator),
        MCTSConfig(iterations=config.iterations, w_exp=config.w_exp, depth_limit=depth, backup="mean",
                   stop_when_solved=True),
        on_leaf=on_leaf,
    )  # fmt: skip
    result = search.search(Grounded(observation, env))
    return Outcome(result.plan, spent.used, result.solved, result.tree, result.path)


def rollout(lm, env: TextEnv, observation: str, goal: str, depth: int, budget: Budget, temperature: float,
            generator: torch.Generator | None, memory: Memory | None = None, penalty: float = 1.0):  # fmt: skip
    """One ReAct-style episode: at each real observation pick an action from the policy (argmax when
    temperature is 0), act, read the new observation. Returns `(steps, believed_solved)`."""
    target, steps = parse_goal(goal), []
    for _ in range(depth):
        state = parse_state(observation)
        if state is None or state == target:
            break
        actions = legal_actions(state)
        probs = policy_probabilities(lm, goal, observation, actions, max(temperature, 1e-6), memory, penalty)
        if temperature == 0:
            pick = max(range(len(actions)), key=probs.__getitem__)
        else:
            pick = torch.multinomial(torch.tensor(probs), 1, generator=generator).item()
        budget.spend()
        steps.append((observation, actions[pick]))
        observation, *_ = env.step(actions[pick])
    return steps, parse_state(observation) == target


def react(lm, make_env, init: str, goal: str, depth: int) -> Outcome:
    """A single greedy ReAct-style episode."""
    env, observation = _fresh_env(make_env, init, goal)
    spent = Budget(depth)
    steps, solved = rollout(lm, env, observation, goal, depth, spent, 0.0, None)
    return Outcome([a for _, a in steps], spent.used, solved)


def retries(lm, make_env, init: str, goal: str, depth: int, budget: int, generator: torch.Generator,
            memory_penalty: float | None = 0.2) -> Outcome:  # fmt: skip
    """Sampled episodes, one after another, until the agent sees the goal or the budget is spent.
    With `memory_penalty`, each failed episode's steps are remembered and made less likely (the
    Reflexion analogue); with None the episodes are independent (best-of-k)."""
    spent, memory = Budget(budget), Memory() if memory_penalty is not None else None
    steps: list = []
    while True:
        env, observation = _fresh_env(make_env, init, goal)
        try:
            steps, solved = rollout(lm, env, observation, goal, depth, spent, 1.0, generator, memory,
                                    memory_penalty or 1.0)  # fmt: skip
        except StopSearch:
            return Outcome([], spent.used, False)
        if solved:
            return Outcome([a for _, a in steps], spent.used, True)
        if memory is not None:
            memory.record(steps)
