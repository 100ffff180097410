"""Step costs for the serving simulator, read from the engine once per run.

For a step holding n decoding sequences (context sum ΣL) and prefill chunks:

    step_s = pass(tokens, lm, pairs, kv_read)       the target's mixed pass (costmodel.engine.mixed)
           + E_γ(n, ΣL / n)                          everything else in a decoding step
           + draft prefill of the chunks             a draft model's own pass over the same chunks

E_γ(n, L) = evaluate's step_latency_s − the target's pass for n sequences at context L, on a grid
of n = 1..max_num_seqs and L (linear interpolation in L; costs are linear in L between regime
changes): the draft passes, draft↔target transfers and per-step host overheads, exactly as
``costmodel.evaluate`` prices them. A step with no decoding sequence pays the runtime's
``step_overhead_s`` as a prefill does (plus an engine version's host work, ``prompt_step_extra_s``). So at low load a request sees evaluate's ttft_s and
time_per_output_token_s.

Per decoding sequence the target pass takes the strategy's own verification shape
(:func:`costmodel.engine.mixed.shape_coefficients` of ``chain_verify_shape`` for γ+1 tokens, by the
runtime's ``spec_scorer``, or the tree's
``verify_shape``). Tokens per step of a request with acceptance α_i: Leviathan's chain formula at
the γ in force; a tree's τ under α_i's rank model (the tree itself is the one evaluate builds for
the record's α); see :func:`request_alpha` for the records whose τ every request keeps.

KV capacity of one instance (:meth:`StepCosts.kv_capacity_tokens`): on the most loaded device,
usable − weights (target, and a draft on the same device) − activations of the largest pass −
runtime overhead, less what the runtime's ``kv_pool_fraction`` keeps out of the pool, divided by the
KV bytes per token (target per device + a same-device draft's).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from costmodel.engine import acceptance, memory
from costmodel.engine.evaluate import build_exec, build_draft, evaluate_arrays, make_ctx
from costmodel.engine.mixed import PassTable, shape_coefficients
from costmodel.engine.strategies.common import chain_verify_shape
from costmodel.engine.strategies.speculative import separate
from costmodel.errors import InputError
from costmodel.inputs.record import Record

L_GRID_POINTS = 40


class GammaCosts:
    """Per-γ pieces: per-sequence pass coefficients, E table, tokens per step."""

    def __init__(self, sc: "StepCosts", gamma: int):
        rec = sc.rec
        self.gamma = gamma
        rec = rec.replace(gamma_schedule=None)       # this table is for one γ
        if gamma == 0:
            r = rec.replace(strategy="autoregressive", draft_model=None)
        elif rec.strategy == "speculative":
            r = rec.replace(gamma=int(gamma))
        else:
            r = rec
        self.rec = r
        ex = sc.ex
        self.tree = None
        if r.strategy == "tree":
            from costmodel.engine.strategies.tree import verify_shape
            tr = self.tree = tree_of(r, ex)

            def shape_at(L):
                ctx = make_ctx(r, ex, {"batch_size": 1.0, "prompt_len": L, "gen_len": 0.0})
                return verify_shape(ctx, tr, r.attention_kernel, [])
        else:
            q = 1.0 if r.strategy == "autoregressive" else gamma + 1.0
            scorer = "multi_query" if r.strategy == "autoregressive" else sc.ex.rt.spec_scorer

            def shape_at(L):
                return chain_verify_shape(1.0, q, L, scorer)
        self.q_tok, self.q_lm, self.p0, self.p1, self.k0, self.k1 = shape_coefficients(shape_at)
        self.slots = int(math.ceil(self.q_tok)) - 1          # speculative KV slots beyond the context
        n = np.arange(1, sc.max_num_seqs + 1, dtype=float)
        L = sc.L_grid
        res = evaluate_arrays(r, {"batch_size": n[:, None], "prompt_len": np.maximum(L[None, :] - 1.0, 0.0),
                                  "gen_len": np.full((1, 1), 2.0)}, with_baseline=False)
        step = np.broadcast_to(res["step_latency_s"], (len(n), len(L)))
        nn = n[:, None]
        Lb = np.broadcast_to(L[None, :], step.shape)
        tok = np.broadcast_to(np.rint(nn * self.q_tok).astype(np.int64), step.shape)
        lm = np.broadcast_to(np.rint(nn * self.q_lm).astype(np.int64), step.shape)
        v = sc.table.times(tok, lm, nn * (self.p0 + self.p1 * Lb), nn * (self.k0 + self.k1 * Lb))
        self.E = np.maximum(step - v, 0.0) + sc.host_decode_adjust_s
        self.E_rows = [row.tolist() for row in self.E]
        tps = np.ravel(res["tokens_per_step"])
        self.tree_tau = float(tps[0]) if r.strategy == "tree" else None

    def tau(self, alpha):
        """Tokens per step of each request, whose acceptance is ``alpha`` (array; NaN where the record
        fixes τ for every request, :func:`request_alpha`): 1 for plain decoding; a chain: Leviathan's
        τ(α_i, γ), or τ of α_1..α_γ by position; a tree: the tree's τ under α_i's rank model
        (:func:`costmodel.engine.strategies.tree.tree_tokens_for_alphas`), else evaluate's τ."""
        a = np.asarray(alpha, dtype=float)
        if self.gamma == 0 or self.rec.strategy == "autoregressive":
            return np.ones_like(a)
        if self.tree is not None:
            if np.all(np.isnan(a)):
                return np.full_like(a, self.tree_tau)
            from costmodel.engine.strategies.tree import tree_tokens_for_alphas
            return tree_tokens_for_alphas(self.tree, a)
        pos = self.rec.acceptance_by_position
        if pos is not None:
            return np.full_like(a, float(acceptance.chain_tokens_by_position(pos, self.gamma)))
        return acceptance.chain_tokens_per_step(a, self.gamma)

    def extra_s(self, n: int, Lmean: float, L_list) -> float:
        """E(n, L̄) by linear interpolation in L (clamped to the grid)."""
        row = self.E_rows[n - 1]
        i = bisect.bisect_right(L_list, Lmean)
        if i <= 0:
            return row[0]
        if i >= len(L_list):
            return row[-1]
        x0, x1 = L_list[i - 1], L_list[i]
        return row[i - 1] + (row[i] - row[i - 1]) * (Lmean - x0) / (x1 - x0)

    def extra_s_array(self, n: int, Lmean, L_grid):
        return np.interp(Lmean, L_grid, self.E[n - 1])


