"""Token trees: shapes, expected tokens per step, and Sequoia's optimal tree for a node budget.

A tree has a root (the last committed token, position 0) and ``n_nodes`` draft nodes numbered
1..n; ``parents[i-1]`` is node i's parent (0 = root, always < i). A node's *rank* is its order
among its siblings (1 = the draft's top choice). With positional acceptance p_1..p_k
(Sequoia, Chen et al. 2024, arXiv:2402.12374):

    τ = 1 + Σ_{v ≠ root} Π_{u on path(root→v)} p_rank(u)

Sequoia's dynamic program for the best tree of n nodes (root included) and depth ≤ d:
    c(n, d) = 1 + max_{a_1+…+a_k = n−1} Σ_i p_i · c(a_i, d−1),  children ranks contiguous.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from costmodel.errors import InputError

MAX_TREE_NODES = 1024


@dataclass(frozen=True)
class Tree:
    parents: tuple            # parent of node i (1..n) at index i-1; 0 is the root

    @property
    def n_nodes(self) -> int:
        return len(self.parents)

    @functools.cached_property
    def depths(self) -> np.ndarray:
        """Depth of each node 1..n (root = 0)."""
        d = np.zeros(self.n_nodes + 1, dtype=int)
        for i, p in enumerate(self.parents, start=1):
            d[i] = d[p] + 1
        return d[1:]

    @functools.cached_property
    def ranks(self) -> np.ndarray:
        seen: dict = {}
        out = []
        for p in self.parents:
            seen[p] = seen.get(p, 0) + 1
            out.append(seen[p])
        return np.asarray(out, dtype=int)

    @property
    def depth(self) -> int:
        return int(self.depths.max()) if self.n_nodes else 0

    @property
    def level_sizes(self) -> np.ndarray:
        """Nodes per depth 1..depth (draft passes: one per level)."""
        return np.bincount(self.depths, minlength=self.depth + 1)[1:] if self.n_nodes else np.zeros(0)

    @functools.cached_property
    def leaf_path_lengths(self) -> np.ndarray:
        """Tokens on each root-to-leaf path, root included (per_branch verification sequences)."""
        if not self.n_nodes:
            return np.asarray([1])
        has_child = np.zeros(self.n_nodes + 1, dtype=bool)
        for p in self.parents:
            has_child[p] = True
        leaves = [i for i in range(1, self.n_nodes + 1) if not has_child[i]]
        return self.depths[np.asarray(leaves) - 1] + 1

    @property
    def path_tokens(self):
        """Σ over root-to-leaf paths of their tokens (per_branch verification's GEMM tokens)."""
        return self.leaf_path_lengths.astype(float).sum()

    @property
    def path_pairs(self) -> float:
        """Σ over root-to-leaf paths of ℓ(ℓ+1)/2: causal attention pairs inside the branches."""
        paths = self.leaf_path_lengths.astype(float)
        return float((paths * (paths + 1) / 2).sum())

    @property
    def n_leaves(self) -> float:
        """Root-to-leaf paths (per_branch: one sequence and one attention launch each)."""
        return float(len(self.leaf_path_lengths))

    @property
    def ancestor_pairs(self) -> int:
        """Σ over the n+1 tree tokens of (ancestors + itself): tree-aware attention positions."""
        return int(self.n_nodes + 1 + (self.depths).sum())

    def path_probabilities(self, rank_acceptance) -> np.ndarray:
        """P(node accepted) for the root (1) and nodes 1..n: Π p_rank along the path from the root
        (a rank beyond the vector has p = 0)."""
        p = np.concatenate([np.asarray(rank_acceptance, dtype=float), np.zeros(self.n_nodes + 1)])
        prob = np.ones(self.n_nodes + 1)
        for i, (par, r) in enumerate(zip(self.parents, self.ranks), start=1):
            prob[i] = prob[par] * p[r - 1]
        return prob

    def depth_tails(self, rank_acceptance) -> np.ndarray:
        """P(accepted length >= j) for j = 0..depth: the path probabilities summed per depth."""
        return np.bincount(np.concatenate([[0], self.depths]), weights=self.path_probabilities(rank_acceptance))

    def expected_tokens(self, rank_acceptance) -> float:
        """1 + Σ_v Π p_rank along the path (a rank beyond the vector has p = 0: the list p_1..p_k
        states that lower-ranked candidates are never accepted)."""
        return float(self.path_probabilities(rank_acceptance).sum())


def lockstep_tokens(tails, batch):
    """Tokens per sequence per step of a lock-step batch of B sequences: Σ_j P(accepted length >= j)^B
    (the batch advances by its shortest accepted path); ``tails`` = P(length >= j), j = 0..depth."""
    b = np.asarray(batch, dtype=float)
    return np.sum(tails.reshape((-1,) + (1,) * b.ndim) ** b, axis=0)


def validate_parents(parents, field="tree_parents") -> Tree:
    ps = list(parents)
    if not ps:
        raise InputError("a tree needs at least one node", field=field)
    if len(ps) > MAX_TREE_NODES:
        raise InputError(f"too many nodes ({len(ps)})", field=field, allowed=f"at most {MAX_TREE_NODES}")
    for i, p in enumerate(ps, start=1):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < i:
            raise InputError(f"parent of node {i} is {p!r}; each parent must be an earlier node "
                             f"(0 = root, 1..{i - 1})", field=field)
    return Tree(tuple(int(p) for p in ps))


def full_tree(width: int, depth: int) -> Tree:
    """Full ``width``-ary tree of ``depth`` levels: Σ_{d=1..depth} width^d nodes (breadth-first)."""
    parents, level = [], [0]
    for _ in range(depth):
        nxt = []
        for par in level:
            for _ in range(width):
                parents.append(par)
                nxt.append(len(parents))
        level = nxt
    if len(parents) > MAX_TREE_NODES:
        raise InputError(f"a {width}-ary tree of depth {depth} has {len(parents)} nodes",
                         field="tree_width", allowed=f"at most {MAX_TREE_NODES} nodes")
    return Tree(tuple(parents))


@functools.lru_cache(maxsize=64)
def _sequoia_table(n_max: int, rank_acceptance: tuple, max_depth: int):
    """Sequoia's DP for every size up to ``n_max`` draft nodes and every depth bound up to
    ``max_depth``: returns (g, choice) with g[d, n] the best expected tokens of a subtree of n nodes
    (root included) and depth <= d, and choice the argmax subtree sizes for reconstruction."""
    p = np.asarray(rank_acceptance, dtype=float)
    k, N = len(p), n_max + 1                        # N = nodes including the root
    D = max_depth
    NEG = -1e18
    g = np.full((D + 1, N + 1), NEG)               # g[d, n] for n nodes (root incl.), depth <= d
    g[:, 1] = 1.0
    g[:, 0] = 0.0
    choice = {}                                     # (d, i) -> subtree size of rank i, per m
    m_idx = np.arange(N)[:, None]
    a_idx = np.arange(N)[None, :]
    valid = (a_idx >= 1) & (a_idx <= m_idx)
    rest = np.clip(m_idx - a_idx, 0, N - 1)
    for d in range(1, D + 1):
        h_prev = np.full(N, NEG)
        h_prev[0] = 0.0                             # h_0(m): 0 nodes with no ranks
        best = np.full(N, NEG)
        best[0] = 0.0
        best_i = np.zeros(N, dtype=int)
        sub = g[d - 1, :N]                          # value of a child subtree with a nodes
        sub_ok = (sub > NEG / 2)[a_idx]             # a subtree of a nodes fits in d-1 levels
        for i in range(k):
            # h_i(m) = max_{1<=a<=m} h_{i-1}(m−a) + p_i·g[d−1, a]  (ranks 1..i all present); an
            # infeasible part stays infeasible whatever p_i (p_i = 0 must not make 0·NEG = 0 feasible)
            cand = np.where(valid & sub_ok & (h_prev > NEG / 2)[rest], h_prev[rest] + p[i] * sub[a_idx], NEG)
            arg = cand.argmax(axis=1)
            h = cand[np.arange(N), arg]
            h = np.where(h < NEG / 2, NEG, h)
            choice[(d, i)] = arg
            better = h > best + 1e-15
            best = np.where(better, h, best)
            best_i = np.where(better, i + 1, best_i)
            h_prev = h
        g[d, 1:] = 1.0 + best[:N]
        choice[(d, "k")] = best_i
    return g, choice


def _reconstruct(choice, n_nodes: int, depth: int) -> "Tree":
    parents: list = []

    def build(root: int, n: int, d: int):
        if n <= 1 or d == 0:
            return
        m = n - 1
        n_ranks = choice[(d, "k")][m]
        sizes = []
        for i in range(n_ranks - 1, -1, -1):
            a = int(choice[(d, i)][m])
            sizes.append(a)
            m -= a
        sizes.reverse()
        kids = []
        for _ in sizes:
            parents.append(root)
            kids.append(len(parents))
        for kid, a in zip(kids, sizes):
            build(kid, a, d - 1)

    build(0, n_nodes + 1, depth)
    # renumber breadth-first so that parents precede children and siblings are in rank order
    return _bfs(parents)


def tree_capacity(n_ranks: int, depth: int, cap: int) -> int:
    """Most draft nodes a tree with at most ``n_ranks`` children per node and ``depth`` levels holds:
    Σ_{i=1..depth} n_ranks^i (counting stops once it passes ``cap``)."""
    total, level = 0, 1
    for _ in range(depth):
        level *= n_ranks
        total += level
        if total >= cap:
            break
    return total


def ranks_for(rank_acceptance: tuple, n_nodes: int, depth: int) -> tuple:
    """The rank vector the DP needs to place ``n_nodes`` nodes within ``depth`` levels.

    A rank beyond the given list has acceptance 0 (as in :meth:`Tree.expected_tokens`): the list
    p_1..p_k says the draft's lower-ranked candidates are never accepted. Such nodes add nothing
    to τ but are still nodes of the tree (they are drafted and verified). When the k ranks cannot
    hold ``n_nodes`` within ``depth`` (k = 1 and more nodes than levels), zero-probability ranks
    are appended until they can, so that the optimal tree has exactly ``n_nodes`` nodes and its τ
    never falls below that of a smaller budget. A list that already suffices is returned as is."""
    p = tuple(rank_acceptance)
    k = max(len(p), 1)
    while tree_capacity(k, depth, n_nodes) < n_nodes:
        k += 1
    return p + (0.0,) * (k - len(p))


@functools.lru_cache(maxsize=512)
def optimal_tree(n_nodes: int, rank_acceptance: tuple, max_depth: int | None = None) -> Tree:
    """Sequoia's DP: the tree of ``n_nodes`` draft nodes maximising expected tokens (module docstring),
    depth <= ``max_depth`` (<= 32 when not given); ranks beyond the list: :func:`ranks_for`."""
    D = min(n_nodes, max_depth or 32)
    _, choice = _sequoia_table(n_nodes, ranks_for(rank_acceptance, n_nodes, D), D)
    return _reconstruct(choice, n_nodes, D)


@functools.lru_cache(maxsize=64)
def candidate_trees(budget: int, rank_acceptance: tuple, max_depth: int | None = None) -> tuple:
    """Every distinct tree that is optimal for some (size n <= budget, depth bound d): the search
    space of Sequoia's hardware-aware optimiser, which trades tokens per step against draft passes
    (one per level) and verification tokens. One DP table serves all (n, d)."""
    D = min(budget, max_depth or 16)
    g, choice = _sequoia_table(budget, tuple(rank_acceptance), D)
    seen, out = set(), []
    for n in range(1, budget + 1):
        for d in range(1, min(n, D) + 1):
            if g[d, n + 1] < 0:           # the ranks cannot hold n nodes in d levels: no such tree
                continue
            t = _reconstruct(choice, n, d)
            if t.parents not in seen:
                seen.add(t.parents)
                out.append(t)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class TreeTable:
    """Several trees' shape numbers as arrays over the trees (element i is ``trees[i]``'s), so that
    all of them are priced in one array evaluation: the same numbers :class:`Tree` gives, computed
    with the same expressions tree by tree. ``level_sizes`` is (trees, deepest depth), 0 past a
    tree's depth; ``tokens`` and ``depth_tails`` hold τ and P(accepted length >= j) (padded with 0)
    for the rank vector the table was built for."""

    trees: tuple
    n_nodes: np.ndarray
    depth: np.ndarray
    ancestor_pairs: np.ndarray
    path_tokens: np.ndarray
    path_pairs: np.ndarray
    n_leaves: np.ndarray
    level_sizes: np.ndarray
    tokens: np.ndarray
    depth_tails: np.ndarray

    def lockstep_tokens(self, batch) -> np.ndarray:
        """:func:`lockstep_tokens` of every tree for one batch size (trees of one depth together)."""
        b = float(batch)
        out = np.empty(len(self.trees))
        for d in np.unique(self.depth):
            rows = self.depth == d
            # row by row over a contiguous block: the summation order of lockstep_tokens on one tree
            out[rows] = np.sum(np.ascontiguousarray(self.depth_tails[rows, :d + 1]) ** b, axis=1)
        return out


@functools.lru_cache(maxsize=64)
def candidate_table(budget: int, rank_acceptance: tuple, max_depth: int | None = None) -> TreeTable:
    """:func:`candidate_trees` as a :class:`TreeTable` (cached per rank vector, budget and depth bound)."""
    trees = candidate_trees(budget, rank_acceptance, max_depth)
    deepest = max(t.depth for t in trees)
    levels = np.zeros((len(trees), deepest), dtype=int)
    tails = np.zeros((len(trees), deepest + 1))
    for i, t in enumerate(trees):
        levels[i, :t.depth] = t.level_sizes
        tails[i, :t.depth + 1] = t.depth_tails(rank_acceptance)

    def column(f, dtype=float):
        return np.asarray([f(t) for t in trees], dtype=dtype)

    return TreeTable(trees=trees, n_nodes=column(lambda t: t.n_nodes), depth=column(lambda t: t.depth, int),
                     ancestor_pairs=column(lambda t: t.ancestor_pairs), path_tokens=column(lambda t: t.path_tokens),
                     path_pairs=column(lambda t: t.path_pairs), n_leaves=column(lambda t: t.n_leaves),
                     level_sizes=levels, tokens=column(lambda t: t.expected_tokens(rank_acceptance)),
                     depth_tails=tails)


def _bfs(parents: list) -> Tree:
    children: dict = {}
    for i, p in enumerate(parents, start=1):
        children.setdefault(p, []).append(i)
    order, new_id, out = [0], {0: 0}, []
    for node in order:
        for c in children.get(node, []):
            new_id[c] = len(new_id)
            out.append(new_id[node])
            order.append(c)
    return Tree(tuple(out))
