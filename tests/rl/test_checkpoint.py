"""A checkpoint's tokenizer through the engine (issue 30): stand-ins made here (a byte-level BPE tokenizer with a
ChatML template, random-init models of several families), no hub.

What is checked: the environment receives exactly the text the model wrote; prompt and observation ids are the
chat template's; a stop string of several tokens ends the turn at the token that completes it, so no tag is split
across turns; engine log-probs equal a full forward for families with and without the fast decoder; demonstration
masks drawn from character offsets; and the drift a re-tokenizing trainer would see, counted.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import command
from course_lib.course import standins
from course_lib.engine.bookkeeping import alignment_errors, expected_tokens
from course_lib.engine.prompt_format import ChatFormat, PlainFormat
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.rl import checkpoint, session
from course_lib.rl.train import stored_logprob_error
from course_lib.rl.warm_start import demonstration_examples
from course_lib.tokenizer import decode, encode, is_word_level

STOPS = ("</tool_call>", "</answer>")


@pytest.fixture(scope="module")
def tokenizer():
    return standins.default_tokenizer()


def test_the_tags_are_several_pieces_of_the_stand_in(tokenizer):
    assert not is_word_level(tokenizer)
    assert all(len(encode(tokenizer, tag)) > 1 for tag in STOPS), "the point of the stand-in: tags are text"
    assert tokenizer.bos_token_id is None


def test_chat_format_ids_are_the_chat_templates(tokenizer):
    """The engine's ids for a conversation (prompt, the policy's ids, the glue around an observation) are what
    `apply_chat_template` tokenizes for the same messages, whether or not the policy wrote the end-of-turn token."""
    fmt = ChatFormat(system="You are a calculator agent.")
    question, call, response, answer = (
        "<question> 12 + 30 </question>",
        "<tool_call> 12 + 30 </tool_call>",
        "<tool_response> 42 </tool_response>",
        "<answer> 42 </answer>",
    )
    messages = [
        {"role": "system", "content": fmt.system},
        {"role": "user", "content": question},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": response},
        {"role": "assistant", "content": answer},
    ]
    template = tokenizer.apply_chat_template(messages, tokenize=False)
    expected = encode(tokenizer, template)
    end = tokenizer.eos_token_id
    for wrote_end in (False, True):
        action = encode(tokenizer, call) + ([end] if wrote_end else [])
        ids = fmt.prompt_ids(tokenizer, question) + action + fmt.observation_ids(tokenizer, response, action[-1])
        ids += encode(tokenizer, answer)
        assert ids == expected[: len(ids)], wrote_end
        assert decode(tokenizer, expected[len(ids) :]) == "<|im_end|>\n"


def scripted(engine: RolloutEngine, script: list[int]):
    """Make `engine` sample `script` (then EOS) in every row, log-prob 0: the stop logic under test, not a model."""
    position = {}

    def sample(logits, generator):
        rows = logits.shape[0]
        tokens = []
        for row in range(rows):
            k = position.get(row, 0)
            tokens.append(script[k] if k < len(script) else engine.tokenizer.eos_token_id)
            position[row] = k + 1
        return tokens, [0.0] * rows, [0.0] * rows

    engine.sample = sample


def test_a_multi_token_stop_ends_the_turn_where_the_string_ends(tokenizer):
    """The policy writes a tool call, a stray word, then the rest: the turn ends at the token that completes
    `</tool_call>`, the environment receives exactly the decoded turn, and the stray word starts the next turn."""
    torch.manual_seed(0)
    model = standins.build_standin_model("qwen2", tokenizer, seed=0)
    config = SamplingConfig(max_turn_tokens=64, max_total_tokens=200, prompt_format="chat", stop_tags=STOPS)
    engine = RolloutEngine(model, tokenizer, config)
    call = encode(tokenizer, "<tool_call> 12 + 30 </tool_call>")
    scripted(engine, call + encode(tokenizer, " then <answer> 42 </answer>"))
    env = ch00.make_env("test")
    [trajectory] = engine.rollout([env], [0])
    actions = env.transcript.actions
    assert actions[0] == decode(tokenizer, call) == "<tool_call> 12 + 30 </tool_call>"
    assert actions[1] == " then <answer> 42 </answer>"
    assert alignment_errors(trajectory, tokenizer, ChatFormat()) == []
    rows = list(zip(trajectory.token_ids, trajectory.loss_mask, trajectory.turn_ids, strict=True))
    for turn in range(len(actions)):
        sampled = [i for i, m, t in rows if m and t == turn]
        shorter = decode(tokenizer, sampled[:-1])
        assert not any(stop in shorter for stop in STOPS), "the turn went on past its stop string"


def test_random_policies_keep_exact_bookkeeping_and_a_retokenizer_drifts(tokenizer):
    """Random-init qwen2 (fast decoder) and qwen3 (the model's own forward): every episode's prompt and
    observation ids are the template's, every action is the decoded turn; a trainer that re-encodes the
    transcript's text would see other ids in some episodes (counted)."""
    drifted = 0
    for family in ("qwen2", "qwen3"):
        model = standins.build_standin_model(family, tokenizer, seed=1)
        config = SamplingConfig(max_turn_tokens=12, max_total_tokens=160, prompt_format="chat", stop_tags=STOPS)
        engine = RolloutEngine(model, tokenizer, config)
        envs = [ch00.make_env("train") for _ in range(16)]
        trajectories = engine.rollout(envs, list(range(16)), generator=torch.Generator().manual_seed(0))
        for trajectory in trajectories:
            assert alignment_errors(trajectory, tokenizer, ChatFormat()) == []
            ids, _ = expected_tokens(trajectory, tokenizer, ChatFormat())
            drifted += ids != trajectory.token_ids
    assert drifted > 0, "random sampling spells some turns with other pieces than the tokenizer's encoding"


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "gpt2", "llama"])
def test_engine_logprobs_equal_a_full_forward(tokenizer, family):
    """The sampling log-probs the engine stores are the model's own, recomputed by one forward over the whole
    padded batch, for a family with the fast decoder (qwen2, llama) and without (qwen3, gpt2)."""
    bos_tokenizer = standins.default_tokenizer(bos=True) if family == "llama" else tokenizer
    model = standins.build_standin_model(family, bos_tokenizer, seed=2)
    config = SamplingConfig(max_turn_tokens=10, max_total_tokens=120, prompt_format="chat", stop_tags=STOPS)
    engine = RolloutEngine(model, bos_tokenizer, config)
    envs = [ch00.make_env("train") for _ in range(6)]
    trajectories = engine.rollout(envs, list(range(6)), generator=torch.Generator().manual_seed(1))
    assert all(any(t.loss_mask) for t in trajectories), "every episode samples something"
    assert stored_logprob_error(model, trajectories, engine.pad_id) <= 2e-5
    policy = trajectories[0].loss_mask.index(1)
    trajectories[0].logprobs[policy] += 0.1  # a stored log-prob the model would not give: the check sees it
    assert stored_logprob_error(model, trajectories, engine.pad_id) == pytest.approx(0.1, abs=1e-4)


