"""`python -m course_lib.lab.scaffold`: write a new chapter to start from, on an environment of yours.

A chapter is a module on the skeleton (`chapters/skeleton.py`: a config, `run(seed, config)`, the numbers its
claims read, its claims, a command), a notebook that follows the course's template, and a test that runs it in
seconds. The scaffold writes the three into a folder of yours (not into the course), for an environment registered
by name, with GRPO and GiGPO as its two arms and two claims to replace with your paper's:

    python -m course_lib.lab.scaffold --number 20 --name my_line --env my_line --env-module my_package.my_env \
        --base base --stop "</move>" --out my_fork       # --base as the chapter's command sees it, run from my_fork
    cd my_fork && python -m ch20_my_line --seeds 0 --set grpo.iterations=5      # the chapter's command
    python -m pytest test_ch20_my_line.py                                       # its test, in seconds

The chapter's id (`ch20`) names its results file (`--record --out results` writes `results/ch20.json` in the fork's
folder), so a fork never writes over the course's records. Its config has `checkpoint_dir` and `resume`, so a run can
be interrupted and resumed bit for bit (`--set checkpoint_dir=runs/ckpt --set resume=true`; the checkpoint's
fingerprint covers the whole config, so a resume with other settings is refused), and the command takes every flag
the course's chapters take (`--set`, `--config`, `--report-to`, `--checkpoint-dir`, `--resume`, `--record --out`).
docs/extending.md, sections 6 and 7, runs all of it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

MODULE = '''"""Chapter {number}: {title} (scaffolded by `python -m course_lib.lab.scaffold`).

GRPO and GiGPO trained from one base on `{env}`, evaluated on its test split. Replace the claims with your
paper's findings, restated for the miniature, before you run the seeds that decide them.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from course_lib import course_config, data, envs
from course_lib.chapters import skeleton
from course_lib.course import recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all, nontrivial_base
from course_lib.envs.base import distinct_seeds
from course_lib.engine.rollout import SamplingConfig
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
{env_import}
ENV_NAME = "{env}"
ARMS = {{"grpo": {{"advantage": "grpo"}}, "gigpo": {{"advantage": "gigpo"}}}}
"""The arms, each a set of `GRPOConfig` fields on top of `Config.grpo`."""


@dataclass
class Config:
    """Everything the chapter varies (`--set key=value` on its command)."""

    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of `envs.make(ENV_NAME, split=...)`."""
    base: str = {base!r}
    """The warm-started base: a folder written by `models.save`, or a name in the course's data manifest."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(
            max_turn_tokens={turn_tokens}, max_total_tokens={total_tokens}, stop_tags={stops!r}
        )
    )
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=20, prompts_per_iteration=4, group_size=8, learning_rate=1e-3, eval_every=5
        )
    )
    eval_tasks: int = {eval_tasks}
    """Distinct held-out problems per evaluation."""
    checkpoint_dir: str = ""
    """Where each arm saves a resumable checkpoint after every iteration (empty: none)."""
    resume: bool = False
    """Continue each arm from its checkpoint in `checkpoint_dir` (bit for bit as an uninterrupted run)."""


def preset(scale: str | None = None) -> Config:
    return Config()


def make_env(split: str = "train", config: Config | None = None) -> envs.TextEnv:
    return envs.make(ENV_NAME, split=split, **(config or Config()).env_kwargs)


def evaluate(model, tokenizer, config: Config, seed: int) -> dict[str, float]:
    """Held-out success and the rollout statistics on `eval_tasks` distinct test problems."""
    seeds = distinct_seeds(lambda: make_env("test", config), config.eval_tasks)
    stats, _ = evaluate_policy(model, tokenizer, lambda: make_env("test", config), seeds, config.sampling, seed)
    return stats


