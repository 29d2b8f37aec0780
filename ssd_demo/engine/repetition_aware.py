"""Repetition-aware sampling (RAS, from VALL-E 2, CosyVoice 2's default) as a next-token distribution.

CosyVoice 2 samples a speech token by nucleus sampling (top-p 0.8 within the top 25) and, when the
sampled token already occurs often in the last `win_size` generated tokens (at least win_size x
tau_r times: once, at the defaults), throws it away and samples again from the full distribution
without it; before `min_len` tokens, the end-of-speech score is set to -inf first, so neither draw can
end the utterance that way. Written as what those steps produce, the next token's distribution
depends only on the tokens generated so far (f = the full distribution, end masked while early;
n = its nucleus; R = the over-repeated tokens):

    q(y) = n(y) [y not in R] + sum over x in R of n(x) f(y) [y != x] / (1 - f(x))

so speculative sampling stays exact when the draft's proposals and the target's verify rows are
both passed through it, each row with its own prefix (`decoding` hands each row the generated
tokens before it). A strategy handed to the decoders as `prefix_distribution=`. By default it follows
the official procedure as of February 2026: the re-draw excludes the over-repeated token (since
2026-02-04) and the early stop ids are masked before drawing (since 2026-02-11).

The release-era procedure (the code the SSD paper ran) is available too: its re-draw could return the
over-repeated token (`redraw_may_repeat`: the f(y) above without the [y != x] and the renormalisation),
and while early it drew again and again until the token was not a stop id (`redrawn_until_min_len`):
the distribution above with those ids' mass removed and the rest renormalised (conditioned on not
drawing them), which is not the same as masking their scores before the nucleus is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RepetitionAwareSampling:
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1
    # Scores set to -inf while fewer than `min_len` tokens were generated (CosyVoice 2: its end id only;
    # its two other stop ids stay drawable, as in the official loop).
    masked_until_min_len: tuple[int, ...] = ()
    min_len: int = 0
    # Draws of these ids thrown away and drawn again while fewer than `min_len` tokens were generated (the
    # release-era loop, for all of CosyVoice 2's stop ids): their mass removed after sampling, not before.
    redrawn_until_min_len: tuple[int, ...] = ()
    # The release-era re-draw of an over-repeated token, from the full distribution including that token.
    redraw_may_repeat: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.top_p <= 1 or self.top_k < 1 or self.win_size < 1 or not 0 < self.tau_r <= 1:
            raise ValueError(f"invalid repetition-aware sampling settings: {self}")

    def __call__(self, scores: torch.Tensor, prefixes: list[list[int]]) -> torch.Tensor:
        """[N, V] scores (-inf = not allowed) and each row's generated tokens -> [N, V] probabilities."""
        scores = scores.float()
        early = [row for row, prefix in enumerate(prefixes) if len(prefix) < self.min_len]
        if early and self.masked_until_min_len:
            scores = scores.clone()
            scores[torch.tensor(early)[:, None], torch.tensor(self.masked_until_min_len)[None, :]] = float("-inf")
        full = torch.softmax(scores, dim=-1)  # [N, V]
        nucleus = _nucleus(full, self.top_p, self.top_k)  # [N, V]
        out = nucleus.clone()
        threshold = self.win_size * self.tau_r
        vocab = full.shape[-1]
        for row, prefix in enumerate(prefixes):
            window = prefix[-self.win_size:]
            counts: dict[int, int] = {}
            for token in window:
                counts[token] = counts.get(token, 0) + 1
            # Only over-repeated tokens the nucleus can draw move mass (at most win_size of them).
            repeated = [t for t, n in counts.items() if n >= threshold and t < vocab and nucleus[row, t] > 0]
            if not repeated:
                continue
            q = nucleus[row].clone()
            q[repeated] = 0.0
            for token in repeated:
                if self.redraw_may_repeat:
                    q += nucleus[row, token] * full[row]
                    continue
                rest = scores[row].clone()
                rest[token] = float("-inf")
                if torch.isinf(rest).all():  # nothing else allowed: the official re-draw would fail; it stays
                    q[token] += nucleus[row, token]
                    continue
                # The full distribution without the token, renormalised in the log domain (exact also when
                # the token held nearly all the mass, where 1 - f(token) would round to 0).
                q += nucleus[row, token] * torch.softmax(rest, dim=-1)
            out[row] = q
        if early and self.redrawn_until_min_len:
            out = self._redrawn(out, scores, prefixes, early)
        return out

    def _redrawn(self, out: torch.Tensor, scores: torch.Tensor, prefixes: list[list[int]], early: list[int]) -> torch.Tensor:
        """Early rows conditioned on not drawing `redrawn_until_min_len` (what redrawing until then gives)."""
        ids = torch.tensor(self.redrawn_until_min_len, device=out.device)
        for row in early:
            kept = out[row].clone()
            kept[ids] = 0.0
            total = kept.sum()
            if total > 0:
                out[row] = kept / total
            else:  # only those ids can be drawn: the official loop gives up (an error after 100 draws); we mask them
                masked = RepetitionAwareSampling(self.top_p, self.top_k, self.win_size, self.tau_r,
                                                 tuple(self.masked_until_min_len) + tuple(self.redrawn_until_min_len),
                                                 self.min_len, redraw_may_repeat=self.redraw_may_repeat)
                out[row] = masked(scores[row: row + 1], [prefixes[row]])[0]
        return out


def _nucleus(probs: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """CosyVoice's nucleus: the most likely tokens, in order, while the mass before each is below top_p
    and fewer than top_k are taken; renormalised. [N, V] -> [N, V]."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    # The mass before each token, summed in order as the official loop does (not cumsum - p, which can
    # differ in the last bit at the top-p boundary).
    before = torch.cat([torch.zeros_like(sorted_probs[:, :1]), torch.cumsum(sorted_probs, dim=-1)[:, :-1]], dim=-1)
    rank = torch.arange(probs.shape[-1], device=probs.device)
    keep_sorted = (before < top_p) & (rank < top_k)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)


__all__ = ["RepetitionAwareSampling"]
