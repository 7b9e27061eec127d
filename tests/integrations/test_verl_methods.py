"""The verl-side methods' parts that need no verl (main environment, CI): GiGPO's token advantages from the agent
loop's columns, the group filters' verdicts, the tree engine over a server (chapter 08's tree), the MI gate's
decisions and the monitor's settings and questions (chapter 12's, on chapter 08's task), each against the course's
own implementation on the same episodes. `tests_verl/` (test_methods, test_trees, test_monitor, test_launch) runs
the same checks through verl's own data path in `.venv-verl`."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from course_lib import data
from course_lib.algos.gigpo import GiGPOConfig
from course_lib.chapters import ch07_gigpo as ch07
from course_lib.chapters import ch08_arpo as ch08
from course_lib.diagnostics import MIStop
from course_lib.engine import tree_rollout
from course_lib.engine.rollout import RolloutEngine, collate, pad_id
from course_lib.engine.step_mode import rollout_steps
from course_lib.integrations import course_verl, verl_filters, verl_gigpo, verl_monitor, verl_trees
from course_lib.rl import seams
from course_lib.rl.train import FilterConfig, GRPOConfig
from course_lib.tasks import two_hop_search

PROMPTS, GROUP = 2, 4


def columns(rows: list[dict], width: int) -> tuple[torch.Tensor, dict[str, list]]:
    """The response mask `[B, width]` (right-padded, as verl pads) and the `extra_fields` columns of rows."""
    mask = torch.zeros(len(rows), width)
    for b, row in enumerate(rows):
        mask[b, : len(row["response_mask"])] = torch.tensor(row["response_mask"], dtype=torch.float)
    keys = rows[0]["extra_fields"].keys()
    return mask, {key: [row["extra_fields"][key] for row in rows] for key in keys}


@pytest.fixture(scope="module")
def ch07_run():
    config = ch07.preset("cpu")
    model, tokenizer = data.load_base("ch07_base", "cpu")
    engine = RolloutEngine(model.eval(), tokenizer, config.sampling)
    make = ch07.EnvFactory("train", config)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    episodes = rollout_steps(engine, [make() for _ in seeds], seeds, seeds, torch.Generator().manual_seed(1))
    return episodes, tokenizer


@pytest.mark.parametrize("baseline", ["pooled", "trajectory"])
def test_gigpo_step_rows_match_the_course(ch07_run, baseline):
    episodes, tokenizer = ch07_run
    rows = [row for episode in episodes for row in episode.rows]
    config = GRPOConfig(
        group_size=GROUP, advantage="gigpo", invalid_penalty=0.1,
        gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline=baseline),
    )  # fmt: skip
    expected, stats = seams.gigpo(collate(rows, pad_id(tokenizer)), config)
    assert stats["step_group_size_mean"] > 1
    step_rows = verl_gigpo.step_rows(episodes)
    mask, nontensor = columns(step_rows, 8)
    settings = verl_gigpo.GiGPOSettings.from_course(config)
    advantages, verl_stats = verl_gigpo.gigpo_token_advantages(mask, nontensor, nontensor["uid_hint"], settings)
    assert verl_stats == stats
    largest = 0.0
    for b, row in enumerate(rows):
        prompt = sum(1 for t in row.turn_ids if t < 0)
        length = len(row.token_ids) - prompt
        largest = max(largest, (advantages[b, :length] - expected[b, prompt : prompt + length]).abs().max().item())
        assert not advantages[b, length:].any()
    assert largest <= 1e-6 and expected.abs().max() > 0.1


def test_gigpo_settings_from_verl_algorithm_config():
    gigpo = {"step_weight": 0.5, "episode_baseline": "trajectory", "invalid_penalty": 0}
    algorithm = {"gamma": 0.9, "norm_adv_by_std_in_grpo": False, "course": {"gigpo": gigpo}}
    assert verl_gigpo.GiGPOSettings.from_algorithm_config(algorithm) == verl_gigpo.GiGPOSettings(
        0.9, 0.5, "trajectory", False, 0.0
    )
    with pytest.raises(KeyError, match="env_steps"):
        verl_gigpo.gigpo_token_advantages(torch.ones(1, 2), {}, ["a"], verl_gigpo.GiGPOSettings())


@pytest.mark.parametrize(
    "name, settings",
    [("starpo_s", {"keep_fraction": 0.5}), ("snr_top_p", {"top_p": 0.6}), ("snr_top_p", {"mode": "softmax"})],
)
def test_group_filter_verdicts_match_the_course(ch07_run, name, settings):
    """Step rows (several rows per episode: one reward per episode enters its group's std, as the course's)."""
    episodes, tokenizer = ch07_run
    rows = [row for episode in episodes for row in episode.rows]
    batch = collate(rows, pad_id(tokenizer))
    config = GRPOConfig(group_size=GROUP, batch_filter=name, filter=FilterConfig(**settings))
    expected = seams.resolve("batch_filter", name)(batch, config)
    step_rows = verl_gigpo.step_rows(episodes)
    mask, nontensor = columns(step_rows, 8)
    nontensor["uid"] = nontensor["uid_hint"]
    before = mask.clone()
    keep, metrics = verl_filters.filter_batch(
        {"response_mask": mask}, nontensor, verl_filters.FilterSettings.from_course(name, config.filter)
    )
    assert keep.tolist() == expected.tolist()
    if keep.any():
        assert torch.equal(mask, before * keep[:, None])
    assert metrics["course/filter_kept_share"] == pytest.approx(float(expected.float().mean()))


class Replay:
    """A server answering each turn with the course tree's tokens at that context (a queue per context, in the
    course's creation order) and their recorded log-probs and entropies, in verl's `TokenOutput` shape."""

    def __init__(self, leaves, tree):
        self.queues = {}
        for leaf, parent, fork in zip(leaves, tree.parents, tree.fork_steps, strict=True):
            for turn in range(0 if parent is None else fork, max(leaf.turn_ids) + 1):
                at = [k for k, (t, m) in enumerate(zip(leaf.turn_ids, leaf.loss_mask)) if t == turn and m]
                if at:
                    turn_of = (leaf.token_ids, leaf.logprobs, leaf.entropies)
                    self.queues.setdefault(tuple(leaf.token_ids[: at[0]]), []).append(
                        [[v[k] for k in at] for v in turn_of]
                    )

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        ids, logprobs, entropies = self.queues[tuple(prompt_ids)].pop(0)
        return SimpleNamespace(token_ids=ids, log_probs=logprobs, extra_fields={"entropies": entropies})


@pytest.mark.parametrize("rule", ["arpo", "aepo"])
def test_server_engine_grows_the_course_tree(rule, monkeypatch):
    """`sample_trees` over `ServerEngine` and over the course's engine on the same seeds, on ARPO's chapter 08 with
    its tree (`Chapter08Config.grpo.tree`'s alpha, beta and k; 1 global sample per group of 4, the share of its
    `arpo_n2` ablation, so that branches fork again): the same tree, the same tokens, masks and log-probs (the
    branch draws recorded on one run and replayed on the other)."""
    from course_lib.algos.arpo import should_branch

    draws = []

    def record(probability, generator):
        draws.append((float(probability), should_branch(probability, generator)))
        return draws[-1][1]

    tasks = course_verl.chapter_tasks("08")
    model, tokenizer = data.load_base(tasks.base, "cpu")
    config = dataclasses.replace(ch08.Chapter08Config().grpo.tree, global_samples=1, rule=rule)
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    monkeypatch.setattr(tree_rollout, "should_branch", record)
    engine = RolloutEngine(model.eval(), tokenizer, dataclasses.replace(tasks.sampling, snapshot_envs=True))
    leaves, tree = tree_rollout.sample_trees(engine, envs, [0, 1], GROUP, config, torch.Generator().manual_seed(5))
    assert any(p is not None for p in tree.parents) and max(tree.fork_steps) >= 2  # a branch after the second search
    replayed = list(draws)

    def replay(probability, generator):
        recorded, decision = replayed.pop(0)
        assert probability == pytest.approx(recorded, abs=1e-12)  # the same entropies gave the same probability
        return decision

    monkeypatch.setattr(tree_rollout, "should_branch", replay)
    server = verl_trees.ServerEngine(
        verl_trees.server_generate(Replay(leaves, tree)),
        tokenizer,
        dataclasses.replace(tasks.sampling, snapshot_envs=True),
        {"temperature": 1.0},
    )
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    again, again_tree = tree_rollout.sample_trees(server, envs, [0, 1], GROUP, config, torch.Generator().manual_seed(5))
    assert not replayed
    assert (again_tree.parents, again_tree.fork_steps) == (tree.parents, tree.fork_steps)
    for c, v in zip(leaves, again, strict=True):
        assert (c.token_ids, c.loss_mask, c.logprobs, c.turn_ids, c.rewards) == (
            v.token_ids,
            v.loss_mask,
            v.logprobs,
            v.turn_ids,
            v.rewards,
        )
    # a leaf as verl's AgentLoopOutput: its response, mask and one span per action
    fields = verl_trees.leaf_fields(again[-1], again_tree.parents[-1], again_tree.fork_steps[-1])
    prompt = sum(1 for t in again[-1].turn_ids if t < 0)
    assert fields["response_ids"] == again[-1].token_ids[prompt:]
    assert len(fields["extra_fields"]["action_spans"]) >= fields["extra_fields"]["env_steps"]


@pytest.mark.parametrize(
    "sequence",
    [[1.0, 0.95, 0.9, 0.5, 0.95], [0.5, 0.9], [1.0, 0.9, 0.85], [0.95, 0.8, 0.95, 0.7]],
)
def test_mi_gate_decides_as_mistop(sequence):
    """The same MI sequence through chapter 12's `MIStop` (with a model whose weight records the iteration it was
    evaluated at) and `MIGate`: the same stop, and the rollback lands on the same iteration."""
    base_mi, drop = 1.0, 0.2
    model = torch.nn.Linear(1, 1, bias=False)
    stop, gate = MIStop(base_mi, drop), verl_monitor.MIGate(base_mi, drop)
    course_stopped = gate_stopped = None
    for iteration, mi in enumerate(sequence, start=1):
        with torch.no_grad():
            model.weight.fill_(iteration)
        stop.remember(model, mi)
        if course_stopped is None and stop.check({"eval_monitor_mi": mi, "iteration": iteration}):
            course_stopped = iteration
        if gate_stopped is None and gate.observe(iteration, mi):
            gate_stopped = iteration
        if course_stopped is not None:
            break
    assert gate_stopped == course_stopped == stop.stopped_at == gate.stopped_at
    with torch.no_grad():
        model.weight.fill_(-1)
    stop.restore(model)
    restored = int(model.weight.item())
    if gate.stopped_at is None or gate.remembered is None:
        assert restored == -1 or gate.stopped_at is None
    else:
        assert restored == gate.remembered
        assert gate.resume_overrides("ckpt") == [
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path=ckpt/global_step_{restored}",
        ]


def test_pair_batch_layout():
    pairs = verl_monitor.pair_batch([[2, 5], [2, 6, 7]], [[9], [8, 9]], 0, 3, 2)
    assert pairs["input_ids"].tolist()[1] == [2, 6, 7, 9, 0] and pairs["input_ids"].tolist()[2] == [0, 2, 5, 8, 9]
    assert pairs["position_ids"].tolist()[2] == [0, 0, 1, 2, 3]
    assert pairs["response_mask"].tolist() == [[1, 0], [1, 0], [1, 1], [1, 1]]


def test_step_rows_carry_their_episode(ch07_run):
    episodes, _ = ch07_run
    rows = verl_gigpo.step_rows(episodes)
    assert len(rows) == sum(len(e.rows) for e in episodes)
    first = episodes[0]
    mine = [r for r in rows if r["extra_fields"]["episode_uid"] == "group-0/episode-0"]
    assert [r["extra_fields"]["step_offset"] for r in mine] == list(range(len(first.rows)))
    assert all(r["reward_score"] == pytest.approx(first.total_reward) for r in mine)
    assert sum(sum(r["extra_fields"]["step_rewards"]) for r in mine) == pytest.approx(first.total_reward)


def test_the_monitor_hook_stops_and_points_at_the_rollback(tmp_path):
    """`MIMonitor.wrap` around a validation function, on a stand-in for verl's trainer: measured steps 10, 20, 30
    with MI 1.0, 0.9, 0.5 (threshold 0.8): it stops at step 30, ends training there and names step 20's folder."""
    import json

    values = iter([1.0, 0.9, 0.5])
    trainer = SimpleNamespace(
        global_steps=0, total_training_steps=100,
        config=SimpleNamespace(trainer=SimpleNamespace(default_local_dir=str(tmp_path))),
    )  # fmt: skip
    monitor = verl_monitor.MIMonitor(verl_monitor.MIGate(1.0, 0.2), measure=lambda t: next(values))
    validate = monitor.wrap(lambda t: {"val/success": 0.5})
    for step in (10, 20, 30):
        trainer.global_steps = step
        metrics = validate(trainer)
        assert metrics["val/success"] == 0.5
    assert metrics["course/mi_stop"] == 1.0 and trainer.total_training_steps == 30
    report = json.loads((tmp_path / "mi_stop.json").read_text())
    assert report["stopped_at"] == 30 and report["rollback"] == str(tmp_path / "global_step_20")