class StepCosts:
    """Everything the event loop needs from the engine for one deployment (one instance)."""

    def __init__(self, rec: Record, max_num_seqs: int, max_tokens: int, max_context: float,
                 num_scheduler_steps: int | None = None):
        self.rec = rec.replace(batch_sync="ragged")
        if rec.strategy == "shared_prefix":
            raise InputError("serving runs independent requests; give shared_prompt_len for a common "
                             "system prompt instead of the shared_prefix strategy", field="strategy")
        if rec.tree_shape == "optimal_for_hardware":
            raise InputError("serve needs a fixed tree; use tree_shape=optimal or explicit", field="tree_shape")
        self.ex = build_exec(self.rec)
        draft = build_draft(self.rec, self.ex)
        self.draft_ex = draft if (draft is not None and self.rec.draft_model != "self") else None
        self.max_num_seqs = max_num_seqs
        q_max = 1 + max(rec.gamma or 0, rec.tree_nodes or 0, 64 if rec.strategy == "tree" else 0)
        self.table = PassTable(self.ex, max_tokens + max_num_seqs * q_max)
        self.draft_table = PassTable(self.draft_ex, max_tokens + 16) if self.draft_ex is not None else None
        # the context grid reaches 5 % past the longest request, but never past the model's max_context
        # (a grid point evaluates prompt L − 1 plus 2 generated tokens: L + 1 <= max_context)
        limit = self.ex.model.max_context
        top = max(float(max_context) * 1.05, 64.0)
        if limit is not None:
            top = max(min(top, limit - 1.0), 2.0)
        self.L_grid = np.unique(np.concatenate([np.geomspace(2.0, top, L_GRID_POINTS), [top]]))
        self.L_list = self.L_grid.tolist()
        rt = self.ex.rt
        self.step_overhead_s = float(rt.step_overhead_s)
        # the engine version's host work (Runtime.host_s): evaluate's decoding step holds
        # host_step_s / N_version; under a workload's own N it is host_step_s / N, and a step that
        # schedules prompts is a scheduler invocation of its own (host_step_s whole)
        n_rt = rt.scheduler_default("num_scheduler_steps", 1)
        self.n_steps = int(num_scheduler_steps or n_rt)
        self.host_step_s = float(rt.host_step_s)
        self.host_per_seq_s = float(rt.host_per_seq_s)
        self.host_decode_adjust_s = self.host_step_s * (1.0 / self.n_steps - 1.0 / n_rt)
        self._gammas: dict = {}

    def prompt_step_extra_s(self, n_chunks: int, with_decoders: bool) -> float:
        """Host and fixed overheads of a step that schedules ``n_chunks`` prompt chunks: alone,
        step_overhead_s + host_step_s + host_per_seq_s · n_chunks; beside decoders (whose E already
        holds step_overhead_s and host_step_s / N), the rest of the invocation and the chunks' share."""
        if with_decoders:
            return self.host_step_s * (1.0 - 1.0 / self.n_steps) + self.host_per_seq_s * n_chunks
        return self.step_overhead_s + self.ex.rt.host_s(n_chunks, steps_per_schedule=1)

    def gamma_costs(self, gamma: int) -> GammaCosts:
        g = self._gammas.get(gamma)
        if g is None:
            g = self._gammas[gamma] = GammaCosts(self, gamma)
        return g

    def kv_bytes_per_token(self) -> float:
        """KV bytes per token on the most loaded device (target shard + a same-device draft); with
        attention data parallelism (expert_parallel) each of the dp groups keeps 1/dp of the tokens."""
        b = memory.kv_bytes_per_token_device(self.ex) / self.ex.dp
        if self.draft_ex is not None and not separate_draft(self.rec):
            b += memory.kv_bytes_per_token_device(self.draft_ex) / self.draft_ex.dp
        return float(b)

    def kv_capacity_tokens(self, max_tokens: int) -> int:
        """KV tokens the instance's pool holds (module docstring): rest = usable − weights − activations
        − overhead on the most loaded device; the pool is ``rest`` itself, or what the runtime's
        ``kv_pool_fraction`` f leaves: f·usable − weights − activations − overhead = rest − (1 − f)·usable
        (basis ``total``, vLLM's gpu_memory_utilization) or f·rest (basis ``free``, TensorRT-LLM's
        free_gpu_memory_fraction); divided by the KV bytes per token."""
        ex = self.ex
        weights = memory.weights_device_bytes(ex)
        if self.draft_ex is not None and not separate_draft(self.rec):
            weights += memory.weights_device_bytes(self.draft_ex)
        acts = float(np.ravel(memory.activation_bytes(ex, max_tokens, self.max_num_seqs * 8))[0])
        free = ex.hw.usable_bytes - weights - acts - ex.rt.memory_overhead_bytes
        f = ex.rt.kv_pool_fraction
        if f is not None:
            free = free - (1.0 - f) * ex.hw.usable_bytes if ex.rt.kv_pool_basis == "total" else f * free
        cap = int(free // self.kv_bytes_per_token())
        if cap <= 0:
            raise InputError(f"the deployment leaves no memory for the KV cache on {ex.hw.id} "
                             f"({weights / 1e9:.1f} GB of weights, {acts / 1e9:.2f} GB of activations for "
                             f"{max_tokens} tokens per step, {ex.hw.usable_bytes / 1e9:.1f} GB usable)",
                             field="n_devices", allowed="more devices, a smaller model or max_num_batched_tokens")
        return cap

    def kv_bytes_total_per_token(self) -> float:
        """KV bytes of one token over the whole instance (what a disaggregated hand-off moves)."""
        return float(self.ex.model.kv_bytes_per_token(self.ex.kv_elem_bytes))


def tree_of(rec: Record, ex) -> "object":
    """The tree a tree record verifies (built as evaluate builds it)."""
    from costmodel.engine.strategies.tree import build_tree
    return build_tree(make_ctx(rec, ex, {"batch_size": 1.0, "prompt_len": 1.0, "gen_len": 0.0}))


def request_alpha(rec: Record) -> float | None:
    """The mean acceptance α that requests draw their own α_i around (Beta, ``acceptance_sd``), or
    None where every request keeps the record's τ:

    * a chain: ``acceptance_rate``, else the α with Leviathan's τ(α, gamma) = ``mean_accepted_tokens``;
      None with ``acceptance_by_position`` (τ by position for every request);
    * a tree: ``acceptance_rate``, else the α whose rank model gives the tree's
      ``mean_accepted_tokens`` (:func:`costmodel.engine.strategies.tree.alpha_for_tree_tau`); None with
      ``rank_acceptance`` (a measured rank profile: evaluate's τ for every request).
    """
    if rec.strategy == "speculative":
        if rec.acceptance_by_position is not None and rec.acceptance_rate is None:
            return None
        if rec.acceptance_rate is not None:
            return float(rec.acceptance_rate)
        return float(acceptance.alpha_from_tau(rec.mean_accepted_tokens, rec.gamma))
    if rec.strategy == "tree":
        if rec.rank_acceptance is not None:
            return None
        if rec.acceptance_rate is not None:
            return float(rec.acceptance_rate)
        from costmodel.engine.strategies.tree import alpha_for_tree_tau
        r = rec.replace(gamma_schedule=None, batch_sync="ragged")
        return float(alpha_for_tree_tau(tree_of(r, build_exec(r)), rec.mean_accepted_tokens))
    return None


def separate_draft(rec: Record) -> bool:
    """The draft sits on its own device (its weights and KV leave the target's memory)."""
    class _C:                      # speculative.separate reads only ctx.rec
        pass
    c = _C()
    c.rec = rec
    return separate(c)
