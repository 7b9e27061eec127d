"""Course environments served as OpenEnv environments and driven through OpenEnv's own WebSocket client.

Each test starts the real server (OpenEnv's FastAPI app under uvicorn, in a thread, on a localhost port the OS
picked) and plays the same seed and actions through the client and on the course's environment directly: the
observation text, reward, done, truncation, validity and the course's hooks must agree at every step.
"""

from __future__ import annotations

import contextlib
import functools
import runpy
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("openenv")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.rubrics import Rubric  # noqa: E402

from course_lib import envs  # noqa: E402
from course_lib.envs.key_door import expert_action  # noqa: E402
from course_lib.integrations.openenv import (  # noqa: E402
    CourseEnvClient,
    CourseEnvironment,
    EnvReward,
    TextAction,
    TRLEnvironment,
    as_text,
    create_app,
    export,
)

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """The app served on 127.0.0.1 at a free port, in a daemon thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # port 0: the OS picks a free one, and we hold it until the server has it
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def assert_same_step(result, direct: tuple) -> None:
    """One client step result against `TextEnv.step`'s `(obs, reward, terminated, truncated, info)`."""
    text, reward, terminated, truncated, info = direct
    observation = result.observation
    assert observation.text == text
    assert result.reward == reward and observation.reward == reward
    assert result.done is observation.done is (terminated or truncated)
    assert observation.truncated is truncated
    assert observation.valid is info["valid"] is info["is_action_valid"]
    assert observation.success is bool(info.get("success", False))
    assert observation.anchor == as_text(info["anchor"])


def play(url: str, name: str, env_kwargs: dict, seed: int, actions) -> list[tuple]:
    """Plays `actions` (strings, or a function of the direct environment giving the next one) through the client and
    on a directly made environment until the episode ends or the actions run out; returns the direct steps."""
    direct = envs.make(name, **env_kwargs)
    text, info = direct.reset(seed=seed)
    steps = []
    with CourseEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=seed)
        assert result.observation.text == text and result.reward is None and result.done is False
        assert result.observation.anchor == as_text(info["anchor"])
        assert result.observation.problem_key == as_text(direct.problem_key())
        for action in actions:
            action = action(direct) if callable(action) else action
            step = direct.step(action)
            assert_same_step(client.step(TextAction(text=action)), step)
            steps.append(step)
            if direct.done:
                break
        state = client.state()
        assert (state.env_name, state.step_count, state.done) == (name, direct.turn, direct.done)
        assert state.anchor == as_text(direct.anchor())
    return steps


def test_tool_arithmetic_through_the_client():
    """A malformed action (feedback, `invalid_penalty`), a valid tool call and the right answer (reward 1)."""
    probe = envs.make("tool_arithmetic")
    _, info = probe.reset(seed=7)
    a, op, b = probe.problem
    actions = ["no tags here", f"<tool_call> {a} {op} {b} </tool_call>", f"<answer> {info['answer']} </answer>"]
    with serving(create_app("tool_arithmetic")) as url:
        steps = play(url, "tool_arithmetic", {}, 7, actions)
    assert [s[1] for s in steps] == [-0.1, 0.0, 1.0]
    assert [s[4]["valid"] for s in steps] == [False, True, True]
    assert steps[1][0] == f"<tool_response> {info['answer']} </tool_response>"
    assert steps[-1][2] is True and steps[-1][4]["success"] is True


def test_key_door_through_the_client_to_the_goal_and_to_the_turn_limit():
    """key_door with constructor kwargs: a malformed action, then the expert's moves to the goal (reward 1 on the
    last step, 0 before); a second server with `max_steps=3` truncates after three malformed actions."""
    kwargs = {"size": 6, "view": "full"}
    with serving(create_app("key_door", **kwargs)) as url:
        steps = play(url, "key_door", kwargs, 11, ["up down", *[expert_action] * 40])
    assert steps[0][4]["valid"] is False and steps[0][1] == 0.0
    assert [s[1] for s in steps[1:]] == [0.0] * (len(steps) - 2) + [1.0]
    assert steps[-1][2] is True and steps[-1][4]["success"] is True and len(steps) > 5

    with serving(create_app("key_door", size=6, max_steps=3)) as url:
        steps = play(url, "key_door", {"size": 6, "max_steps": 3}, 11, ["jump"] * 5)
    assert len(steps) == 3 and steps[-1][3] is True and steps[-1][2] is False


