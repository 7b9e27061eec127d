"""Any course environment as an OpenEnv `Environment` (openenv 0.10), its reward given by a rubric.

    python -m course_lib.integrations.openenv key_door --kwargs '{"size": 6}' --port 8000
    python -m course_lib.integrations.openenv my_env --import my_package.my_env   # an environment of yours
    python -m course_lib.integrations.openenv key_door --export envs/key_door   # a package `openenv validate` reads

OpenEnv is the format TRL, Unsloth, SkyRL and NeMo Gym consume: an `Environment` on a server (FastAPI, one
environment per WebSocket session) and an `EnvClient` that speaks to it. The course's `TextEnv` is already
gym-style, so the mapping is one to one:

- `reset(seed)` -> `TextObservation` with the reset text; `step(TextAction(text=...))` -> `TextObservation` with the
  environment's reply, `reward` and `done` (= terminated or truncated; `truncated` is kept as its own field, since
  OpenEnv's observation has only `done`).
- The reward is computed by a rubric, OpenEnv's unit of reward (`openenv.core.rubrics.Rubric`): `EnvReward` returns
  the reward the course's environment computed, so the environment stays the one source of truth and the reward is
  visible to OpenEnv's tooling (`env.rubric.last_score`, `named_rubrics()`) and composable with other rubrics (pass
  `rubric=WeightedSum([EnvReward(), YourFormatRubric()], [1.0, 0.1])`, say).
- `valid` (the course's `info["valid"]`, GEM's `is_action_valid`), `success`, `anchor()` and `problem_key()` have no
  field in OpenEnv's standard: they are fields of `TextObservation` (typed, in the schema a client reads) and
  entries of its `metadata` (OpenEnv's place for extras, which openenv 0.10's server sends to clients, as
  openenv-core 0.3.0's did not), with the course's reward and the info entries that are plain values. `anchor` and
  `problem_key` travel as text: the value itself when it is a string, else its `repr`, which is equal for equal
  values for the course's anchors and keys (tuples, dataclasses and strings of plain values), so GiGPO can still
  group steps by it on the client side.
- `fork()` has no wire form either: `CourseEnvironment.fork()` copies the environment in-process (tree rollouts next
  to the server); a remote client gets the same state in a new session by replaying the seed and the actions, since
  a course environment is deterministic given both (`envs.check_env` checks it). See docs/openenv.md.

`export` writes a course environment as a package OpenEnv publishes (`openenv.yaml`, `server/app.py`): its manifest
declares the environment's reward range (`TextEnv.reward_range`), and `openenv validate <folder> --level static
--skip-build` checks it offline. This module imports `openenv` when it is imported; nothing else in the course imports
it, so the course works without it (`pip install -e .[openenv]` installs it).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.metadata
import json
import uuid
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server import create_app as openenv_create_app
    from openenv.core.rubrics import Rubric
except ImportError as missing:  # an optional extra: say how to get it
    raise ImportError("course_lib.integrations.openenv needs openenv: pip install -e .[openenv]") from missing
import yaml
from pydantic import Field

from course_lib import envs
from course_lib.envs.base import TextEnv

TESTED_OPENENV = "0.10.0"
"""The openenv version this module was tested against (`pip install -e .[openenv]` pins it)."""
if (installed := importlib.metadata.version("openenv")) != TESTED_OPENENV:  # its API is young and moving
    warnings.warn(
        f"course_lib.integrations.openenv was tested with openenv {TESTED_OPENENV}, not {installed}", stacklevel=1
    )
DEFAULT_MAX_SESSIONS = 64
"""Concurrent WebSocket sessions a server accepts by default: one per rollout in flight (a GRPO group of 8 on 8
prompts is 64). Each session has its own environment, so they share nothing."""


class TextAction(Action):
    """The policy's text for one turn, exactly as the course's `TextEnv.step` takes it."""

    text: str = Field(description="The action text, e.g. '<answer> 859 </answer>' or 'up'")


class TextObservation(Observation):
    """What the environment returned, plus the course's hooks that OpenEnv has no standard for (module docstring)."""

    text: str = Field(default="", description="The observation text")
    valid: bool = Field(default=True, description="Whether the last action parsed and was legal (is_action_valid)")
    truncated: bool = Field(default=False, description="The episode ended on the turn limit, not by terminating")
    success: bool = Field(default=False, description="info['success']: what the course's evaluation counts")
    anchor: str = Field(default="", description="The true state's key (GiGPO groups steps by it), as text")
    problem_key: str = Field(default="", description="The problem's identity: equal keys pose the same problem")


