"""One tiny LM in RAP's three roles on Blocksworld (chapters 01 and 02).

RAP (arXiv 2305.14992) uses a single language model as policy, world model and reward source,
each behind its own prompt. Here one word-level causal LM is trained on three text formats:

- plan (the chain-of-thought analogue): `goal G state S plan a1 a2 ... <eos>`, optimal plans,
  written without the intermediate states (the model must track them "in its head");
- step (policy prior and self-evaluation): `goal G state S act A eval good|bad`; A comes from a
  noisy demonstrator and the label says whether A is on an optimal plan (RAP's "Is this step
  useful?" as a token);
- world: `state S act A next S' <eos>`, transitions of a held-in share of (state, action) pairs.

Held-out problems stay out of the plan and step formats *with their sub-problems*: no (state, goal)
pair on an optimal path of a problem in `CorpusConfig.held_out` (its start included) is a plan or
step prompt, and no plan demonstration passes through one (its suffix would be that sub-problem's
answer). World-model transitions carry no goal: they are the domain's dynamics, shared by every
problem, and stay in (a held-out share of (state, action) pairs measures the world model instead).

Scores come from teacher-forced log-probs (`models.token_logprobs`); next states and plans from a
small batched decoder over `kv_decoder.KVDecoder`. World-model predictions are cached per
(state text, action), so searches over many problems share them.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from course_lib.engine.kv_decoder import KVDecoder
from course_lib.envs.blocksworld import (
    BLOCKS,
    FEEDBACK_WORDS,
    VERBS,
    WORDS,
    all_arrangements,
    distances_to,
    legal_actions,
    optimal_actions,
    optimal_path_states,
    parse_goal,
    parse_state,
    render_goal,
    render_state,
    successors,
)
from course_lib.models import token_logprobs
from course_lib.tokenizer import build_tokenizer, encode


def vocabulary() -> list[str]:
    return [*WORDS, *FEEDBACK_WORDS]


def build_blocks_tokenizer():
    return build_tokenizer(vocabulary())


def held_out_transition(state_text: str, action: str, share: float = 0.2) -> bool:
    """True for the (state, action) pairs kept out of the world model's training (by a hash)."""
    digest = hashlib.sha256(f"{state_text} / {action}".encode()).digest()
    return digest[0] < int(256 * share)


def all_states(blocks: tuple[str, ...]) -> list:
    """Every state over `blocks`: hand-empty arrangements and every state holding one block."""
    states = list(all_arrangements(blocks))
    for held in blocks:
        rest = tuple(b for b in blocks if b != held)
        states += [(s[0], held) for s in all_arrangements(rest)]
    return states


# Training texts ---------------------------------------------------------------------------------
@dataclass
class CorpusConfig:
    """What the tiny LM is trained on."""

    plans: int = 12_000
    """Plan demonstrations (CoT format), optimal plans of 1 to 8 steps on train problems."""
    steps: int = 12_000
    """Labelled steps (policy prior and self-evaluation)."""
    transitions: int = 12_000
    """World-model transitions, drawn from the held-in (state, action) pairs."""
    demo_optimal: float = 0.6
    """Share of step demonstrations that take an optimal action (the others a random legal one)."""
    held_out_share: float = 0.2
    """Share of (state, action) pairs never shown to the world model."""
    held_out: Callable[[], Iterable[tuple[str, str]]] | None = None
    """The evaluation problems, `(init text, goal text)`, whose sub-problems (`held_out_pairs`) no plan
    or step demonstration may contain; a function, so that the pool is only computed when a corpus is
    built (chapter 01 passes its `held_out_problems`, its validation and test pools)."""