def test_monitor_settings_default_to_chapter_12():
    """`+trainer.course.mi_monitor.*` as `verl_launch` writes it, read back; keys left out take chapter 12's values."""
    from course_lib.chapters import ch12_capstone as ch12
    from course_lib.integrations import verl_launch

    chapter12 = ch12.Chapter12Config()
    expected = verl_monitor.MonitorSettings(
        "ch00", chapter12.gate_drop, chapter12.monitor_prompts, two_hop_search.MONITOR_SEED
    )
    block = {}
    for override in verl_launch.overrides("mi_monitor"):
        key, _, value = override.partition("=")
        if key.startswith("+trainer.course.mi_monitor."):
            block[key.rsplit(".", 1)[1]] = value if key.endswith("chapter") else float(value)
    assert set(block) == {"chapter", "drop", "prompts", "first_seed"}
    config = {"course": {"mi_monitor": block}}
    assert verl_monitor.MonitorSettings.from_trainer_config(config) == expected
    assert verl_monitor.MonitorSettings.from_trainer_config({"course": {"mi_monitor": {"chapter": "00"}}}) == (
        dataclasses.replace(expected, chapter="00")
    )
    assert verl_monitor.MonitorSettings.from_trainer_config({"default_local_dir": "x"}) is None
    with pytest.raises(KeyError, match="chapter"):
        verl_monitor.MonitorSettings.from_trainer_config({"course": {"mi_monitor": {"drop": 0.1}}})
    assert not any("mi_monitor" in o for o in verl_launch.overrides("grpo"))


