"""aer_trl.app.kvcache: each distinct prompt prefilled once, its cache indexed out to the rows that share it, gives the
logits every row would get had it been prefilled itself (left padding, positions and row selection included)."""

import torch

from aer_trl.app.kvcache import positions, prefill
from aer_trl.compat import cache_kwarg


def test_positions_of_left_padded_rows():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert positions(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_a_shared_prefill_gives_each_row_the_logits_of_its_own_forward(tokenizer, tiny_model):
    tiny_model.eval()
    pad = tokenizer.pad_token_id
    short, long = tokenizer.encode("12+3="), tokenizer.encode("345+67=")
    width = len(long)
    ids = torch.tensor([[pad] * (width - len(short)) + short, long])
    mask = (torch.arange(width) >= torch.tensor([[width - len(short)], [0]])).long()
    rows = torch.tensor([1, 0, 0, 1])  # out of order and repeated, as a group's rows are
    completion = torch.tensor([[5], [6], [7], [8]])  # one more token after each prompt
    with torch.no_grad():
        cache = prefill(tiny_model, ids, mask, rows)
        tail = torch.cat([ids[rows, -1:], completion], dim=1)
        full_mask = torch.cat([mask[rows], torch.ones(4, 1, dtype=torch.long)], dim=1)
        shared = tiny_model(
            input_ids=tail,
            attention_mask=full_mask,
            position_ids=positions(full_mask)[:, -2:],
            **{cache_kwarg(tiny_model): cache},
        ).logits
        own = tiny_model(
            input_ids=torch.cat([ids[rows], completion], dim=1),
            attention_mask=full_mask,
            position_ids=positions(full_mask),
        ).logits[:, -2:]
    torch.testing.assert_close(shared, own, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(shared[0], shared[1])  # the two prompts differ: the rows were told apart