def test_plain_format_without_bos(tokenizer):
    """A tokenizer without BOS (Qwen's): the prompt is the observation's ids alone, no None in it."""
    assert PlainFormat().prompt_ids(tokenizer, "<question> 1 + 2 </question>") == encode(
        tokenizer, "<question> 1 + 2 </question>"
    )


def test_demonstration_masks_follow_character_offsets(tokenizer):
    """With tags split into pieces, the mask still covers exactly the tool responses: the masked-in text is the
    completion without them (for the course's tokenizers, `tests/rl/test_train.py` pins the same function)."""
    completion = "<tool_call> 12 + 30 </tool_call> <tool_response> 42 </tool_response> <answer> 42 </answer>"
    [(ids, mask)] = demonstration_examples(tokenizer, [("<question> 12 + 30 </question>", completion)])
    policy = decode(tokenizer, [i for i, m in zip(ids, mask) if m])
    hidden = decode(tokenizer, [i for i, m in zip(ids, mask) if not m])
    assert "tool_response" not in policy and "42 </tool_response>" in hidden
    assert policy.replace(" ", "") == "<tool_call>12+30</tool_call><answer>42</answer>"


def test_chat_demonstrations_are_built_as_rollouts_are(tokenizer):
    """`checkpoint.demonstration_examples`: the policy's turns masked in, the template's glue and the tool
    responses masked out, and the ids those of the chat template for the same messages."""
    completion = "<tool_call> 12 + 30 </tool_call> <tool_response> 42 </tool_response> <answer> 42 </answer>"
    assert checkpoint.split_turns(completion) == [
        ("<tool_call> 12 + 30 </tool_call>", "<tool_response> 42 </tool_response>"),
        ("<answer> 42 </answer>", ""),
    ]
    [(ids, mask)] = checkpoint.demonstration_examples(tokenizer, [("<question> 12 + 30 </question>", completion)])
    messages = [
        {"role": "user", "content": "<question> 12 + 30 </question>"},
        {"role": "assistant", "content": "<tool_call> 12 + 30 </tool_call>"},
        {"role": "tool", "content": "<tool_response> 42 </tool_response>"},
        {"role": "assistant", "content": "<answer> 42 </answer>"},
    ]
    assert ids == encode(tokenizer, tokenizer.apply_chat_template(messages, tokenize=False))[: len(ids)]
    policy = decode(tokenizer, [i for i, m in zip(ids, mask) if m])
    assert policy == "<tool_call> 12 + 30 </tool_call><answer> 42 </answer>"