class TextState(State):
    """The server-side state: `episode_id` and `step_count` (OpenEnv's), the environment's name and the hooks."""

    env_name: str = ""
    done: bool = False
    anchor: str = ""
    problem_key: str = ""


class EnvReward(Rubric):
    """The course environment's own reward for the step, as a rubric: it reads `metadata['env_reward']`, which
    `CourseEnvironment.step` sets from `TextEnv.step`'s reward before the rubric runs."""

    def forward(self, action: Any, observation: Any) -> float:
        return float(observation.metadata["env_reward"])


def as_text(value: Any) -> str:
    """A hashable course value (an anchor, a problem key) as wire text: a string as is, anything else its repr."""
    return value if isinstance(value, str) else repr(value)


class CourseEnvironment(Environment[TextAction, TextObservation, TextState]):
    """The course environment `name`, built with `env_kwargs`, behind OpenEnv's `Environment` interface.

    `rubric` turns each step into the reward the client sees; the default, `EnvReward()`, passes the course's
    reward through unchanged. `reset` takes the course's `options` and the training iteration (`training_step`,
    which schedule-following rewards such as ToolRL's read) besides OpenEnv's `seed` and `episode_id`.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # a new instance per session, no state shared between instances

    def __init__(self, name: str, env_kwargs: dict[str, Any] | None = None, rubric: Rubric | None = None) -> None:
        super().__init__(rubric=EnvReward() if rubric is None else rubric)
        self.name = name
        self.env_kwargs = dict(env_kwargs or {})
        self.env: TextEnv = envs.make(name, **self.env_kwargs)
        self.episode_id: str | None = None

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        training_step: int | None = None,
        **kwargs: Any,
    ) -> TextObservation:
        self._reset_rubric()
        if training_step is not None:
            self.env.training_step = int(training_step)
        self.episode_id = episode_id or uuid.uuid4().hex
        text, info = self.env.reset(seed=seed, options=options)
        return self._apply_transform(self._observation(text, info, reward=None, done=False, truncated=False))

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        text, reward, terminated, truncated, info = self.env.step(action.text)
        observation = self._observation(text, info, reward=reward, done=terminated or truncated, truncated=truncated)
        observation.reward = self._apply_rubric(action, observation)
        return self._apply_transform(observation)

    def _observation(
        self, text: str, info: dict[str, Any], reward: float | None, done: bool, truncated: bool
    ) -> TextObservation:
        hooks = {
            "valid": bool(info.get("valid", True)),
            "success": bool(info.get("success", False)),
            "anchor": as_text(info["anchor"]),
            "problem_key": as_text(self.env.problem_key()),
        }
        # metadata: the hooks, the course's reward (the rubric's input) and the info entries that are plain values
        plain = {k: v for k, v in info.items() if isinstance(v, str | int | float | bool) and k not in hooks}
        metadata = {**plain, **hooks, "env_reward": reward}
        return TextObservation(text=text, done=done, truncated=truncated, metadata=metadata, **hooks)

    @property
    def state(self) -> TextState:
        started = bool(self.env.transcript.observations)
        return TextState(
            episode_id=self.episode_id,
            step_count=self.env.turn,
            env_name=self.name,
            done=self.env.done,
            anchor=as_text(self.env.anchor()) if started else "",
            problem_key=as_text(self.env.problem_key()) if started else "",
        )

    def fork(self) -> CourseEnvironment:
        """An independent copy in the same state (the course's `TextEnv.fork`), in this process only."""
        twin = copy.copy(self)
        twin.env = self.env.fork()
        twin.rubric = copy.deepcopy(self.rubric)
        return twin


def factory(name: str, rubric: Callable[[], Rubric] | None = None, **env_kwargs: Any) -> Callable[[], Environment]:
    """A zero-argument factory of `CourseEnvironment(name, env_kwargs)`, what OpenEnv's server takes. Checks the
    name and the kwargs now, by building one environment, so a typo fails here and not in the first session."""
    envs.make(name, **env_kwargs)
    if rubric is None:
        return partial(CourseEnvironment, name, env_kwargs)
    return lambda: CourseEnvironment(name, env_kwargs, rubric=rubric())


def create_app(
    name: str,
    max_concurrent_envs: int = DEFAULT_MAX_SESSIONS,
    rubric: Callable[[], Rubric] | None = None,
    **env_kwargs: Any,
) -> Any:
    """The FastAPI app serving course environment `name` (built with `env_kwargs`) with OpenEnv's server: `/ws` for
    sessions (what `EnvClient` uses), `/reset`, `/step`, `/state`, `/schema`, `/health`. `rubric` makes each
    session's rubric (default `EnvReward`). Serve it with uvicorn (`main` below does)."""
    return openenv_create_app(
        factory(name, rubric, **env_kwargs),
        TextAction,
        TextObservation,
        env_name=name,
        max_concurrent_envs=max_concurrent_envs,
    )


class CourseEnvClient(EnvClient[TextAction, TextObservation, TextState]):
    """OpenEnv's WebSocket client, typed for course environments: `step` takes a `TextAction` or a plain string.

    Async like every `EnvClient`; `.sync()` gives the blocking wrapper:

        with CourseEnvClient(base_url="http://localhost:8000").sync() as env:
            result = env.reset(seed=3)
            result = env.step("<answer> 859 </answer>")
    """

    def _step_payload(self, action: TextAction | str) -> dict[str, Any]:
        return {"text": action} if isinstance(action, str) else action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = TextObservation(**payload.get("observation", {}), reward=reward, done=done)
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> TextState:
        return TextState(**payload)


class TRLEnvironment:
    """A served course environment in the shape TRL's `GRPOTrainer(environment_factory=...)` takes (TRL 1.16):
    `reset(**row)` returns the first observation, which TRL appends to the prompt; every other public method is a
    tool the model may call (here one, `act`); `get_reward()` scores the finished rollout (the episode's summed
    reward). `environment_factory=functools.partial(TRLEnvironment, url)`; TRL keeps a pool of instances and resets
    them, so each holds one session (serve with at least as many sessions as rollouts in a batch).

    The dataset row TRL passes to `reset` picks the problem: its `seed` column (0 without one)."""

    def __init__(self, base_url: str) -> None:
        self._client = CourseEnvClient(base_url=base_url).sync()
        self._client.connect()
        self._reward, self._done = 0.0, True

    def reset(self, seed: int = 0, **row: Any) -> str:
        result = self._client.reset(seed=int(seed))
        self._reward, self._done = 0.0, result.done
        return result.observation.text

    def act(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: The action text, in the environment's own format.

        Returns:
            What the environment shows next.
        """
        if self._done:
            return "the episode has ended"
        result = self._client.step(action)
        self._reward += float(result.reward or 0.0)
        self._done = result.done
        return result.observation.text

    def get_reward(self) -> float:
        return self._reward


MANIFEST_RESOURCES = {"cpu": 1.0, "memory_mb": 1024, "disk_mb": 4096, "episode_timeout_s": 60.0}
"""What an exported server declares it needs: one core; 1 GB of memory (a served course environment used about 230 MB
here, most of it OpenEnv's imports); 4 GB of disk (the course's install, CPU torch included); a minute an episode."""
FLOOR_MARGIN = 0.1
"""The declared gap between the reward range's top and a trivial policy's reward: OpenEnv's policy v1 minimum. A
declaration, not a measurement: the semantic checks that measure it need Docker (docs/openenv.md)."""


def export(
    name: str,
    directory: str | Path,
    env_kwargs: dict[str, Any] | None = None,
    reward_range: tuple[float, float] | None = None,
    modules: tuple[str, ...] = (),
    port: int = 8000,
) -> Path:
    """Write course environment `name` (built with `env_kwargs`) as an OpenEnv package in `directory`:
    `openenv.yaml` (the manifest `openenv validate` reads; `validation.reward.range` is the environment's
    `reward_range()`, or `reward_range` where it declares none), `server/app.py` (the app, built by `create_app`;
    `modules` are imported first, for an environment of yours) and a README. Returns the folder."""
    env = envs.make(name, **dict(env_kwargs or {}))
    declared = reward_range if reward_range is not None else env.reward_range()
    if declared is None:
        raise ValueError(
            f"{name} declares no reward range (TextEnv.reward_range); give one: export(..., reward_range=(low, high)) "
            "or --reward-range LOW HIGH, the lowest and highest reward one step can return"
        )
    low, high = (float(bound) for bound in declared)
    if not low < high:
        raise ValueError(f"a reward range is (low, high) with low < high, got {declared}")
    folder = Path(directory)
    (folder / "server").mkdir(parents=True, exist_ok=True)
    manifest = {
        "spec_version": 1,
        "name": name,
        "version": "0.1.0",
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": port,
        "validation": {
            "reward": {"range": [low, high], "oracle_tolerance": 0.0, "floor_margin": FLOOR_MARGIN},
            "resources": MANIFEST_RESOURCES,
            "capabilities": {"verifier": {"kind": "reward_channel"}},
            "types": {"tags": ["course_lib", "text"]},
        },
    }
    (folder / "openenv.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    (folder / "server" / "__init__.py").write_text("")
    imports = "".join(f"import {module}  # registers an environment of yours\n" for module in modules)
    (folder / "server" / "app.py").write_text(
        f'"""The course environment {name} served by OpenEnv (written by `python -m course_lib.integrations.openenv '
        f'--export`)."""\n\nfrom course_lib.integrations.openenv import create_app\n{imports}\n'
        f"app = create_app({name!r}, **{dict(env_kwargs or {})!r})\n"
    )
    (folder / "README.md").write_text(
        f"# {name}, a course_lib environment served by OpenEnv\n\nWith the course installed (`pip install -e "
        f".[openenv]` in its clone): `uvicorn server.app:app --port {port}` in this folder serves it; `openenv "
        "validate . --level static --skip-build` checks the manifest. Rewards per step lie in "
        f"[{low}, {high}].\n"
    )
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a course environment as an OpenEnv environment.")
    parser.add_argument("env", help=f"the environment's name: {', '.join(envs.names())}, or one --import registers")
    parser.add_argument("--kwargs", default="{}", help="the environment's keyword arguments, as JSON")
    parser.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        help="a module to import first (one that calls envs.register for an environment of yours); repeatable",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="concurrent sessions")
    parser.add_argument("--export", metavar="FOLDER", help="write the environment as an OpenEnv package and exit")
    parser.add_argument(
        "--reward-range", nargs=2, type=float, metavar=("LOW", "HIGH"),
        help="with --export: one step's lowest and highest reward, where the environment declares none",
    )  # fmt: skip
    args = parser.parse_args(argv)
    import uvicorn  # a dependency of openenv

    for module in args.modules:
        importlib.import_module(module)
    if args.export:
        kwargs = json.loads(args.kwargs)
        folder = export(args.env, args.export, kwargs, args.reward_range, tuple(args.modules), args.port)
        print(f"wrote {folder}: check it with `openenv validate {folder} --level static --skip-build`")
        return
    app = create_app(args.env, max_concurrent_envs=args.max_sessions, **json.loads(args.kwargs))
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