def run(seed: int, config: Config | None = None) -> dict:
    """Every arm from the same base, seed and budget; evaluated on the same held-out problems."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    if config.resume and not (config.checkpoint_dir and Path(config.checkpoint_dir).is_dir()):
        raise ValueError(f"resume=true: checkpoint_dir {{config.checkpoint_dir!r}} does not exist, so there is no "
                         "checkpoint to resume from; check the path, or start a fresh run with resume=false")
    base, tokenizer = data.load_base(config.base, course_config.device())
    out: dict = {{"base": evaluate(base, tokenizer, config, seed + 1), "histories": {{}}}}
    for arm, settings in ARMS.items():
        model = copy.deepcopy(base)
        course_config.seed_everything(seed)
        folder = Path(config.checkpoint_dir) / f"{{arm}}-seed{{seed}}" if config.checkpoint_dir else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)  # an arm the interrupted run never reached starts fresh
        out["histories"][arm] = train_grpo(
            model, tokenizer, lambda: make_env("train", config), config.sampling,
            dataclasses.replace(config.grpo, **settings), seed,
            evaluate=lambda m: evaluate(m, tokenizer, config, seed + 1), checkpoint_dir=folder, resume=config.resume,
            settings=config,  # the whole config in the checkpoint's fingerprint: a resume with others is refused
        )  # fmt: skip
    out["minutes"] = (time.perf_counter() - start) / 60
    return out


def claim_numbers(out: Mapping) -> dict[str, float]:
    final = {{arm: history[-1]["eval_success"] for arm, history in out["histories"].items()}}
    return {{
        "base_success": out["base"]["success"],
        **{{f"{{arm}}_success": value for arm, value in final.items()}},
        "gigpo_minus_grpo": final["gigpo"] - final["grpo"],
    }}


CLAIMS: tuple[ClaimSpec, ...] = (
    nontrivial_base("C{number}.1", "the base"),
    ClaimSpec(
        "C{number}.2",
        "GiGPO ends at least 5 points above GRPO in held-out success, on average over seeds (95% t-interval > 0)",
        "GiGPO (arXiv 2505.10978): +13.3 points over GRPO on ALFWorld; replace with your paper's finding",
        "gigpo_minus_grpo",
        lambda n: at_least(n["gigpo_minus_grpo"], 0.05),
        required=False,
        effects=(("gigpo_minus_grpo", 0.05),),
    ),
)


def claims(out: Mapping) -> list[Claim]:
    return evaluate_all(CLAIMS, claim_numbers(out))


def curves(out: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves(out["histories"], ("success", "eval_success"))


CHAPTER = skeleton.Chapter("ch{number}", "Chapter {number}, {title}", run, claim_numbers, CLAIMS, curves=curves)


if __name__ == "__main__":
    CHAPTER.main()
'''

TEST = '''"""Chapter {number} runs end to end in seconds (scaffolded): every arm trains, every claim gets a verdict."""

from course_lib.chapters import skeleton

import {module} as chapter

TINY = ["grpo.iterations=2", "grpo.prompts_per_iteration=2", "grpo.group_size=4", "grpo.eval_every=1", "eval_tasks=4"]


def test_the_chapter_runs_with_tiny_overrides():
    config = skeleton.resolved_config(chapter.CHAPTER, TINY)
    out = chapter.run(0, config)
    assert set(out["histories"]) == set(chapter.ARMS)
    numbers = chapter.claim_numbers(out)
    assert all(isinstance(value, float) for value in numbers.values())
    assert {{claim.id for claim in chapter.claims(out)}} == {{spec.id for spec in chapter.CLAIMS}}
'''


def notebook(number: str, name: str, title: str, arxiv: str, module: str) -> dict:
    """A notebook stub in the course's template: title cell (paper, time, navigation), sections 1-8, and code cells
    that run the chapter and print its claims."""

    def markdown(text: str) -> dict:
        return {"cell_type": "markdown", "metadata": {}, "source": text.strip().splitlines(True)}

    def code(text: str) -> dict:
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                "source": text.strip().splitlines(True)}  # fmt: skip

    cells = [
        markdown(
            f"# {number} · {title}\n\n**Paper.** (its title and authors) ([arXiv {arxiv}]"
            f"(https://arxiv.org/abs/{arxiv})). The chapter's code: `{module}.py`.\n\n"
            "**What you will learn.** (three to five lines)\n\n**Time.** (measured: minutes on a laptop CPU)"
        ),
        code(
            "from course_lib import course_config\nfrom course_lib.course.claims import report\n\n"
            f"import {module} as chapter\n\n"
            "SEED = course_config.seed()\ncfg = chapter.preset()"
        ),
        markdown("## 1 · The idea\n\n(the paper's question and its mechanism, in the miniature's words)"),
        markdown("## 2 · The environment\n\n(one episode, shown)"),
        markdown("## 3 · The method\n\n(its equation, and the library function that computes it)"),
        markdown("## 4 · The base\n\n(held-out success before any RL: it must be non-trivial)"),
        markdown("## 5 · Experiment\n\n(the arms, at one budget, from one base)"),
        code(
            "out = chapter.run(SEED, cfg)\nprint({arm: h[-1]['eval_success'] for arm, h in out['histories'].items()})"
        ),
        markdown("## 6 · Claims\n\n(each claim, its check, and what the recorded seeds say)"),
        code("report(chapter.claims(out))"),
        markdown("## 7 · Scaling up\n\n(what changes on a GPU, with a real model)"),
        markdown("## 8 · What does not carry over, and exercises"),
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
            "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}  # fmt: skip


def scaffold(
    number: int,
    name: str,
    env: str,
    base: str,
    out: str | Path,
    title: str = "",
    arxiv: str = "2505.10978",
    stops: tuple[str, ...] = ("</answer>",),
    env_module: str = "",
    turn_tokens: int = 4,
    total_tokens: int = 120,
    eval_tasks: int = 30,
) -> list[Path]:
    """Write `ch<number>_<name>.py`, `test_ch<number>_<name>.py` and `<number>_<name>.ipynb` into `out`; refuse to
    overwrite. `env_module` is imported first (the module that registers an environment of yours)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"name must be a lower-case identifier, got {name!r}")
    if not re.fullmatch(r"\d{4}\.\d{4,5}", arxiv):
        raise ValueError(f"arxiv must be an arXiv id such as 2505.10978, got {arxiv!r}")
    number_text = f"{number:02d}"
    module = f"ch{number_text}_{name}"
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{module}.py", folder / f"test_{module}.py", folder / f"{number_text}_{name}.ipynb"]
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise FileExistsError(f"refusing to overwrite {existing}")
    title = title or name.replace("_", " ")
    fields = dict(
        number=number_text, title=title, env=env, base=str(base), stops=tuple(stops), turn_tokens=turn_tokens,
        total_tokens=total_tokens, eval_tasks=eval_tasks, module=module,
        env_import=f"import {env_module}  # registers {env}\n" if env_module else "",
    )  # fmt: skip
    paths[0].write_text(MODULE.format(**fields))
    paths[1].write_text(TEST.format(**fields))
    paths[2].write_text(json.dumps(notebook(number_text, name, title, arxiv, module), indent=1) + "\n")
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, required=True, help="the chapter's number (its id is ch<number>)")
    parser.add_argument("--name", required=True, help="a lower-case identifier, e.g. my_line")
    parser.add_argument("--env", required=True, help="a registered environment name")
    parser.add_argument("--base", required=True, help="the base: a folder written by models.save, or a manifest name")
    parser.add_argument("--out", default=".", help="the folder to write into (default: here)")
    parser.add_argument("--title", default="", help="the chapter's title")
    parser.add_argument("--arxiv", default="2505.10978", help="the paper's arXiv id")
    parser.add_argument("--stop", nargs="+", default=["</answer>"], help="strings that end a turn")
    parser.add_argument("--env-module", default="", help="a module to import that registers the environment")
    args = parser.parse_args(argv)
    paths = scaffold(
        args.number, args.name, args.env, args.base, args.out, args.title, args.arxiv, tuple(args.stop), args.env_module
    )
    for path in paths:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