def small(config, group_size: int = 4, **changes):
    """A chapter's configuration cut to seconds: a few demonstrations, warm-start steps and RL iterations."""
    grpo = dataclasses.replace(config.grpo, iterations=2, prompts_per_iteration=2, group_size=group_size, eval_every=1)
    sft = dataclasses.replace(config.sft, steps=40, batch_size=16, warmup_steps=1)
    return dataclasses.replace(config, demonstrations=96, sft=sft, grpo=grpo, **changes)


@pytest.mark.slow
@pytest.mark.parametrize("chapter", ["ch00", "ch07"])
def test_a_chapter_runs_end_to_end_on_a_stand_in(chapter, tmp_path, monkeypatch):
    """`COURSE_MODEL` (a chapter command's `--model`): the checkpoint loads by `from_pretrained`, warm-starts with
    LoRA on the chapter's demonstrations in the chat format (its loss falls), then RL, evaluation and every claim
    number come out as for the course's own base; the committed base is not touched."""
    from course_lib.chapters import ch07_gigpo as ch07

    standins.build_standin(tmp_path / "model", "qwen2")
    monkeypatch.setenv(session.MODEL_VARIABLE, str(tmp_path / "model"))
    module = {"ch00": ch00, "ch07": ch07}[chapter]
    # chapter 07's step-group histogram is written for its groups of 8
    changes = {"eval_tasks": 8} if chapter == "ch00" else {"eval_tasks": 8, "noisy_iterations": 1, "group_size": 8}
    results = module.run(0, small(module.preset("cpu"), **changes))
    model = results.get("base_model") or results.get("model")
    assert hasattr(model, "peft_config"), "a LoRA adapter on the checkpoint"
    numbers = module.claim_numbers(results)
    assert all(isinstance(value, float) for value in numbers.values())
    assert {claim.id for claim in module.claims(results)} == {spec.id for spec in module.CLAIMS}
    if chapter == "ch00":
        checks = results["checks"]
        assert checks["text_errors"] == 0 and checks["id_errors"] == 0 and checks["mask_errors"] == 0
        assert "retokenized_tokens" in checks  # counted for a BPE tokenizer, never for the course's


def test_the_chapter_command_refuses_to_record_a_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ch00.CHAPTER.main(["--model", str(tmp_path), "--record"])
    assert "not recorded" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ch00.CHAPTER.main(["--full-finetune"])
    assert "give --model" in capsys.readouterr().err


def test_a_chapter_that_cannot_take_a_checkpoint_refuses_it(tmp_path, capsys):
    """Chapter 09 always starts from its own base: `--model` there is an error, not a run of the course's base."""
    from course_lib.chapters import ch09_ragen as ch09

    with pytest.raises(SystemExit):
        ch09.CHAPTER.main(["--model", str(tmp_path)])
    assert "always starts from its own base" in capsys.readouterr().err


