"""The roofline's arithmetic: FLOPs of a forward, an update and a rollout against hand counts, and the forwards a
counted block records."""

from __future__ import annotations

import torch

from course_lib.engine.hf_decoder import make_decoder
from course_lib.lab import roofline
from course_lib.models import build_model
from course_lib.tasks import tool_arithmetic


def test_phase_fractions_pair_each_run_with_its_ceiling():
    phase = roofline.Phase(achieved=[1e9, 3e9, 2e9], ceiling=[10e9, 10e9, 4e9])
    assert phase.fractions == [0.1, 0.3, 0.5]
    assert phase.fraction == 0.3


def test_flop_formula_matches_a_hand_count():
    """Chapter 00's tiny model: d = 128, 2 layers, MLP 384, vocabulary 2,024, q/k/v/o each d x d."""
    tokenizer = tool_arithmetic.word_tokenizer()
    shape = roofline.MatmulShape.of(build_model(tokenizer, "tiny"))
    layer = 4 * 128 * 128 + 3 * 128 * 384  # 212,992 weights in one layer's products
    assert shape == roofline.MatmulShape(2 * layer, 128 * 2024, 2, 128)
    # 2 rows x (3 positions x (2 x 425,984 + 4 x 2 x 128 x 5 slots) + 1 head position x 2 x 259,072)
    assert roofline.forward_flops(shape, rows=2, new=3, context=5, head_positions=1) == 6_178_816
    # the update: 3 x a forward over [2, 3] with 3-key attention and the head at all 3 positions
    assert roofline.update_flops(shape, rows=2, length=3) == 3 * 2 * (3 * (851_968 + 4 * 2 * 128 * 3) + 3 * 518_144)
    assert roofline.update_flops(shape, rows=2, length=3) == 24_717_312
    assert roofline.generation_flops(shape, [(2, 3, 5), (1, 1, 6)]) == 6_178_816 + 851_968 + 4 * 2 * 128 * 6 + 518_144


def test_counting_records_the_shapes_each_decoder_ran():
    tokenizer = tool_arithmetic.word_tokenizer()
    torch.manual_seed(0)
    model = build_model(tokenizer, "micro", max_positions=64).eval()
    for generic in (False, True):  # KVDecoder, then HFDecoder
        forwards: list[tuple[int, int, int]] = []
        with roofline.counting_forwards(forwards):
            decoder = make_decoder(model, 2, 16, generic=generic)
            decoder.prefill(torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]]), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
            decoder.step(torch.tensor([12, 13]))
            decoder.keep(torch.tensor([1]))
            decoder.step(torch.tensor([[14, 15, 16]]))
        decoder.step(torch.tensor([17]))  # outside the block: not counted
        assert forwards == [(2, 4, 4), (2, 1, 5), (1, 3, 8)]