def test_monitor_rows_are_chapter_12s_questions():
    """The rows the monitor hands the rollout manager: the export's columns, seeds `MONITOR_SEED + p`, each prompt the
    reset observation of its own seed."""
    settings = verl_monitor.MonitorSettings(
        "08", 0.2, 3, two_hop_search.MONITOR_SEED
    )  # chapter 12's task is chapter 08's
    rows = verl_monitor.monitor_rows(settings)
    exported = course_verl.export_rows("08", "train", 3)
    tasks = course_verl.chapter_tasks("08")
    assert [info["seed"] for info in rows["extra_info"]] == [
        two_hop_search.MONITOR_SEED,
        two_hop_search.MONITOR_SEED + 1,
        two_hop_search.MONITOR_SEED + 2,
    ]
    for p in range(3):
        env = tasks.make_env("train")
        obs, _ = env.reset(seed=two_hop_search.MONITOR_SEED + p)
        assert rows["prompt"][p] == [{"role": "user", "content": obs}]
        assert rows["reward_model"][p]["ground_truth"] == str(env.problem_key())
        assert {k: v for k, v in rows["extra_info"][p].items() if k != "seed"} == {
            k: v for k, v in exported["extra_info"][p].items() if k != "seed"
        }
    assert rows["prompt"] != exported["prompt"]


