"""The limit the course's speed is judged against (`python -m course_lib.lab.bench roofline`).

A fresh model of each preset (chapter 00's word-level tokenizer and environment, its cpu sampling, `--batch` episodes)
generates one rollout batch through the engine, whose decoder forwards are counted (`counting_forwards`) and timed
(`engine.timings["model"]`); then one forward and backward of `models.token_logprobs` runs on that batch, right-padded
to `[B, T]`. FLOPs follow `forward_flops` (2 x the weights of every matrix product per position, plus attention's 4 x
layers x width x context; the backward twice the forward). Each phase's achieved FLOP/s is set against this CPU's
`torch.matmul` throughput on the same products (a decode step's `[B, d] x [d, k]`, the update's `[B*T, d] x [d, k]` and
its two gradient products) with the same threads, one matmul block right after each timed run (this machine is shared
and drifts: each run is judged against the throughput of the same moment); each fraction is the median over the pairs,
with its range. The last line, `generation_of_matmul_peak=X.XX update_of_matmul_peak=X.XX` (three significant digits),
is the first preset's two fractions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from unittest import mock

import torch

from course_lib.engine.hf_decoder import HFDecoder
from course_lib.engine.kv_decoder import KVDecoder, causal_lm
from course_lib.engine.rollout import RolloutEngine, collate
from course_lib.models import build_model, count_parameters
from course_lib.tasks import tool_arithmetic


@dataclass(frozen=True)
class MatmulShape:
    """What a Llama-family forward's FLOPs depend on: the decoder layers' projection weights (q, k, v, o, gate, up,
    down: `in x out` summed over layers), the LM head's (`d x V`), the layer count, and the attention width
    (heads x head size, the `d` of the QK^T and AV products)."""

    layer_weights: int
    head_weights: int
    layers: int
    attention_width: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> MatmulShape:
        lm = causal_lm(model)
        config = lm.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        layer_weights = sum(
            module.weight.numel() for module in lm.model.layers.modules() if isinstance(module, torch.nn.Linear)
        )
        return cls(layer_weights, lm.lm_head.weight.numel(), config.num_hidden_layers,
                   config.num_attention_heads * head_dim)  # fmt: skip


def forward_flops(shape: MatmulShape, rows: int, new: int, context: int, head_positions: int) -> int:
    """FLOPs of one forward over `new` positions in each of `rows` sequences, each query attending over `context`
    key slots, with the LM head applied at `head_positions` positions per row.

    A matrix product `[n, a] x [a, b]` is `2 n a b` FLOPs (one multiply and one add per term), so the projections
    and MLP cost 2 x their weights per position (Kaplan et al. 2020, "Scaling Laws for Neural Language Models",
    table 1: `C_forward ~ 2N`), and attention adds QK^T and the AV product, `2 x context x width` each per layer and
    position (the `4 L d n_ctx` of the "Transformer FLOPs" accounting of Chowdhery et al. 2022, PaLM, appendix B;
    Kaplan's table counts QK^T alone). Norms, rotary, softmax and sampling are left out (a few FLOPs per activation,
    not per weight)::

        rows x [new x (2 layer_weights + 4 layers width context) + head_positions x 2 head_weights]
    """
    per_position = 2 * shape.layer_weights + 4 * shape.layers * shape.attention_width * context
    return rows * (new * per_position + head_positions * 2 * shape.head_weights)


@contextmanager
def counting_forwards(forwards: list[tuple[int, int, int]]) -> Iterator[None]:
    """Inside the block, every decoder forward (`prefill` or `step` of `KVDecoder` or `HFDecoder`, whichever the
    engine builds) appends `(rows, new positions, cache slots after it)` to `forwards`: the FLOPs are counted from
    the shapes the decoder really ran, padding included, without touching the engine (one append per forward)."""

    def counted(method):
        def wrapper(decoder, token_ids: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            logits = method(decoder, token_ids, *args, **kwargs)
            new = 1 if token_ids.dim() == 1 else token_ids.shape[1]
            forwards.append((token_ids.shape[0], new, decoder.length))
            return logits

        return wrapper

    with ExitStack() as stack:
        for decoder in (KVDecoder, HFDecoder):
            for name in ("prefill", "step"):
                stack.enter_context(mock.patch.object(decoder, name, counted(getattr(decoder, name))))
        yield


def generation_flops(shape: MatmulShape, forwards: Sequence[tuple[int, int, int]]) -> int:
    """FLOPs of a rollout's decoder forwards: every fed position (left padding included: the decoder computes it)
    through the layers, each attending over every cache slot written so far (the static-cache decoder hands them
    all to the kernel, masked), and the LM head once per row (the decoder keeps the last position's logits)."""
    return sum(forward_flops(shape, rows, new, slots, 1) for rows, new, slots in forwards)


def update_flops(shape: MatmulShape, rows: int, length: int) -> int:
    """FLOPs of one forward and backward of `models.token_logprobs` over a padded `[rows, length]` batch: the
    forward with the LM head at every position and full `length`-key attention (the padding mask is a mask, not
    a shorter product), and a backward of twice the forward (a gradient for the input and one for the weight of
    every product; Kaplan et al. 2020, section 2.1: ~6N per token for training)."""
    return 3 * forward_flops(shape, rows, length, length, length)


class MatmulCeiling:
    """This CPU's FLOP/s on the products `[n, a] x [a, b]` listed as `(n, a, b)`, run back to back as a model runs
    them, on random operands made once (the first calls, which allocate and pick kernels, are a warm-up)."""

    def __init__(self, products: Sequence[tuple[int, int, int]], min_seconds: float):
        generator = torch.Generator().manual_seed(0)
        self.operands = [
            (torch.randn(n, a, generator=generator), torch.randn(a, b, generator=generator)) for n, a, b in products
        ]
        self.flops = sum(2 * n * a * b for n, a, b in products)
        self.min_seconds = min_seconds
        self.rate()

    def rate(self) -> float:
        """One timed block: the set repeated for at least `min_seconds`."""
        repeats, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < self.min_seconds or repeats == 0:
            for left, right in self.operands:
                torch.matmul(left, right)
            repeats += 1
        return repeats * self.flops / elapsed


def decode_products(model: torch.nn.Module, rows: int) -> list[tuple[int, int, int]]:
    """The matrix products of one decode step over `rows` sequences: each layer's weights as the lean decoder
    applies them (q/k/v and gate/up fused when plain), then the LM head."""
    lm = causal_lm(model)
    products = []
    for layer in lm.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        fused = [[attn.q_proj, attn.k_proj, attn.v_proj], [attn.o_proj], [mlp.gate_proj, mlp.up_proj], [mlp.down_proj]]
        for group in fused:
            products.append((rows, group[0].in_features, sum(linear.out_features for linear in group)))
    products.append((rows, lm.lm_head.in_features, lm.lm_head.out_features))
    return products


def update_products(model: torch.nn.Module, positions: int) -> list[tuple[int, int, int]]:
    """The update's matrix products over `positions` (B x T) rows: for every projection and the LM head
    `[P, in] x [in, out]` forward, `[P, out] x [out, in]` for the input's gradient and `[in, P] x [P, out]` for the
    weight's (what autograd runs for `F.linear`)."""
    lm = causal_lm(model)
    products = []
    for linear in [m for m in lm.model.layers.modules() if isinstance(m, torch.nn.Linear)] + [lm.lm_head]:
        a, b = linear.in_features, linear.out_features
        products += [(positions, a, b), (positions, b, a), (a, positions, b)]
    return products


@dataclass
class Phase:
    """One phase's timed runs, each paired with a matmul block at its shapes measured right after it (FLOP/s)."""

    achieved: list[float]
    ceiling: list[float]

    @property
    def fractions(self) -> list[float]:
        """Achieved over ceiling per pair: this machine is shared and drifts from minute to minute, so each run is
        judged against the matmul throughput of the same moment."""
        return [run / peak for run, peak in zip(self.achieved, self.ceiling, strict=True)]

    @property
    def fraction(self) -> float:
        return statistics.median(self.fractions)


def measure_roofline(preset: str, batch: int, repeats: int, min_seconds: float) -> tuple[Phase, Phase, str]:
    """Generation and the update of a fresh `preset` model on chapter 00's environment, sampling and word-level
    tokenizer (random weights: the FLOPs and the speed do not depend on them; an untrained policy rarely stops
    early, so its sequences run to the 40-token budget), and a line on what was counted."""
    tokenizer = tool_arithmetic.word_tokenizer()
    torch.manual_seed(0)
    model = build_model(tokenizer, preset, max_positions=64)
    return roofline_phases(model, tokenizer, tool_arithmetic.preset("cpu").sampling, batch, repeats, min_seconds)


def roofline_phases(
    model, tokenizer, sampling, batch: int, repeats: int, min_seconds: float, budget: int = 0
) -> tuple[Phase, Phase, str]:
    """Generation (the engine's rollout of `batch` chapter-00 episodes under `sampling`) and the update (a
    GRPO-shaped loss over the last rollout batch, micro-batched by `budget` tokens as `micro_batch.backward` runs it;
    0: one forward) of `model`, each run against the matmul throughput at its own shapes, and a line on what was
    counted. A micro-batched update runs one more forward than it is credited with (`update_flops` counts the
    useful forward and backward), so its fraction is the share of the CPU the method's own arithmetic gets."""
    from course_lib.rl import micro_batch

    shape = MatmulShape.of(model)
    forwards: list[tuple[int, int, int]] = []
    ceiling = MatmulCeiling(decode_products(model, batch), min_seconds)
    generation, trajectories = Phase([], []), []
    model.eval()
    with counting_forwards(forwards):  # the engine's own code, counted
        for run in range(repeats + 1):  # the first run is a warm-up
            forwards.clear()
            engine = RolloutEngine(model, tokenizer, sampling)
            envs = [tool_arithmetic.make_env() for _ in range(batch)]
            trajectories = engine.rollout(envs, list(range(batch)), generator=torch.Generator().manual_seed(run))
            if not forwards:
                raise RuntimeError("the engine ran no KVDecoder or HFDecoder forward: nothing was counted")
            if run:
                generation.achieved.append(generation_flops(shape, forwards) / engine.timings["model"])
                generation.ceiling.append(ceiling.rate())
    steps = sum(1 for _, new, _ in forwards if new == 1)

    rollout_batch = collate(trajectories, engine.pad_id)
    rows, length = rollout_batch.input_ids.shape
    ceiling = MatmulCeiling(update_products(model, min(rows * length, budget or rows * length)), min_seconds)
    model.train()
    update = Phase([], [])
    mask = rollout_batch.loss_mask.float()

    def loss_of(logprobs: torch.Tensor, entropy: torch.Tensor) -> tuple[torch.Tensor, dict]:
        # A GRPO-shaped loss: per-token log-probs weighted on the policy's tokens (the weights do not change FLOPs).
        return -(logprobs * mask).sum() / mask.sum(), {}

    for run in range(repeats + 1):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        micro_batch.backward(model, rollout_batch.input_ids, rollout_batch.attention_mask, 1.0, loss_of, budget)
        seconds = time.perf_counter() - start
        if run:
            update.achieved.append(update_flops(shape, rows, length) / seconds)
            update.ceiling.append(ceiling.rate())
    model.zero_grad(set_to_none=True)
    model.eval()

    detail = (
        f"{count_parameters(model):,} parameters ({shape.layer_weights:,} in the layers' products, "
        f"{shape.head_weights:,} in the LM head); last rollout: {generation_flops(shape, forwards) / 1e9:.2f} GFLOP "
        f"in {len(forwards)} forwards ({steps} single-token steps); update: "
        f"{update_flops(shape, rows, length) / 1e9:.2f} GFLOP on [{rows}, {length}]"
        + (f" in micro-batches of {budget} tokens" if budget else "")
    )
    return generation, update, detail


def bench_roofline(presets: Sequence[str], batch: int, repeats: int, min_seconds: float = 0.2) -> list[float]:
    """`python -m course_lib.lab.bench roofline`: per model preset, generation's and the update's achieved FLOP/s
    against this CPU's matmul throughput at the same shapes; returns, and ends with, the first preset's two median
    fractions."""
    print(
        f"Chapter 00's tool task, {batch} episodes, cpu-preset sampling, {torch.get_num_threads()} torch threads; "
        f"{repeats} timed runs per phase (after a warm-up), each followed by a matmul block at its shapes"
    )
    header = ("model", "phase", "achieved GFLOP/s", "matmul GFLOP/s", "fraction", "range")
    print("  {:10} {:11} {:>16} {:>15} {:>9}  {}".format(*header))
    headline: list[float] = []
    for preset in presets:
        generation, update, detail = measure_roofline(preset, batch, repeats, min_seconds)
        for name, phase in (("generation", generation), ("update", update)):
            achieved, ceiling = statistics.median(phase.achieved) / 1e9, statistics.median(phase.ceiling) / 1e9
            spread = f"{min(phase.fractions):.3g}-{max(phase.fractions):.3g}"
            print(f"  {preset:10} {name:11} {achieved:16.3f} {ceiling:15.3f} {phase.fraction:9.3g}  {spread}")
        print(f"    {detail}")
        headline = headline or [generation.fraction, update.fraction]
    print(f"generation_of_matmul_peak={headline[0]:.3g} update_of_matmul_peak={headline[1]:.3g}")
    return headline