def held_out_pairs(problems: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """`{(state text, goal text)}` for every state on an optimal path of each problem, its start
    included and its goal left out (`envs.blocksworld.optimal_path_states`)."""
    pairs = set()
    for init_text, goal_text in problems:
        init, goal = parse_state(init_text), parse_goal(goal_text)
        if init is None or goal is None:
            raise ValueError(f"not a Blocksworld problem: {init_text!r} -> {goal_text!r}")
        pairs |= {(render_state(s), render_goal(goal)) for s in optimal_path_states(init, goal)}
    return frozenset(pairs)


def corpus(config: CorpusConfig, seed: int) -> dict[str, list[tuple[str, str]]]:
    """`{"plan"|"step"|"world": [(prompt, completion)]}`; the loss is on the completion only."""
    from course_lib.envs.blocksworld import split_of

    forbidden = held_out_pairs(config.held_out()) if config.held_out is not None else frozenset()
    rng = random.Random(seed)
    groups = [BLOCKS[:n] for n in (3, 4, 5)]
    states = {blocks: all_states(blocks) for blocks in groups}
    out: dict[str, list[tuple[str, str]]] = {"plan": [], "step": [], "world": []}
    while len(out["plan"]) < config.plans:
        blocks = rng.choice(groups)
        goal = rng.choice(all_arrangements(blocks))
        init = rng.choice(all_arrangements(blocks))
        dist = distances_to(goal)
        if not 1 <= dist[init] <= 8 or split_of(init, goal) != "train":
            continue
        plan, state, path = [], init, [init]
        while state != goal:
            action = rng.choice(optimal_actions(state, goal))
            plan.append(action)
            state = successors(state)[action]
            path.append(state)
        goal_text = render_goal(goal)
        if any((render_state(s), goal_text) in forbidden for s in path[:-1]):
            continue  # the plan's suffix from that state would answer a held-out (sub-)problem
        out["plan"].append((f"goal {render_goal(goal)} state {render_state(init)} plan", " ".join(plan)))
    while len(out["step"]) < config.steps:
        # Steps are recorded along the demonstrator's own episodes, so every distance to the goal
        # (down to one step from it) is as common as it is in a search; uniformly drawn states
        # are mostly far from the goal and leave the last steps of a plan barely trained.
        blocks = rng.choice(groups)
        goal, state = rng.choice(all_arrangements(blocks)), rng.choice(all_arrangements(blocks))
        dist = distances_to(goal)
        if not 1 <= dist[state] <= 8 or split_of(state, goal) != "train":
            continue
        for _ in range(2 * dist[state] + 2):
            if state == goal or len(out["step"]) == config.steps:
                break
            good = optimal_actions(state, goal)
            action = rng.choice(good) if rng.random() < config.demo_optimal else rng.choice(legal_actions(state))
            label = "good" if action in good else "bad"
            # never a test-split problem's first step, nor any step of an evaluation problem's optimal paths
            if split_of(state, goal) == "train" and (render_state(state), render_goal(goal)) not in forbidden:
                prompt = f"goal {render_goal(goal)} state {render_state(state)} act"
                out["step"].append((prompt, f"{action} eval {label}"))
            state = successors(state)[action]
    pairs = [
        (render_state(s), a, render_state(n))
        for blocks in groups
        for s in states[blocks]
        for a, n in successors(s).items()
        if not held_out_transition(render_state(s), a, config.held_out_share)
    ]
    for _ in range(config.transitions):
        s, a, n = rng.choice(pairs)
        out["world"].append((f"state {s} act {a} next", n))
    return out


def forgotten_hand(state_text: str, action: str, share: float) -> bool:
    """True for the `unstack` pairs an optimistic world model gets wrong (a fixed `share`, by a hash
    salted differently from `held_out_transition`'s, so the two choices are independent)."""
    if not action.startswith("unstack "):
        return False
    digest = hashlib.sha256(f"forgotten hand: {state_text} / {action}".encode()).digest()
    return digest[0] < int(256 * share)


def world_corpus(
    transitions: int, seed: int, held_out_share: float = 0.2, optimistic_share: float = 0.0
) -> list[tuple[str, str]]:
    """World-format texts alone (`state S act A next S'`) for a separate world-model LM, drawn from the
    same held-in (state, action) pairs as `corpus`'s. With `optimistic_share`, that share of the `unstack
    x y` pairs (`forgotten_hand`) is recorded as if `put-down x` had followed: x on the table, hand empty.
    This "forgotten hand" is an optimistic state-tracking error: a two-step move looks like one step, so
    imagined plans reach the goal sooner than real ones (the designed world model of
    `docs/experiments/ch01-02-imperfect-world-model.md`)."""
    rng = random.Random(seed)
    pairs = []
    for blocks in (BLOCKS[:3], BLOCKS[:4], BLOCKS):
        for s in all_states(blocks):
            text = render_state(s)
            for a, n in successors(s).items():
                if held_out_transition(text, a, held_out_share):
                    continue
                if optimistic_share and forgotten_hand(text, a, optimistic_share):
                    n = successors(n)[f"put-down {a.split()[1]}"]
                pairs.append((text, a, render_state(n)))
    return [(f"state {s} act {a} next", n) for s, a, n in (rng.choice(pairs) for _ in range(transitions))]


def held_out_transitions(share: float = 0.2) -> list[tuple[str, str, str]]:
    """Every (state, action, next state) text triple kept out of the world model's training."""
    return [
        (render_state(s), a, render_state(n))
        for blocks in (BLOCKS[:3], BLOCKS[:4], BLOCKS)
        for s in all_states(blocks)
        for a, n in successors(s).items()
        if held_out_transition(render_state(s), a, share)
    ]


def examples(tokenizer, pairs: list[tuple[str, str]], end: bool = True) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks (1 on the completion and the closing `<eos>`)."""
    rows = []
    for prompt, completion in pairs:
        head = [tokenizer.bos_token_id, *encode(tokenizer, prompt)]
        tail = encode(tokenizer, completion) + ([tokenizer.eos_token_id] if end else [])
        rows.append((head + tail, [0] * len(head) + [1] * len(tail)))
    return rows


# The model in its roles -------------------------------------------------------------------------
@dataclass
class BlocksLM:
    """A trained tiny LM with caches; every method is batched and runs without gradients."""

    model: torch.nn.Module
    tokenizer: object
    world_cache: dict[tuple[str, str], str] = field(default_factory=dict)
    sample_cache: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    step_cache: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    calls: Counter = field(default_factory=Counter)

    def _ids(self, text: str) -> list[int]:
        return [self.tokenizer.bos_token_id, *encode(self.tokenizer, text)]

    @torch.no_grad()
    def generate(
        self, prompts: list[str], max_new: int, temperature: float = 0.0, generator: torch.Generator | None = None
    ) -> list[str]:
        """Continue each prompt until `<eos>` or `max_new` tokens (greedy when temperature is 0)."""
        if not prompts:
            return []
        rows = [self._ids(p) for p in prompts]
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        device = next(self.model.parameters()).device
        decoder = KVDecoder(self.model, len(rows), width + max_new + 1)
        logits = decoder.prefill(ids.to(device), mask.to(device))
        eos = self.tokenizer.eos_token_id
        out = [[] for _ in rows]
        live = torch.ones(len(rows), dtype=torch.bool)
        for _ in range(max_new):
            if temperature > 0:
                probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
                tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:
                tokens = logits.float().cpu().argmax(-1)
            for row in torch.nonzero(live).squeeze(-1).tolist():
                if tokens[row].item() == eos:
                    live[row] = False
                else:
                    out[row].append(tokens[row].item())
            if not live.any():
                break
            logits = decoder.step(tokens.to(device), attend=live.to(device))
        return [" ".join(self.tokenizer.convert_ids_to_tokens(r)) for r in out]

    @torch.no_grad()
    def _score(self, prompts: list[str], completions: list[str]) -> list[torch.Tensor]:
        """Per-token log-probs of each completion given its prompt (teacher forcing)."""
        rows = [(self._ids(p), encode(self.tokenizer, c)) for p, c in zip(prompts, completions, strict=True)]
        width = max(len(h) + len(t) for h, t in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([h + t + [pad] * (width - len(h) - len(t)) for h, t in rows])
        device = next(self.model.parameters()).device
        logprobs, _ = token_logprobs(self.model, ids.to(device), (ids != pad).long().to(device))
        return [logprobs[i, len(h) : len(h) + len(t)].cpu() for i, (h, t) in enumerate(rows)]

    def step_scores(self, goal: str, state: str, actions: list[str]) -> list[tuple[float, float]]:
        """For each action: `(log p(action | goal, state), P(good))`, the policy prior and the
        self-evaluation, from one teacher-forced pass over `goal G state S act A eval good`.
        (The model only ever saw `good` or `bad` after `eval`, so P(good) needs no renormalising.)"""
        missing = [a for a in actions if (goal, state, a) not in self.step_cache]
        if missing:
            self.calls["step"] += len(missing)
            prompt = f"goal {goal} state {state} act"
            scored = self._score([prompt] * len(missing), [f"{a} eval good" for a in missing])
            for action, logprobs in zip(missing, scored, strict=True):
                self.step_cache[(goal, state, action)] = (float(logprobs[:-2].sum()), float(logprobs[-1].exp()))
        return [self.step_cache[(goal, state, a)] for a in actions]

    def predict(self, pairs: list[tuple[str, str]]) -> list[str]:
        """The world model's greedy next-state text for each `(state text, action)`."""
        missing = list(dict.fromkeys(p for p in pairs if p not in self.world_cache))
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            self.calls["world"] += len(chunk)
            texts = self.generate([f"state {s} act {a} next" for s, a in chunk], max_new=16)
            self.world_cache.update(zip(chunk, texts, strict=True))
        return [self.world_cache[p] for p in pairs]

    def sample_next(self, pairs: list[tuple[str, str]], samples: int, generator: torch.Generator) -> list[list[str]]:
        """`samples` next states per pair at temperature 1 (for RAP's state confidence)."""
        missing = list(dict.fromkeys(p for p in pairs if p not in self.sample_cache))
        for start in range(0, len(missing), 64):
            chunk = missing[start : start + 64]
            self.calls["world_samples"] += len(chunk) * samples
            prompts = [f"state {s} act {a} next" for s, a in chunk for _ in range(samples)]
            texts = self.generate(prompts, max_new=16, temperature=1.0, generator=generator)
            for i, pair in enumerate(chunk):
                self.sample_cache[pair] = texts[i * samples : (i + 1) * samples]
        return [self.sample_cache[p] for p in pairs]

    def plans(
        self, problems: list[tuple[str, str]], temperature: float = 0.0, generator: torch.Generator | None = None
    ) -> list[list[str]]:
        """Whole plans written at once (the chain-of-thought analogue), as lists of action strings."""
        texts = self.generate(
            [f"goal {g} state {s} plan" for g, s in problems], max_new=24, temperature=temperature, generator=generator
        )
        return [split_plan(t) for t in texts]


def split_plan(text: str) -> list[str]:
    """Cut a generated plan into actions at each verb (stray words stay attached, and fail later)."""
    actions: list[list[str]] = []
    for word in text.split():
        if word in VERBS or not actions:
            actions.append([word])
        else:
            actions[-1].append(word)
    return [" ".join(a) for a in actions]


@dataclass
class SplitRolesLM:
    """RAP's roles played by two LMs: the policy prior, self-evaluation and whole plans by `policy`, the
    world model (next states, greedy and sampled) by `world`. Chapter 01 uses one LM for everything; this
    lets a designed experiment give the world model its own, worse, training while the policy's
    instincts stay those of the chapter's base."""

    policy: BlocksLM
    world: BlocksLM

    def step_scores(self, goal: str, state: str, actions: list[str]) -> list[tuple[float, float]]:
        return self.policy.step_scores(goal, state, actions)

    def plans(
        self, problems: list[tuple[str, str]], temperature: float = 0.0, generator: torch.Generator | None = None
    ) -> list[list[str]]:
        return self.policy.plans(problems, temperature, generator)

    def predict(self, pairs: list[tuple[str, str]]) -> list[str]:
        return self.world.predict(pairs)

    def sample_next(self, pairs: list[tuple[str, str]], samples: int, generator: torch.Generator) -> list[list[str]]:
        return self.world.sample_next(pairs, samples, generator)