def test_the_monitor_takes_its_base_from_the_first_measurement(tmp_path):
    """Without a gate the first measurement (step 0: the base policy, `val_before_train`) sets the base; a failure at
    the first training measurement rolls back to the base model itself (no checkpoint: step 0 has none)."""
    import json

    values = iter([0.6, 0.4, 9.0])
    trainer = SimpleNamespace(
        global_steps=0, total_training_steps=100,
        config=SimpleNamespace(trainer=SimpleNamespace(default_local_dir=str(tmp_path))),
    )  # fmt: skip
    monitor = verl_monitor.MIMonitor(None, measure=lambda t: {"mi": next(values), "retrieval_accuracy": 0.5}, drop=0.2)
    first = monitor.after_validation(trainer)
    assert monitor.gate.base_mi == 0.6 and first["course/mi_stop"] == 0.0
    assert first["course/mi_threshold"] == pytest.approx(0.48) and first["course/monitor_retrieval_accuracy"] == 0.5
    trainer.global_steps = 10
    assert monitor.after_validation(trainer)["course/mi_stop"] == 1.0 and trainer.total_training_steps == 10
    report = json.loads((tmp_path / "mi_stop.json").read_text())
    assert report["remembered"] == 0 and report["rollback"] is None and report["rollback_is_base_model"]
    assert report["resume_overrides"] == [] and report["history"] == [[0, 0.6], [10, 0.4]]
    trainer.global_steps = 11
    assert monitor.after_validation(trainer) == {"course/mi_stop": 1.0}  # not measured again: 9.0 never drawn
    assert next(values) == 9.0


