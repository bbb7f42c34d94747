"""MARS verification over vLLM's flattened speculative batch, in torch ops on the logits' device.

The rule is `mars_verify::Verifier::verify` (crates/verify/src/verify.rs), applied to every
request of a batch at once. At each draft position x, with p the target's processed distribution
(vLLM's `target_logits` after temperature, top-k and top-p; raw logits for greedy requests), z1 ≥ z2
its top-2 processed logits (lowest id first among equals) and q the drafter's distribution
(one-hot at x for an n-gram drafter):

- relaxed (the MARS criterion): paper mode z2/z1 > θ, only where z1 > 0, both logits finite and
  the runner-up alive (p2 > 0); margin mode p2/p1 ≥ ρ with a live runner-up; strict never;
- greedy: keep x iff it is the argmax, or (relaxed) the live runner-up; a rejection emits the
  argmax;
- sampling, relaxed: keep x iff it is in the live top-2 with p(x) > 0; a rejection emits a
  sample from p itself (the authors' choice);
- sampling, not relaxed: vLLM's own test (keep iff q(x) > 0 and p(x)/q(x) ≥ u, the same u) and
  vLLM's own residual sample on rejection, so a strict request in a MARS batch gets exactly what
  vLLM would have given it.

Everything is computed for all positions in parallel and the first rejection per request picked
with a cumulative sum, so a step makes no host round trip and never copies a vocabulary row to the
host. The ledger (crates/verify `Ledger`) is summed on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .mode import MARGIN, PAPER

PLACEHOLDER = -1  # vLLM's PLACEHOLDER_TOKEN_ID: "no token here".

# Order of the per-step statistics vector (float64, on the logits' device).
STAT_NAMES = (
    "draft_tokens",  # draft positions handed to verification
    "examined",  # positions judged (those after a rejection are not)
    "accepted",  # draft tokens kept
    "relaxed_positions",  # examined positions where the MARS criterion held
    "relaxed_accepts",  # draft tokens kept only because of the relaxation
    "distance",  # the ledger: Σ (greedy) p1 − p2 per relaxed keep; (sampling) TV(e, p)
)


@dataclass
class BatchModes:
    """Per-request verification settings, `[batch]` tensors on the logits' device."""

    kind: torch.Tensor  # int8: STRICT, PAPER or MARGIN
    threshold: torch.Tensor  # float32: θ or ρ (unused for strict)