def test_demonstrations_given_as_the_transcripts_turns_mask_every_observation(tokenizer):
    """Issue 42, item 3: a non-tool environment's observations (number_line's `<position> 4 </position>`) are not
    `<tool_response>`s, so a joined completion cannot say where they are. Given as the transcript's own turns
    (`TextEnv.demonstration()`), every observation is masked out, in the chat format (`checkpoint`) and in the
    course's plain one (`train`), and the budgets are measured on the same turns."""
    from course_lib.envs.template import NumberLineEnv, vocabulary
    from course_lib.tokenizer import build_tokenizer

    env = NumberLineEnv("train")
    env.reset(seed=2)
    for move in ("right", "left", "right"):
        env.step(f"<move> {move} </move>")
    assert not env.done
    prompt, turns = env.demonstration()
    assert prompt == env.transcript.observations[0] and turns == env.transcript.turns() and len(turns) == 3
    assert turns[0] == ("<move> right </move>", env.transcript.observations[1])
    assert checkpoint.split_turns(turns) == turns
    [(ids, mask)] = checkpoint.demonstration_examples(tokenizer, [(prompt, turns)])
    policy = decode(tokenizer, [i for i, m in zip(ids, mask, strict=True) if m])
    assert policy == "<move> right </move><move> left </move><move> right </move>", policy
    messages = [{"role": "user", "content": prompt}]
    for action, observation in turns:
        messages += [{"role": "assistant", "content": action}, {"role": "tool", "content": observation}]
    template = encode(tokenizer, tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert ids == template, "the last observation is followed by the next assistant turn's opening, as in a rollout"
    while not env.done:
        env.step("<move> right </move>")
    assert env.demonstration()[1][-1] == ("<move> right </move>", ""), "a rollout never shows the last observation"
    sampling = checkpoint.chat_sampling(SamplingConfig(max_turn_tokens=3, max_total_tokens=40), tokenizer,
                                        [(prompt, turns)])  # fmt: skip
    assert sampling.max_turn_tokens >= len(encode(tokenizer, "<move> right </move>"))
    words = build_tokenizer(vocabulary())
    [(plain, plain_mask)] = demonstration_examples(words, [(prompt, turns)])
    masked_in = [words.convert_ids_to_tokens(i) for i, m in zip(plain, plain_mask, strict=True) if m]
    assert masked_in == ["<move>", "right", "</move>", "<move>", "left", "</move>", "<move>", "right", "</move>"]
    assert len(plain) == 1 + len(prompt.split()) + sum(len(f"{a} {o}".split()) for a, o in turns)


@pytest.mark.parametrize(("family", "positions", "chapter"), [("gpt2", 64, "ch00"), ("llama", 256, "ch08")])
def test_a_context_shorter_than_the_budget_is_refused_before_the_warm_start(family, positions, chapter, tmp_path,
                                                                            monkeypatch):  # fmt: skip
    """Issue 42, item 5: a GPT-2 with 64 positions crashed inside its embedding during the warm start, and a Llama
    with 256 (rotary: no crash) ran chapter 08's episodes past its position table. The episode budget in this
    tokenizer's tokens is compared with the checkpoint's positions up front, and the run refused with both numbers
    before any warm-start step."""
    import functools

    from course_lib.chapters import ch08_arpo as ch08
    from course_lib.tasks import bases

    module = {"ch00": ch00, "ch08": ch08}[chapter]
    folder = standins.build_standin(tmp_path / "model", family, max_positions=positions)
    monkeypatch.setenv(session.MODEL_VARIABLE, str(folder))
    config = small(module.preset("cpu"))
    if chapter == "ch00":
        texts = functools.partial(ch00.demonstration_texts, config.demonstrations, 0, config.tool_share,
                                  config.direct_correct)  # fmt: skip
    else:
        texts = functools.partial(ch08.demonstration_texts, config.demonstrations, 0, config)
    steps = []
    monkeypatch.setattr(checkpoint, "supervised_warm_start", lambda *args, **kwargs: steps.append(1) or [{"loss": 0.0}])
    with pytest.raises(ValueError) as refused:
        bases.base_for(module.BASE_NAME, config, texts)
    message = str(refused.value)
    budget = int(message.split("episodes of up to ")[1].split()[0])
    assert f"{folder} has {positions} positions" in message and budget > positions, message
    assert "sampling.max_total_tokens" in message and steps == [], "refused before the warm start"


def _no_tool_role(tokenizer):
    """A copy of `tokenizer` whose chat template, as many do, knows system, user and assistant only (jinja raises on
    any other role)."""
    import copy

    without = copy.deepcopy(tokenizer)
    template = standins.chat_template(bos=False).replace("'assistant', 'tool']", "'assistant']")
    assert template != standins.chat_template(bos=False)
    without.chat_template = template
    return without


def test_a_template_without_a_tool_role_says_which_option_gives_observations_another(tokenizer, tmp_path, capsys):
    """Issue 42, item 12: a chat template without a `tool` role failed inside jinja. The error names the role and the
    way to give observations another one, which is reachable from the command line (`--observation-role user`,
    `sampling.prompt_format=chat:user`); with it, demonstrations and rollouts render observations as user turns."""
    from course_lib.engine.prompt_format import resolve

    without = _no_tool_role(tokenizer)
    turns = [("<tool_call> 12 + 30 </tool_call>", "<tool_response> 42 </tool_response>"), ("<answer> 42 </answer>", "")]
    with pytest.raises(ValueError, match=r"cannot render a 'tool' message .*--observation-role user"):
        checkpoint.demonstration_examples(without, [("<question> 12 + 30 </question>", turns)])
    assert resolve("chat:user") == ChatFormat(observation_role="user")
    assert SamplingConfig(prompt_format="chat:user").prompt_format == "chat:user"
    with pytest.raises(ValueError, match="prompt_format"):
        SamplingConfig(prompt_format="chat:")
    [(ids, mask)] = checkpoint.demonstration_examples(
        without, [("<question> 12 + 30 </question>", turns)], ChatFormat(observation_role="user")
    )
    messages = [{"role": "user", "content": "<question> 12 + 30 </question>"},
                {"role": "assistant", "content": turns[0][0]}, {"role": "user", "content": turns[0][1]},
                {"role": "assistant", "content": turns[1][0]}]  # fmt: skip
    assert ids == encode(without, without.apply_chat_template(messages, tokenize=False))[: len(ids)]
    sampling = checkpoint.chat_sampling(SamplingConfig(), without, [("<question> 1 </question>", turns)], "user")
    assert sampling.prompt_format == "chat:user"
    (tmp_path / "config.json").write_text("{}")
    with checkpoint.using(tmp_path, observation_role="user"):
        assert checkpoint.observation_role() == "user"
    assert checkpoint.observation_role() == "tool"
    with pytest.raises(SystemExit):
        command.main(ch00.CHAPTER, ["--observation-role", "user"])
    assert "--observation-role applies to a checkpoint: give --model" in capsys.readouterr().err


def test_a_chapter_warm_starts_a_checkpoint_without_a_tool_role_given_another(tokenizer, tmp_path):
    """The same through a chapter's `base_for` (what `--model` and `--observation-role` reach): refused with the
    option's name without it, warm-started and sampled in `chat:user` with it."""
    import functools

    from course_lib.tasks import bases

    folder = standins.build_standin(tmp_path / "model", "qwen2", tokenizer=_no_tool_role(tokenizer))
    config = small(ch00.preset("cpu"))
    config = dataclasses.replace(config, sft=dataclasses.replace(config.sft, steps=2))
    texts = functools.partial(ch00.demonstration_texts, 32, 0, config.tool_share, config.direct_correct)
    with checkpoint.using(folder), pytest.raises(ValueError, match="--observation-role user"):
        bases.base_for(ch00.BASE_NAME, config, texts)
    with checkpoint.using(folder, observation_role="user"):
        model, loaded, resolved = bases.base_for(ch00.BASE_NAME, config, texts)
    assert resolved.sampling.prompt_format == "chat:user"
    engine = RolloutEngine(model, loaded, resolved.sampling)
    [trajectory] = engine.rollout([ch00.make_env("train")], [0], generator=torch.Generator().manual_seed(0))
    assert alignment_errors(trajectory, loaded, ChatFormat(observation_role="user")) == []


def test_a_commands_warm_start_says_what_it_does_and_how_long_it_took(tmp_path, capsys):
    """Issue 58: `--model smollm2` warm-started for minutes with no line printed. Under a command's observers (what
    `session.observing` gives a chapter command's run) the warm start says what it runs and, when done, its time and
    loss; without them (a notebook's cell, a library call) it prints nothing."""
    from course_lib.rl import session
    from course_lib.rl.warm_start import SFTConfig

    folder = standins.build_standin(tmp_path / "model", "llama")
    texts = [("<question> 2 + 2 </question>", "<answer> 4 </answer>")] * 4
    sft = SFTConfig(steps=8, batch_size=2, learning_rate=1e-3)
    quiet, _, _ = checkpoint.warm_start(folder, texts, sft, seed=0)
    assert capsys.readouterr().out == ""
    with session.observing(lambda config, sampling, start=0: None):
        said, _, _ = checkpoint.warm_start(folder, texts, sft, seed=0)
    out = capsys.readouterr().out
    assert "warm start: 8 steps of 2 of 4 demonstrations (LoRA on all blocks)" in out
    # a line at each quarter (steps 2, 4 and 6 of 8), then the end
    assert [line.split(",")[0] for line in out.splitlines() if "warm start: step" in line] == [
        f"  warm start: step {n} of 8" for n in (2, 4, 6)]  # fmt: skip
    assert "warm start done in " in out and " min: loss " in out
    # the lines change nothing: the same adapter, weight for weight
    assert all(torch.equal(a, b) for a, b in zip(quiet.state_dict().values(), said.state_dict().values(), strict=True))
    with session.observing(lambda config, sampling, start=0: None):
        checkpoint.warm_start(folder, texts, dataclasses.replace(sft, steps=2), seed=0, lora_top_layers=1)
    assert "warm start: 2 steps of 2 of 4 demonstrations (LoRA on the top 1 blocks)" in capsys.readouterr().out