def test_export_with_a_tree_and_the_launch_command(capsys):
    columns = course_verl.export_rows("00", "train", 2, tree={"rule": "aepo", "global_samples": 2})
    assert all(info["tree"] == {"rule": "aepo", "global_samples": 2} for info in columns["extra_info"])
    assert verl_trees.tree_config(columns["extra_info"][0], 8) == tree_rollout.TreeConfig(rule="aepo", global_samples=2)
    assert verl_trees.tree_config({}, 8).global_samples == 4
    course_verl.main(["launch", "--method", "aepo", "--chapter", "00"])
    printed = capsys.readouterr().out
    assert printed.startswith("python -m course_lib.integrations.verl_patch")
    assert "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=" in printed
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=course_entropy_balanced" in printed
    assert "actor_rollout_ref.model.path=data/ch00_base" in printed
    course_verl.main(["launch", "--method", "mi_monitor", "--chapter", "08"])  # chapter 12's monitor, its task
    printed = capsys.readouterr().out
    for override in (
        "+trainer.course.mi_monitor.drop=0.2",
        "+trainer.course.mi_monitor.prompts=32",
        "+trainer.course.mi_monitor.chapter=ch08",
        "actor_rollout_ref.model.path=data/ch08_base",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
    ):
        assert override in printed  # fmt: skip


def test_server_engine_caps_the_response_at_verls_width():
    """`max_response_tokens` (verl's `response_length`) cuts the sequence as `play_episode` does: the response never
    outgrows verl's padded tensor, and the cut turn never reaches the environment."""
    _, tokenizer = data.load_base("ch00_base", "cpu")
    tasks = course_verl.chapter_tasks("00")
    unk = tokenizer.unk_token_id

    class Babble:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            n = sampling_params["max_tokens"]
            return SimpleNamespace(token_ids=[unk] * n, log_probs=[-1.0] * n, extra_fields={})

    for width in (5, 11):
        engine = verl_trees.ServerEngine(
            verl_trees.server_generate(Babble()), tokenizer, tasks.sampling, max_response_tokens=width
        )
        (t,) = engine.rollout([tasks.make_env("train")], [0])
        prompt = sum(1 for turn in t.turn_ids if turn < 0)
        assert len(t.token_ids) - prompt == width and t.cut and t.truncated
        assert t.entropies[prompt] == 1.0  # no entropies from the server: -log p, the one-sample estimate
        fields = verl_trees.leaf_fields(t, None, 0)
        assert fields["extra_fields"]["env_steps"] == len(t.rewards) == width // tasks.sampling.max_turn_tokens