def verify_batch(
    draft_token_ids: torch.Tensor,  # [num_tokens] int
    cu_num_draft_tokens: torch.Tensor,  # [batch] int, inclusive ends
    max_spec_len: int,
    draft_probs: torch.Tensor | None,  # [num_tokens, vocab] or None (one-hot)
    target_logits: torch.Tensor,  # [num_tokens, vocab] float32, processed
    bonus_token_ids: torch.Tensor,  # [batch, 1] or [batch]
    is_greedy: torch.Tensor,  # [batch] bool
    modes: BatchModes,
    uniform: torch.Tensor | None,  # [num_tokens] float64, vLLM's; None when all greedy
    recovered: torch.Tensor | None,  # [num_tokens] int, vLLM's residual samples; None if greedy
    uniform_p: torch.Tensor | None,  # [batch] float64, for a sample from p; None if all greedy
    target_probs: torch.Tensor | None = None,  # [num_tokens, vocab] softmax of target_logits
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns `(output_token_ids [batch, max_spec_len + 1] int32, stats [len(STAT_NAMES)])`,
    the output laid out as vLLM's rejection sampler lays it out (placeholders after the emitted
    tokens)."""
    device = target_logits.device
    num_tokens, vocab = target_logits.shape
    batch = cu_num_draft_tokens.shape[0]
    width = max_spec_len + 1
    out = torch.full((batch, width), PLACEHOLDER, dtype=torch.int32, device=device)
    stats = torch.zeros(len(STAT_NAMES), dtype=torch.float64, device=device)
    bonus = bonus_token_ids.reshape(batch).to(torch.int32)

    ends = cu_num_draft_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))  # [batch]
    starts = ends - counts
    if num_tokens == 0:
        out[:, 0] = bonus
        return out, stats

    req = torch.repeat_interleave(
        torch.arange(batch, device=device), counts, output_size=num_tokens
    )  # [num_tokens]
    pos = torch.arange(num_tokens, device=device) - starts[req]  # [num_tokens]
    draft = draft_token_ids.to(torch.int64)
    valid = (draft >= 0) & (draft < vocab)
    draft_c = torch.where(valid, draft, torch.zeros_like(draft))

    # Top-2 with the lowest id first among equal logits (torch's max over a dimension returns
    # the first maximal index, as vLLM's argmax does): the max, then the max with it masked out.
    # max, not argmax or topk: on the CPU it is 3x faster than either (measured, vocab 49152).
    z1, top1 = target_logits.max(dim=-1)  # [num_tokens]
    z2, top2 = target_logits.scatter(1, top1[:, None], float("-inf")).max(dim=-1)
    probs = (  # [num_tokens, vocab]: p
        target_probs
        if target_probs is not None
        else target_logits.softmax(dim=-1, dtype=torch.float32)
    )
    p1 = probs.gather(1, top1[:, None]).squeeze(1)
    p2 = probs.gather(1, top2[:, None]).squeeze(1)
    p_draft = probs.gather(1, draft_c[:, None]).squeeze(1)
    live2 = (p2 > 0) & (z2 > float("-inf"))

    kind = modes.kind.to(device)[req]
    threshold = modes.threshold.to(device=device, dtype=torch.float32)[req]
    finite = torch.isfinite(z1) & torch.isfinite(z2)
    paper = live2 & finite & (z1 > 0) & (z2 / torch.where(z1 > 0, z1, 1.0) > threshold)
    margin = live2 & (p2 / p1 >= threshold)
    relaxed = ((kind == PAPER) & paper) | ((kind == MARGIN) & margin)

    greedy = is_greedy.to(device)[req]
    if draft_probs is None:
        q_draft = torch.ones_like(p_draft)
    else:
        q_draft = draft_probs.gather(1, draft_c[:, None]).squeeze(1).to(torch.float32)
    is_top1 = draft == top1
    in_top2 = (is_top1 | ((draft == top2) & live2)) & (p_draft > 0)
    if uniform is None:
        strict_keep = torch.zeros_like(valid)
    else:
        # vLLM's own comparison, in its float64 uniform: strict requests are untouched.
        strict_keep = (q_draft > 0) & (p_draft.double() / q_draft.double() >= uniform)
    accept = (
        torch.where(
            greedy,
            is_top1 | (relaxed & in_top2),
            torch.where(relaxed, in_top2, strict_keep),
        )
        & valid
    )
    relaxed_accept = relaxed & accept & torch.where(greedy, ~is_top1, p_draft < q_draft)

    # The first rejection of each request: rejections before position i in its request.
    rejected = (~accept).to(torch.int64)
    inclusive = torch.cumsum(rejected, 0)
    before_request = torch.cat([inclusive.new_zeros(1), inclusive])[starts][req]
    rejected_before = inclusive - rejected - before_request
    examined = rejected_before == 0
    kept = examined & accept
    first_rejection = examined & ~accept

    correction = top1
    if recovered is not None:
        assert uniform_p is not None
        # A sample from p for a relaxed rejection. Only a request's first rejected position
        # uses its correction, so p is sampled on that one row per request (by inverse CDF, in
        # float64, with the request's uniform), not on every position.
        at = torch.where(first_rejection, torch.arange(num_tokens, device=device), -1)
        row = torch.full((batch,), -1, dtype=torch.int64, device=device)
        row = row.scatter_reduce(0, req, at, reduce="amax").clamp(min=0)  # [batch]
        cdf = probs[row].double().cumsum(dim=-1)  # [batch, vocab]
        goal = (uniform_p.to(device) * cdf[:, -1])[:, None]
        from_p = torch.searchsorted(cdf, goal, right=True).squeeze(1).clamp(max=vocab - 1)
        sampled = torch.where(relaxed, from_p[req], recovered.to(torch.int64))
        correction = torch.where(greedy, top1, sampled)

    value = torch.where(
        kept,
        draft,
        torch.where(first_rejection, correction, torch.full_like(draft, PLACEHOLDER)),
    )
    flat = out.view(-1)
    flat.scatter_(0, req * width + pos, value.to(torch.int32))
    accepted = torch.zeros(batch, dtype=torch.int64, device=device)
    accepted.scatter_add_(0, req, kept.to(torch.int64))
    all_kept = accepted == counts
    flat.scatter_(
        0,
        torch.arange(batch, device=device) * width + counts,
        torch.where(all_kept, bonus, torch.full_like(bonus, PLACEHOLDER)),
    )

    # The ledger. Greedy: p1 − p2 per runner-up kept. Sampling: TV(e, p) at every examined
    # relaxed position, with A = {top-1, live top-2}:
    # ½ [q(A)(1 − p(A)) + Σ_{y∈A} |q(y) − q(A) p(y)|].
    if draft_probs is None:
        q1 = is_top1.to(torch.float32)
        q2 = ((draft == top2) & live2).to(torch.float32)
    else:
        q1 = draft_probs.gather(1, top1[:, None]).squeeze(1).to(torch.float32)
        q2 = draft_probs.gather(1, top2[:, None]).squeeze(1).to(torch.float32) * live2
    p2_live = p2 * live2
    q_a = (q1 + q2).double()
    p_a = (p1 + p2_live).double()
    tv = 0.5 * (
        q_a * (1 - p_a).clamp(min=0)
        + (q1.double() - q_a * p1.double()).abs()
        + torch.where(live2, (q2.double() - q_a * p2_live.double()).abs(), 0.0)
    )
    examined_relaxed = examined & relaxed
    distance = torch.where(
        greedy, (relaxed_accept & kept) * (p1 - p2_live).double(), examined_relaxed * tv
    )
    stats[0] = num_tokens
    stats[1] = examined.sum()
    stats[2] = kept.sum()
    stats[3] = examined_relaxed.sum()
    stats[4] = (relaxed_accept & kept).sum()
    stats[5] = distance.sum()
    return out, stats
