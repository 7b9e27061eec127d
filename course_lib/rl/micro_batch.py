"""A whole batch's gradient from micro-batches that fit in memory: a token budget per forward.

A real vocabulary makes the update's logits the largest tensor of a run: `[rows, tokens, vocabulary]` floats, 3 GB
for chapter 00's 64 episodes of 250 tokens over SmolLM2's 49,152 words, several times over once autograd keeps what
the log-softmax and the entropy need. Splitting the rows into micro-batches bounds that, but the course's losses
are not sums of per-row terms (a token-mean divides by the batch's token count, AEPO standardises entropy over the
batch, a filter's statistics span groups), so scaling each micro-batch's loss would change the gradient.

What is exact for any loss `L(logprobs, entropy)` that depends on the model only through the per-token log-probs
and entropies `[B, T]` (every policy loss here: PPO/GRPO's clipped surrogate, AEPO's, the entropy bonus, the KL to a
fixed reference) is the chain rule, in two passes:

1. the log-probs and entropies of every micro-batch without a graph, joined into `[B, T]` leaves;
2. `L` on the whole batch, differentiated with respect to those leaves only (cheap: no model in the graph);
3. each micro-batch again with a graph, backward of `sum(logprobs * dL/dlogprobs + entropy * dL/dentropy)`, which
   adds exactly that micro-batch's share of dL/dθ to the parameters' `.grad`.

The sum over micro-batches is the whole batch's gradient up to floating-point rounding (tested to 1e-6 relative);
the price is one extra forward without a graph (about a third of a forward and backward). With a budget of 0, or one
that holds the whole batch, it is the single forward and backward the course always ran, bit for bit. A model with
active dropout would draw other masks in the two passes: the course's models and LoRA adapters have none.

Inside a micro-batch, `lean_token_logprobs` computes the log-probs and entropies from the logits alone
(`LogprobAndEntropy`), so the memory a forward keeps for its backward is the logits plus a slice, not the log-softmax,
its exp and their products over the whole `[tokens, vocabulary]`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from course_lib.machine import cpu_attention

AUTOCAST = ("none", "bf16")
"""`GRPOConfig.autocast` / `SFTConfig.autocast`: the update's forwards in float32, or under bfloat16 autocast."""


@contextlib.contextmanager
def memory_options(model: torch.nn.Module, gradient_checkpointing: bool = False, autocast: str = "none") -> Iterator:
    """The update's forwards and backwards inside the block with a GPU's two memory options, both off by default:

    - `gradient_checkpointing`: transformers' activation checkpointing (`activation_checkpointing_enable`,
      non-reentrant) for the block, so a layer's activations are recomputed in the backward instead of kept (Chen
      et al. 2016, "Training Deep Nets with Sublinear Memory Cost"): the same gradient, about one more forward;
    - `autocast="bf16"`: matrix products in bfloat16 (`torch.autocast`); the logits are scored in float32
      (`lean_token_logprobs`), so the loss's softmax is not computed in 8 bits of mantissa.

    Off, the block is exactly the plain computation (the golden run is bit-identical)."""
    if autocast not in AUTOCAST:
        raise ValueError(f"autocast must be one of {AUTOCAST}, got {autocast!r}")
    switch = gradient_checkpointing and not getattr(model, "is_activation_checkpointing", False)
    if switch:
        if not hasattr(model, "activation_checkpointing_enable"):
            raise ValueError("gradient_checkpointing needs a transformers model (activation_checkpointing_enable)")
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    device = next(model.parameters()).device.type
    try:
        bf16 = autocast == "bf16"
        with (
            torch.autocast(device, dtype=torch.bfloat16, enabled=bf16),
            cpu_attention(device, torch.bfloat16 if bf16 else None),
        ):
            yield
    finally:
        if switch:
            model.activation_checkpointing_disable()


LossOf = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict]]
"""`(logprobs [B, T], entropy [B, T]) -> (scalar loss, stats)` on the whole batch."""


def row_chunks(attention_mask: torch.Tensor, token_budget: int) -> list[slice]:
    """Consecutive row ranges whose padded size, rows x the longest row among them (`attention_mask` `[B, T]`, right
    padded), stays within `token_budget`; a row longer than the budget is a range of its own. A budget of 0 (or
    less) is one range over every row."""
    rows = attention_mask.shape[0]
    if token_budget <= 0:
        return [slice(0, rows)]
    lengths = widths(attention_mask)
    chunks, start, longest = [], 0, 0
    for row in range(rows):
        candidate = max(longest, lengths[row])
        if row > start and candidate * (row - start + 1) > token_budget:
            chunks.append(slice(start, row))
            start, candidate = row, lengths[row]
        longest = candidate
    chunks.append(slice(start, rows))
    return chunks


def widths(attention_mask: torch.Tensor) -> list[int]:
    """Each row's length up to its last attended position (`[B, T]` right padded -> B ints, at least 1)."""
    positions = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
    return [max(1, int(v)) for v in (attention_mask.bool() * positions).amax(dim=1).tolist()]


ROWS_PER_SLICE = 256
"""Positions whose `[positions, vocabulary]` probabilities `LogprobAndEntropy` holds at once."""