def test_generic_client_sees_the_same_wire_format():
    """OpenEnv's untyped `GenericEnvClient` (no course code on the client side) reads the same fields."""
    direct = envs.make("number_line")
    text, _ = direct.reset(seed=2)
    move = "<move> right </move>" if direct.goal > direct.position else "<move> left </move>"
    obs, reward, terminated, truncated, info = direct.step(move)
    with serving(create_app("number_line")) as url, GenericEnvClient(base_url=url).sync() as client:
        first = client.reset(seed=2)
        assert first.observation["text"] == text and first.done is False
        result = client.step({"text": move})
    assert result.observation["text"] == obs and result.reward == reward and result.done == (terminated or truncated)
    assert result.observation["valid"] is True and result.observation["anchor"] == repr(info["anchor"])
    # openenv 0.10 sends metadata (0.3.0 dropped it): the hooks, the course's reward and plain info entries
    metadata = result.observation["metadata"]
    assert metadata["anchor"] == repr(info["anchor"]) and metadata["env_reward"] == reward
    assert metadata["valid"] is True and metadata["success"] is info["success"]


def test_the_reward_is_the_rubrics():
    """In-process: the default rubric passes the course's reward through and records it; another rubric replaces it
    (what the client would see); `fork` continues independently; the hooks are in `metadata` too."""
    env = CourseEnvironment("tool_arithmetic")
    first = env.reset(seed=7)
    assert isinstance(env.rubric, EnvReward) and first.metadata["env_reward"] is None
    answer = first.metadata["answer"]
    twin = env.fork()
    wrong = env.step(TextAction(text="<answer> 0 </answer>"))
    assert wrong.reward == 0.0 and env.rubric.last_score == 0.0 and wrong.done
    right = twin.step(TextAction(text=f"<answer> {answer} </answer>"))
    assert right.reward == 1.0 and twin.rubric.last_score == 1.0 and env.rubric.last_score == 0.0
    assert right.metadata["valid"] is True and right.metadata["anchor"] == right.anchor
    assert twin.state.done and twin.state.step_count == 1

    class Doubled(Rubric):
        def __init__(self) -> None:
            super().__init__()
            self.base = EnvReward()

        def forward(self, action, observation) -> float:
            return 2 * self.base(action, observation)

    doubled = CourseEnvironment("tool_arithmetic", rubric=Doubled())
    doubled.reset(seed=7)
    assert doubled.step(TextAction(text=f"<answer> {answer} </answer>")).reward == 2.0
    assert dict(doubled.rubric.named_rubrics())["base"].last_score == 1.0


def test_trl_environment_factory_shape():
    """What TRL's `environment_factory` calls: `reset(**row)` -> the first observation, the `act` tool, whose schema
    transformers can build from its signature and docstring (TRL renders tools with it), `get_reward()` -> the
    episode's summed reward; a finished episode takes no more steps."""
    from transformers.utils import get_json_schema

    tools = [name for name in vars(TRLEnvironment) if not name.startswith("_") and name not in ("reset", "get_reward")]
    assert tools == ["act"]
    schema = get_json_schema(TRLEnvironment.act)["function"]
    assert schema["name"] == "act" and schema["parameters"]["required"] == ["action"]
    probe = envs.make("tool_arithmetic")
    text, info = probe.reset(seed=7)
    with serving(create_app("tool_arithmetic")) as url:
        env = TRLEnvironment(url)
        assert env.reset(seed=7, prompt=[{"role": "user", "content": "solve"}]) == text
        assert env.act("nonsense").startswith("<feedback>")
        assert env.act(f"<answer> {info['answer']} </answer>") == ""
        assert env.act("<answer> 1 </answer>") == "the episode has ended"
        assert env.get_reward() == pytest.approx(0.9)  # -0.1 for the malformed action, then 1
        assert env.reset(seed=7) == text and env.get_reward() == 0.0


@pytest.mark.parametrize("name", envs.names())
def test_every_course_environment_is_published(name):
    """In-process, each of the course's environments: the reset text and a malformed action's feedback, reward and
    validity are the course environment's own, and the hooks are its anchor and problem key."""
    direct, published = envs.make(name), CourseEnvironment(name)
    text, info = direct.reset(seed=1)
    first = published.reset(seed=1)
    assert (first.text, first.anchor, first.problem_key) == (
        text,
        as_text(info["anchor"]),
        as_text(direct.problem_key()),
    )
    obs, reward, terminated, truncated, info = direct.step("@@")
    step = published.step(TextAction(text="@@"))
    assert (step.text, step.reward, step.done, step.valid) == (obs, reward, terminated or truncated, info["valid"])
    assert step.valid is False and step.anchor == as_text(info["anchor"])


