"""Implement it (chapter 00): one multi-turn episode, token by token, with its loss mask and its log-probs.

Fill in `play_episode`, then run `pytest exercises/test_rollout.py`, or in notebook 00
`check("rollout.play_episode", use="mine")`. This is the bookkeeping that makes agentic RL differ from single-turn
RL: the policy's turns and the environment's answers share one sequence, and only the policy's tokens may carry
gradient. The reference solution is `course_lib/engine/episode.py`; `RolloutEngine` applies the same rule to many
sequences at once.
"""

from __future__ import annotations


def play_episode(engine, policy, env, seed: int):
    """Play one episode of `env` with `policy` and return its trajectory, exactly as the rollout engine builds it.

    The tool-integrated rollout of ToRL (Li et al. 2025, arXiv 2503.23383: generation stops when a code block asks
    for its output, the interpreter's output is inserted, generation resumes, and the output's tokens are masked out
    of the policy loss), in the token-in, token-out form every multi-turn chapter of the course samples with.

    Args:
        engine: a `course_lib.engine.rollout.RolloutEngine`; read its `tokenizer`, `config` (a `SamplingConfig`:
            `max_turn_tokens`, `max_total_tokens`), `format` (`format.prompt_ids(tokenizer, text)` for the first
            observation, `format.observation_ids(tokenizer, text, last_token)` for the later ones, where
            `last_token` is the last id of the turn just sent), `stop_ids` (a set of ids that end a turn) and
            `stop_strings` (strings whose appearance in the turn's decoded text ends it: a BPE tokenizer spells
            `</answer>` in several pieces). Never call its model.
        policy: `policy(token_ids)` -> `(token, logprob, entropy)`: the next token the policy samples after the
            list `token_ids` (the whole sequence so far), with its log-probability and entropy.
        env: a `course_lib.envs.base.TextEnv`: `env.reset(seed=seed)` -> `(text, info)`; `env.step(text)` ->
            `(text, reward, terminated, truncated, info)`; `env.anchor()` names the state an action is taken in.
        seed: the episode's seed, for `env.reset`.

    Returns:
        A `course_lib.engine.rollout.Trajectory` with `env`, `seed` and, one entry per token, `token_ids`,
        `loss_mask`, `logprobs`, `entropies`, `turn_ids`; one entry per step, `rewards`, `infos`, `anchors`; and
        `terminated`, `truncated`, `cut`.

    Contract:
        - the prompt (the format's ids of the first observation) has loss mask 0, log-prob 0, entropy 0, turn -1;
        - every token the policy sampled has loss mask 1, its log-prob and entropy, and turn id k (the number of
          steps taken before it);
        - a turn ends at the first token that is in `stop_ids` or whose addition makes the decoded turn contain a
          stop string, or after `max_turn_tokens` tokens; its text, the tokenizer's decoding of exactly the
          sampled ids (`course_lib.tokenizer.decode`; never re-encoded), goes to `env.step`; `env.anchor()` is
          recorded just before, the reward and info after;
        - unless the episode ended, the observation's ids follow with loss mask 0, log-prob 0, entropy 0 and the
          same turn id k;
        - the sequence never exceeds `max_total_tokens`: when it reaches that length with the episode still
          running, it stops with `truncated` and `cut` True (an observation is cut to fit);
        - the policy is asked for a token only where the engine samples one.
    """
    raise NotImplementedError("rollout.play_episode: implement me (see the docstring)")
