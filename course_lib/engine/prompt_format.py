"""How a conversation becomes token ids: the prompt, and what is appended after each turn of the policy.

The rollout engine is token in, token out: the policy's ids are kept as sampled, and everything else (the prompt,
each observation) is encoded once and appended. What those appended ids are is the prompt format's business:

- `PlainFormat`, the course's: BOS (when the tokenizer has one) and the observation's text, then each observation's
  text as it is. The course's word-level bases were trained on exactly this.
- `ChatFormat`, a checkpoint's: its chat template renders the first observation as a user turn and opens the
  assistant's; after each action it closes the assistant's turn (unless the policy already wrote the end-of-turn
  token), renders the observation as a tool turn and opens the next assistant turn. The glue is taken from the
  template itself, so the ids are those `tokenizer.apply_chat_template` builds for the same conversation (what TRL
  trains on) whenever the policy's own ids are the tokenizer's encoding of its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.tokenizer import encode

PLACEHOLDER = "\u2063ACTION\u2063"
"""Stands for an assistant message while the template renders its surroundings (invisible separators around a word
no template rewrites), so the text before and after it is the template's glue."""
OBSERVATION = "\u2063OBSERVATION\u2063"
"""Stands for an observation in the glue rendered once per tokenizer (`ChatFormat._templates`)."""


@dataclass
class PlainFormat:
    """BOS + observation, then observations appended as they are (the course's format)."""

    def prompt_ids(self, tokenizer, observation: str) -> list[int]:
        bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
        return [*bos, *encode(tokenizer, observation)]

    def observation_ids(self, tokenizer, observation: str, last_token: int | None) -> list[int]:
        return encode(tokenizer, observation) if observation else []


@dataclass
class ChatFormat:
    """The tokenizer's chat template: the first observation is the user's message, later ones `observation_role`'s
    (tool by default), the policy writes the assistant's messages."""

    system: str | None = None
    observation_role: str = "tool"

    def __post_init__(self) -> None:
        self._rendered: dict[tuple[int, str], tuple[str, ...]] = {}

    def _messages(self, observation: str) -> list[dict[str, str]]:
        system = [] if self.system is None else [{"role": "system", "content": self.system}]
        return [*system, {"role": "user", "content": observation}]

    def _templates(self, tokenizer) -> tuple[str, str, str, str]:
        """`(prompt, close, between, end-of-turn piece)` rendered once per tokenizer with `OBSERVATION` where the
        observation goes (a template renders content verbatim, which `glue` checks), so that the many episodes of
        a rollout or a warm start substitute text instead of running the template each time."""
        key = (id(tokenizer), tokenizer.chat_template)
        if key not in self._rendered:
            prompt = tokenizer.apply_chat_template(
                self._messages(OBSERVATION), tokenize=False, add_generation_prompt=True
            )
            if prompt.count(OBSERVATION) != 1:
                raise ValueError("the chat template does not render a user message's content verbatim")
            close, between = self.glue(tokenizer, OBSERVATION)
            if between.count(OBSERVATION) != 1:
                raise ValueError(f"the chat template does not render a {self.observation_role} message verbatim")
            self._rendered[key] = (prompt, close, between, self._first_piece(tokenizer, close))
        return self._rendered[key]

    def prompt_ids(self, tokenizer, observation: str) -> list[int]:
        prompt = self._templates(tokenizer)[0]
        return encode(tokenizer, prompt.replace(OBSERVATION, observation))

    def observation_ids(self, tokenizer, observation: str, last_token: int | None) -> list[int]:
        """The ids between one assistant message and the next: the end of the assistant's turn (left out when the
        policy wrote the end-of-turn token itself), the observation's turn, and the next assistant turn's opening."""
        _, close, between, end_piece = self._templates(tokenizer)
        closed = bool(close) and last_token is not None and encode(tokenizer, end_piece) == [last_token]
        text = (close[len(end_piece) :] if closed else close) + between.replace(OBSERVATION, observation)
        return encode(tokenizer, text)

    def glue(self, tokenizer, observation: str) -> tuple[str, str]:
        """`(close, between)`: the text the template puts right after an assistant message's content (its end of
        turn), and the rest up to the next assistant message's content (the observation's turn, the next opening)."""
        base = self._messages("u")
        ended = tokenizer.apply_chat_template(
            [*base, {"role": "assistant", "content": PLACEHOLDER}], tokenize=False, add_generation_prompt=False
        )
        try:
            full = tokenizer.apply_chat_template(
                [*base, {"role": "assistant", "content": PLACEHOLDER},
                 {"role": self.observation_role, "content": observation}],
                tokenize=False,
                add_generation_prompt=True,
            )  # fmt: skip
        except Exception as error:  # jinja's TemplateError (a template's raise_exception), or a missing role's KeyError
            other = "user" if self.observation_role != "user" else "tool"
            raise ValueError(
                f"the chat template cannot render a {self.observation_role!r} message ({type(error).__name__}: "
                f"{error}), the role observations take: give them another, e.g. --observation-role {other} on a "
                f"chapter command or TRL's (sampling.prompt_format='chat:{other}', "
                f"ChatFormat(observation_role={other!r}))"
            ) from error
        if ended.count(PLACEHOLDER) != 1 or full.count(PLACEHOLDER) != 1:
            raise ValueError("the chat template does not render an assistant message's content verbatim")
        close = ended.split(PLACEHOLDER, 1)[1]
        after = full.split(PLACEHOLDER, 1)[1]
        if not after.startswith(close):
            raise ValueError(f"the template closes an assistant turn with {close!r} alone but {after[:40]!r} in a chat")
        return close, after[len(close) :]

    @staticmethod
    def _first_piece(tokenizer, close: str) -> str:
        """The text of the first token of `close` (the end-of-turn token, e.g. `<|im_end|>`)."""
        return tokenizer.decode(encode(tokenizer, close)[:1], skip_special_tokens=False)


FORMATS = {"plain": PlainFormat, "chat": ChatFormat}
"""`SamplingConfig.prompt_format`'s names; `chat:<role>` is `chat` with observations in `<role>` turns."""


def chat_name(observation_role: str = "tool") -> str:
    """The format name of `ChatFormat(observation_role=...)`: `chat` for the tool role, else `chat:<role>`."""
    return "chat" if observation_role == "tool" else f"chat:{observation_role}"


def is_name(prompt_format: str) -> bool:
    """Whether `prompt_format` names a format: one of `FORMATS`, or `chat:<role>` with a role of word characters."""
    kind, sep, role = prompt_format.partition(":")
    return prompt_format in FORMATS or (kind == "chat" and bool(sep) and role.replace("_", "").isalnum())


def resolve(prompt_format) -> PlainFormat | ChatFormat:
    """A format object from a name (`FORMATS`, or `chat:<role>`: a chat template whose observations are `<role>`
    messages, for a template without a `tool` role), or a format object, returned as is."""
    if not isinstance(prompt_format, str):
        return prompt_format
    if not is_name(prompt_format):
        raise ValueError(f"unknown prompt format {prompt_format!r}; choose from {sorted(FORMATS)} or chat:<role>")
    kind, _, role = prompt_format.partition(":")
    return ChatFormat(observation_role=role) if role else FORMATS[kind]()
