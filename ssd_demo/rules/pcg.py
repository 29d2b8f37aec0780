"""Coarse-grained acceptance over acoustic similarity groups (PCG, arXiv 2511.13732).

Tokens whose embeddings point the same way tend to sound alike. For each token t
the group G(t) = {t' : cos(E(t), E(t')) > theta}; a token belongs to m(t) = |G(t)| groups
(the relation is symmetric) and its probability mass is split equally over them, so a
distribution p over tokens induces a distribution over groups P(g) = sum_{t in g} p(t) / m(t).
Rejection sampling is done on the group variable: the drafted token x stands for a group
containing it, which the target keeps with probability min(1, Q(g)/P(g)); after a rejection
a group is drawn from norm(max(0, Q - P)) and a token from the target inside it.

Groups are computed blockwise and stored as a sparse matrix (Llasa has 65,536 speech
tokens; a dense similarity matrix would take 16 GB), and cached per embedding table.

The embedding table is handed in (`make_rule(config, embeddings=...)`): the target's input
embeddings (the PCG paper's choice, `speculative_generate`'s default) or a backend's acoustic
table (`Synthesizer.grouping_embeddings`).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

from typing import TYPE_CHECKING

import torch

from ..errors import InvalidSettingError
from .base import TINY, Block
from .exact import ExactRule

if TYPE_CHECKING:
    from ..config import DecodingConfig
#: Refuse group tables larger than this many (token, group) pairs: theta is too low.
MAX_PAIRS = 50_000_000


@dataclass
class AcousticGroups:
    """Symmetric sparse membership matrix A[g, t] = 1 iff t in G(g), plus m(t)."""

    membership: torch.Tensor  # sparse CSR [V, V] float32
    sizes: torch.Tensor  # [V] float32, m(t) = |G(t)| (1 for tokens outside the grouped set)
    theta: float

    @property
    def pairs(self) -> int:
        return int(self.membership.values().numel())

    def group_mass(self, probs: torch.Tensor) -> torch.Tensor:
        """[N, V] token distributions -> [N, V] group masses (group g indexed by its centre token)."""
        split = (probs / self.sizes).T  # [V, N]
        return torch.sparse.mm(self.membership, split).T

    def spread(self, group_weights: torch.Tensor) -> torch.Tensor:
        """[N, V] weights per group -> [N, V] sum over the groups containing each token."""
        return torch.sparse.mm(self.membership, group_weights.T).T  # A is symmetric


def build_groups(embeddings: torch.Tensor, theta: float, token_ids: list[int] | None = None,
                 block_rows: int = 1024) -> AcousticGroups:
    """Groups from an embedding table [V, d]; only `token_ids` are grouped (others stay singletons)."""
    vocab = embeddings.shape[0]
    device = embeddings.device
    ids = torch.arange(vocab, device=device) if token_ids is None else torch.tensor(sorted(set(token_ids)), device=device)
    grouped = torch.nn.functional.normalize(embeddings[ids].float(), dim=-1)
    rows, cols = [], []
    for start in range(0, len(ids), block_rows):
        sims = grouped[start : start + block_rows] @ grouped.T
        r, c = torch.nonzero(sims > theta, as_tuple=True)
        rows.append(ids[r + start])
        cols.append(ids[c])
        if sum(x.numel() for x in rows) > MAX_PAIRS:
            raise InvalidSettingError(
                f"pcg_theta={theta} puts more than {MAX_PAIRS:,} token pairs in groups; raise theta"
            )
    row = torch.cat(rows)
    col = torch.cat(cols)
    # Every token is in its own group (cos = 1 > theta for theta < 1; forced for theta >= 1).
    singles = torch.arange(vocab, device=device)
    self_pairs = torch.ones(vocab, dtype=torch.bool, device=device)
    self_pairs[row[row == col]] = False
    row = torch.cat([row, singles[self_pairs]])
    col = torch.cat([col, singles[self_pairs]])
    values = torch.ones(row.numel(), device=device)
    with warnings.catch_warnings():  # torch flags sparse CSR as beta; the operations used here are stable
        warnings.simplefilter("ignore")
        membership = torch.sparse_coo_tensor(torch.stack([row, col]), values, (vocab, vocab)).coalesce().to_sparse_csr()
    sizes = torch.zeros(vocab, device=device).index_add_(0, row, torch.ones_like(values))
    return AcousticGroups(membership=membership, sizes=sizes, theta=theta)


_CACHE: dict[str, AcousticGroups] = {}


def groups_for(embeddings: torch.Tensor, theta: float, token_ids: list[int] | None) -> AcousticGroups:
    """Groups of an embedding table [V, d], cached per table content, theta and token set."""
    # Identify the table cheaply: this runs once per decoded chunk, and Llasa's table has 193,800 rows of
    # 2,048, so only about 1,024 sampled rows are read (never a float copy of the whole table).
    table = embeddings.detach()
    sample = table[:: max(1, table.shape[0] // 1024)].float().cpu().numpy()
    table_key = hashlib.sha1(sample.tobytes() + f"{tuple(table.shape)}{table.dtype}".encode()).hexdigest()
    ids_key = hashlib.sha1(str(token_ids).encode()).hexdigest()[:12]
    key = f"{table_key}:{theta}:{ids_key}:{embeddings.device}"
    if key not in _CACHE:
        _CACHE[key] = build_groups(embeddings.detach(), theta, token_ids)
    return _CACHE[key]


class GroupRule(ExactRule):
    """PCG: rejection sampling on acoustic similarity groups.

    Guarantee: exact at group level — the distribution of the (latent) group of each
    generated token equals the target's group marginal Q(g); inside an accepted group the
    draft's token is kept. theta >= 1 makes every group a singleton: exact speculative
    sampling. Under greedy decoding a drafted token is kept iff it shares a group with the
    target's argmax.
    """

    name = "pcg"
    guarantee = "exact at group level; theta >= 1 is exact speculative sampling"

    def __init__(self, config: DecodingConfig, embeddings: torch.Tensor):
        super().__init__(config)
        grouped = None
        if config.allowed_token_ids is not None:
            grouped = [t for t in config.allowed_token_ids if t not in config.eos_ids]
        self.groups = groups_for(embeddings, config.pcg_theta, grouped)

    def _masses(self, block: Block) -> tuple[torch.Tensor, torch.Tensor]:
        """Group masses P (draft) and Q (target) for every drafted position, computed once per block."""
        if "group_masses" not in block.derived:
            k = block.drafted.shape[0]
            block.derived["group_masses"] = (self.groups.group_mass(block.draft_probs),
                                             self.groups.group_mass(block.target_probs[:k]))
        return block.derived["group_masses"]

    def accept_probability(self, block: Block) -> torch.Tensor:
        # The drafted token picks one of its m(x) groups uniformly; integrating that choice
        # out gives P(keep x) = mean over g containing x of min(1, Q(g)/P(g)).
        p_groups, q_groups = self._masses(block)
        ratio = torch.clamp(q_groups / p_groups.clamp_min(TINY), max=1.0)
        ratio = torch.where(p_groups > 0, ratio, torch.zeros_like(ratio))
        per_token = self.groups.spread(ratio)  # sum over groups containing each token
        index = block.drafted[:, None]
        return (per_token.gather(1, index) / self.groups.sizes[block.drafted][:, None])[:, 0].clamp(max=1.0)

    def expected_acceptance(self, block: Block) -> torch.Tensor:
        p_groups, q_groups = self._masses(block)
        return torch.minimum(p_groups, q_groups).sum(dim=-1)

    def residual(self, block: Block, position: int) -> torch.Tensor:
        q = block.target_probs[position][None]
        p_groups, q_groups = self._masses(block)
        p_group, q_group = p_groups[position][None], q_groups[position][None]
        leftover = torch.clamp(q_group - p_group, min=0.0)
        total = leftover.sum()
        if float(total) <= TINY:
            return q[0]
        # Draw a group from the leftover mass, then a token inside it with weight q(t)/m(t).
        weights = torch.where(q_group > 0, leftover / total / q_group.clamp_min(TINY), torch.zeros_like(q_group))
        token = (q / self.groups.sizes) * self.groups.spread(weights)
        token_total = token.sum()
        return (token / token_total)[0] if float(token_total) > TINY else q[0]