def test_grpo_trainer_trains_through_the_adapter(tmp_path):
    """TRL's own `GRPOTrainer(environment_factory=...)` takes `TRLEnvironment` and trains one step on CPU: a random
    qwen3 stand-in (course_lib.course.standins) with TRL's Qwen3 chat template, key_door served by OpenEnv. `act` is the
    one tool TRL registers, every rollout's `reset` gets its row's seed, and the environment's reward is a logged
    reward column (0 here: a random model reaches no goal; the steps and rewards themselves are the tests above)."""
    pytest.importorskip("trl")
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from course_lib.course.standins import build_standin

    seeds_seen = []

    class Recording(TRLEnvironment):
        def reset(self, seed: int = 0, **row) -> str:
            seeds_seen.append(seed)
            return super().reset(seed=seed, **row)

    folder = build_standin(tmp_path / "model", family="qwen3")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen3_chat_template  # a template TRL parses tool calls from
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "Reach the goal."}]] * 4, "seed": [3, 3, 5, 5]}
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=8,
        max_tool_calling_iterations=2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,  # float32, as the course's TRL route on a CPU (TRL's default picks bf16 where the CPU has it)
        seed=0,
    )
    with serving(create_app("key_door")) as url:
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(folder),
            processing_class=tokenizer,
            args=args,
            train_dataset=dataset,
            environment_factory=functools.partial(Recording, url),
        )
        assert [tool.__name__ for tool in trainer.tools] == ["act"]
        trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1 and logged["rewards/Recording/mean"] == 0.0
    assert sorted(seeds_seen) in ([3, 3], [5, 5])  # one prompt of two generations per step


def test_unknown_names_and_kwargs_fail_when_the_app_is_built():
    with pytest.raises(KeyError, match="unknown environment"):
        create_app("no_such_env")
    with pytest.raises(TypeError):
        create_app("key_door", no_such_kwarg=1)


def test_the_course_imports_without_openenv():
    """Nothing but this module imports openenv: the extra stays optional."""
    code = (
        "import sys, course_lib, course_lib.envs, course_lib.integrations, course_lib.rl.train; "
        "course_lib.envs.make('key_door'); assert 'openenv' not in sys.modules, 'openenv imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def exported(tmp_path: Path, name: str, **kwargs) -> Path:
    return export(name, tmp_path / name, **kwargs)


def test_every_environment_exports_a_package_openenv_validate_accepts(tmp_path):
    """Each registered environment, written by `export`, passes OpenEnv's own static validation (the level that runs
    without Docker): its manifest declares the environment's reward range, or the one given where it declares none;
    the written app serves that environment."""
    from openenv.validation import Level, run_validation

    undeclared = {"function_calling": (-3.0, 4.0), "mini_travel": (0.0, 1.0), "price_tools": (-1.0, 1.5)}
    for name in envs.names():
        folder = exported(tmp_path, name, reward_range=undeclared.get(name))
        report = run_validation(folder, max_level=Level.STATIC, skip_build=True)
        assert report.verdict.value == "pass", (name, [(r.check_id, r.evidence) for r in report.results])
        manifest = yaml.safe_load((folder / "openenv.yaml").read_text())
        assert manifest["validation"]["reward"]["range"] == list(envs.make(name).reward_range() or undeclared[name])
    app = runpy.run_path(str(tmp_path / "key_door" / "server" / "app.py"))["app"]
    with serving(app) as url, CourseEnvClient(base_url=url).sync() as client:
        assert client.reset(seed=3).observation.text == envs.make("key_door").reset(seed=3)[0]


def test_an_export_without_a_reward_range_is_refused(tmp_path):
    with pytest.raises(ValueError, match="price_tools declares no reward range"):
        exported(tmp_path, "price_tools")
    with pytest.raises(ValueError, match="low < high"):
        exported(tmp_path, "price_tools", reward_range=(1.0, 1.0))
    assert not (tmp_path / "price_tools").exists()  # nothing written


def test_the_export_command_and_openenv_validate(tmp_path):
    """The command line end to end: `--export` writes the package, `openenv validate` (its CLI) accepts it."""
    folder = tmp_path / "grid"
    subprocess.run([sys.executable, "-m", "course_lib.integrations.openenv", "key_door", "--kwargs", '{"size": 6}',
                    "--export", str(folder)], check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    assert "create_app('key_door', **{'size': 6})" in (folder / "server" / "app.py").read_text()
    validate = Path(sys.executable).with_name("openenv")
    done = subprocess.run([str(validate), "validate", str(folder), "--level", "static", "--skip-build"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "PASS  static.manifest" in done.stdout, done.stdout + done.stderr