class LogprobAndEntropy(torch.autograd.Function):
    """Each position's log-prob of its token and the entropy there, from logits `[N, V]`, without keeping a
    log-softmax, its exp or their products for the backward: only the logits are saved, and the softmax is recomputed
    `ROWS_PER_SLICE` positions at a time (forward and backward), so the extra memory is a slice, not `[N, V]` floats
    several times over. With z the logits over the temperature, p = softmax(z) and H = logsumexp(z) - sum(p z):
    d log p_y / dz = onehot(y) - p and dH/dz = -p (z - sum(p z)); then d/dlogits = d/dz / temperature."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ids: torch.Tensor, temperature: float):
        chosen = logits.new_empty(logits.shape[0])
        entropy = logits.new_empty(logits.shape[0])
        for start in range(0, logits.shape[0], ROWS_PER_SLICE):
            rows = slice(start, start + ROWS_PER_SLICE)
            z = logits[rows] / temperature
            normaliser = torch.logsumexp(z, dim=-1)
            p = torch.exp(z - normaliser[:, None])
            chosen[rows] = z.gather(-1, ids[rows, None]).squeeze(-1) - normaliser
            entropy[rows] = normaliser - (p * z).sum(-1)
        ctx.save_for_backward(logits, ids)
        ctx.temperature = temperature
        return chosen, entropy

    @staticmethod
    def backward(ctx, grad_chosen: torch.Tensor, grad_entropy: torch.Tensor):
        logits, ids = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ROWS_PER_SLICE):
            rows = slice(start, start + ROWS_PER_SLICE)
            z = logits[rows] / ctx.temperature
            p = torch.softmax(z, dim=-1)
            expected = (p * z).sum(-1, keepdim=True)
            part = -grad_chosen[rows, None] * p - grad_entropy[rows, None] * p * (z - expected)
            part.scatter_add_(-1, ids[rows, None], grad_chosen[rows, None])
            grad[rows] = part / ctx.temperature
        return grad, None, None


def lean_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`models.token_logprobs` (`[B, T]` log-probs and entropies, position 0 zero) through `LogprobAndEntropy`: the
    same numbers to float rounding, with a fraction of the memory at a large vocabulary. Temperature 0 reads as 1
    (greedy sampling has no distribution to score)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    logits = logits if logits.dtype == torch.float64 else logits.float()  # bf16/fp16 scored in float32
    rows, positions, vocabulary = logits.shape
    chosen, entropy = LogprobAndEntropy.apply(
        logits.reshape(-1, vocabulary), input_ids[:, 1:].reshape(-1), temperature if temperature > 0 else 1.0
    )
    zeros = chosen.new_zeros(rows, 1)
    return (torch.cat([zeros, chosen.view(rows, positions)], dim=1),
            torch.cat([zeros, entropy.view(rows, positions)], dim=1))  # fmt: skip


def logprobs_and_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    token_budget: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`models.token_logprobs` of the whole batch (`[B, T]` each), computed micro-batch by micro-batch, each trimmed
    to its longest row, and padded back with zeros. Runs under whatever grad mode the caller set."""
    from course_lib.models import token_logprobs

    chunks = row_chunks(attention_mask, token_budget)
    if len(chunks) == 1:
        return token_logprobs(model, input_ids, attention_mask, temperature)
    logprobs = torch.zeros(input_ids.shape, device=input_ids.device)
    entropy = torch.zeros(input_ids.shape, device=input_ids.device)
    for rows in chunks:
        width = max(widths(attention_mask[rows]))
        part_lp, part_ent = lean_token_logprobs(
            model, input_ids[rows, :width], attention_mask[rows, :width], temperature
        )
        logprobs[rows, :width], entropy[rows, :width] = part_lp, part_ent
    return logprobs, entropy


def backward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    loss_of: LossOf,
    token_budget: int = 0,
) -> tuple[torch.Tensor, dict]:
    """Accumulate dL/dθ of the whole batch into the parameters' `.grad`, each forward holding at most
    `token_budget` padded tokens (0: the whole batch at once); returns `(loss, stats)` of `loss_of` on the whole
    batch (the loss detached when micro-batched)."""
    from course_lib.models import token_logprobs

    chunks = row_chunks(attention_mask, token_budget)
    if len(chunks) == 1:
        loss, stats = loss_of(*token_logprobs(model, input_ids, attention_mask, temperature))
        loss.backward()
        return loss, stats
    with torch.no_grad():
        logprobs, entropy = logprobs_and_entropy(model, input_ids, attention_mask, temperature, token_budget)
    logprobs.requires_grad_(True)
    entropy.requires_grad_(True)
    loss, stats = loss_of(logprobs, entropy)
    grad_logprobs, grad_entropy = torch.autograd.grad(loss, (logprobs, entropy), allow_unused=True)
    for rows in chunks:
        width = max(widths(attention_mask[rows]))
        part_lp, part_ent = lean_token_logprobs(
            model, input_ids[rows, :width], attention_mask[rows, :width], temperature
        )
        surrogate = part_lp.new_zeros(())
        if grad_logprobs is not None:
            surrogate = surrogate + (part_lp * grad_logprobs[rows, :width]).sum()
        if grad_entropy is not None:
            surrogate = surrogate + (part_ent * grad_entropy[rows, :width]).sum()
        if surrogate.requires_grad:
            surrogate.backward()
    return loss.detach(), stats
