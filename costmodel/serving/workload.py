"""Workload and scheduler fields of a serving run, and the requests they generate.

Fields (all optional; a record's deployment fields go to :func:`costmodel.inputs.record.parse_record`):

* arrivals: ``request_rate`` (requests/s; ``inf`` sends every request at t = 0), ``arrival``
  (``poisson``: exponential gaps of mean 1/rate; ``gamma``: gamma gaps of mean 1/rate and
  coefficient of variation ``arrival_cv`` (shape 1/cv², scale cv²/rate), bursty for cv > 1; or a
  trace CSV path with columns ``arrival_s,prompt_len,gen_len``); ``num_requests`` (default 1000)
  or ``duration_s`` (arrivals in [0, duration_s), the clock stops there);
  ``max_concurrency`` (N clients in a closed loop: a request is sent when fewer than N are in flight).
* lengths: ``prompt_len`` / ``gen_len`` fixed, or ``prompt_len_dist`` / ``gen_len_dist`` as
  ``fixed:N``, ``uniform:A:B`` (integers, both ends included) or ``lognormal:MEAN:CV``;
  ``shared_prompt_len`` (a system prompt every request starts with; prefix caching keeps it).
* scheduler: ``max_num_seqs`` (256), ``max_num_batched_tokens`` (the runtime's prefill chunk, else
  8192), ``chunked_prefill`` (true), ``block_size`` (16 tokens), ``num_scheduler_steps`` (1; vLLM
  0.6's multi-step scheduling: once decoding, the scheduler runs N decode steps before it looks at
  the queue again, so a new request waits for the block to end), ``acceptance_sd``
  (spread of the per-request acceptance α_i ~ Beta with mean α; 0.05), ``seed`` (0).
  A γ schedule by running sequences is the record's ``gamma_schedule`` (the deployment's).
* deployment under load: ``replicas`` (1), ``prefill_instances`` / ``decode_instances``
  (disaggregated; both or neither), ``slo_ttft_s``, ``slo_tpot_s``, ``slo_percentile`` (99).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, fields

import numpy as np

from costmodel.errors import InputError, suggest

SRC = "workload"


@dataclass(frozen=True)
class Workload:
    request_rate: float = math.inf
    arrival: str = "poisson"
    arrival_cv: float = 1.0
    num_requests: int | None = None
    duration_s: float | None = None
    max_concurrency: int | None = None
    prompt_len: int | None = None
    gen_len: int | None = None
    prompt_len_dist: str | None = None
    gen_len_dist: str | None = None
    shared_prompt_len: int = 0
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    chunked_prefill: bool = True
    block_size: int = 16
    num_scheduler_steps: int = 1
    acceptance_sd: float = 0.05
    seed: int = 0
    replicas: int = 1
    prefill_instances: int = 0
    decode_instances: int = 0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_percentile: float = 99.0

    def replace(self, **kw) -> "Workload":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(kw)
        return Workload(**d)

    @property
    def disaggregated(self) -> bool:
        return self.prefill_instances > 0


WORKLOAD_FIELDS = tuple(f.name for f in fields(Workload))


def _num(name, v, lo=None, hi=None, integer=False, allow_inf=False):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"not a number: {v!r}", source=SRC, field=name) from None
    if math.isnan(x) or (math.isinf(x) and not allow_inf):
        raise InputError(f"must be finite, got {v!r}", source=SRC, field=name)
    if integer and not math.isinf(x):
        if x != int(x):
            raise InputError(f"must be a whole number, got {v!r}", source=SRC, field=name)
        x = int(x)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise InputError(f"out of range: {v!r}", source=SRC, field=name,
                         allowed=f"{lo if lo is not None else '-inf'} .. {hi if hi is not None else 'inf'}")
    return x


def parse_dist(name, text):
    """``fixed:N``, ``uniform:A:B`` or ``lognormal:MEAN:CV`` -> a tuple; errors name the field."""
    allowed = "fixed:N, uniform:A:B (1 <= A <= B), lognormal:MEAN:CV (MEAN >= 1, CV > 0)"
    parts = str(text).strip().lower().split(":")
    kind = parts[0]
    try:
        if kind == "fixed" and len(parts) == 2:
            return ("fixed", _num(name, parts[1], 1, 1 << 22, integer=True))
        if kind == "uniform" and len(parts) == 3:
            a, b = (_num(name, p, 1, 1 << 22, integer=True) for p in parts[1:])
            if a <= b:
                return ("uniform", a, b)
        if kind == "lognormal" and len(parts) == 3:
            m, cv = _num(name, parts[1], 1, 1 << 22), _num(name, parts[2], 1e-6, 100)
            return ("lognormal", m, cv)
    except InputError:
        pass
    raise InputError(f"bad length distribution {text!r}", source=SRC, field=name, allowed=allowed)


def _bool(name, v):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise InputError(f"not a boolean: {v!r}", source=SRC, field=name, allowed="true, false")


def parse_workload(data: dict) -> Workload:
    """Workload fields (strings or numbers) -> Workload; each bad value is an InputError."""
    d = {}
    for k, v in data.items():
        if k not in WORKLOAD_FIELDS:
            raise InputError(f"unknown workload field{suggest(k, WORKLOAD_FIELDS)}", source=SRC, field=k)
        if v is None or (isinstance(v, str) and not v.strip()):
            continue
        d[k] = v
    out = {}
    ints = {"num_requests": (1, 10_000_000), "max_concurrency": (1, 1 << 20), "prompt_len": (1, 1 << 22),
            "gen_len": (1, 1 << 22), "shared_prompt_len": (0, 1 << 22), "max_num_seqs": (1, 4096),
            "max_num_batched_tokens": (1, 1 << 20), "block_size": (1, 1024),
            "num_scheduler_steps": (1, 256), "seed": (0, 2 ** 32 - 1),
            "replicas": (1, 4096), "prefill_instances": (0, 4096), "decode_instances": (0, 4096)}
    for k, (lo, hi) in ints.items():
        if k in d:
            out[k] = _num(k, d[k], lo, hi, integer=True)
    if "request_rate" in d:
        out["request_rate"] = _num("request_rate", d["request_rate"], 1e-9, None, allow_inf=True)
    for k, lo, hi in (("arrival_cv", 1e-3, 100.0), ("duration_s", 1e-6, 1e8), ("slo_ttft_s", 1e-9, None),
                      ("slo_tpot_s", 1e-9, None), ("acceptance_sd", 0.0, 0.5), ("slo_percentile", 1.0, 100.0)):
        if k in d:
            out[k] = _num(k, d[k], lo, hi)
    if "arrival" in d:
        a = str(d["arrival"]).strip()
        if a.lower() in ("poisson", "gamma"):
            a = a.lower()
        elif not (a.lower().endswith(".csv") or os.path.exists(a)):
            raise InputError(f"unknown arrival process {a!r}", source=SRC, field="arrival",
                             allowed="poisson, gamma (with arrival_cv), or a trace CSV path")
        out["arrival"] = a
    for k in ("prompt_len_dist", "gen_len_dist"):
        if k in d:
            out[k] = parse_dist(k, d[k])
    if "chunked_prefill" in d:
        out["chunked_prefill"] = _bool("chunked_prefill", d["chunked_prefill"])
    w = Workload(**out)
    if w.num_requests is not None and w.duration_s is not None:
        raise InputError("give num_requests or duration_s, not both", source=SRC, field="duration_s")
    if w.duration_s is not None and math.isinf(w.request_rate) and w.max_concurrency is None:
        raise InputError("duration_s needs a finite request_rate or max_concurrency (an infinite rate sends "
                         "every request at once)", source=SRC, field="request_rate")
    if (w.prefill_instances > 0) != (w.decode_instances > 0):
        raise InputError("disaggregated serving needs both prefill_instances and decode_instances",
                         source=SRC, field="decode_instances" if w.prefill_instances else "prefill_instances")
    if w.disaggregated and w.replicas != 1:
        raise InputError("replicas applies to co-located serving; give prefill_instances and "
                         "decode_instances instead", source=SRC, field="replicas")
    if w.arrival == "gamma" and "arrival_cv" not in out:
        raise InputError("gamma arrivals need arrival_cv", source=SRC, field="arrival_cv")
    return w


@dataclass
class Requests:
    """Generated requests: arrays indexed by request id, sorted by scheduled send time."""

    send_s: np.ndarray
    prompt_len: np.ndarray
    gen_len: np.ndarray
    alpha: np.ndarray          # per-request acceptance rate (nan when not speculative)


def _draw(dist, fixed, n, rng, name):
    if dist is None:
        return np.full(n, int(fixed), dtype=np.int64)
    if dist[0] == "fixed":
        return np.full(n, dist[1], dtype=np.int64)
    if dist[0] == "uniform":
        return rng.integers(dist[1], dist[2] + 1, size=n).astype(np.int64)
    mean, cv = dist[1], dist[2]
    sigma2 = math.log(1.0 + cv * cv)         # lognormal with the given mean and CV
    x = rng.lognormal(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2), size=n)
    return np.clip(np.rint(x), 1, 1 << 22).astype(np.int64)


def read_trace(path: str):
    """(arrival_s, prompt_len, gen_len) arrays from a trace CSV; errors name the file, row and column."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise InputError(f"cannot read trace: {exc.strerror}", source=path, field="arrival") from None
    need = ("arrival_s", "prompt_len", "gen_len")
    if not rows or any(c not in rows[0] for c in need):
        raise InputError("trace needs columns arrival_s,prompt_len,gen_len and at least one row", source=path,
                         field="arrival")
    t, p, g = [], [], []
    for i, r in enumerate(rows, start=2):
        src = f"{path}:{i}"
        try:
            t.append(_num("arrival_s", r["arrival_s"], 0.0))
            p.append(_num("prompt_len", r["prompt_len"], 1, 1 << 22, integer=True))
            g.append(_num("gen_len", r["gen_len"], 1, 1 << 22, integer=True))
        except InputError as exc:
            raise InputError(str(exc).replace(f"{SRC}: ", ""), source=src) from None
    order = np.argsort(np.asarray(t), kind="stable")
    return np.asarray(t)[order], np.asarray(p, dtype=np.int64)[order], np.asarray(g, dtype=np.int64)[order]


def generate(w: Workload, prompt_default: int, gen_default: int, alpha: float | None) -> Requests:
    """The requests of a run: send times (before any closed-loop gating), lengths, acceptance."""
    rng = np.random.default_rng(w.seed)
    if w.arrival not in ("poisson", "gamma"):
        t, p, g = read_trace(w.arrival)
        if w.num_requests is not None:
            t, p, g = t[:w.num_requests], p[:w.num_requests], g[:w.num_requests]
        if w.duration_s is not None:
            keep = t < w.duration_s
            t, p, g = t[keep], p[keep], g[keep]
    else:
        rate = w.request_rate
        if w.duration_s is not None:
            n = int(rate * w.duration_s * 1.2 + 10 * math.sqrt(rate * w.duration_s) + 10) if not math.isinf(rate) \
                else int(1e6)
        else:
            n = w.num_requests or 1000
        if math.isinf(rate):
            t = np.zeros(n)
        else:
            gaps = (rng.exponential(1.0 / rate, size=n) if w.arrival == "poisson"
                    else rng.gamma(1.0 / w.arrival_cv ** 2, w.arrival_cv ** 2 / rate, size=n))
            t = np.cumsum(gaps) - gaps[0]
        if w.duration_s is not None:
            t = t[t < w.duration_s]
            n = len(t)
        p = _draw(w.prompt_len_dist, w.prompt_len or prompt_default, n, rng, "prompt_len")
        g = _draw(w.gen_len_dist, w.gen_len or gen_default, n, rng, "gen_len")
    n = len(t)
    if alpha is None:
        a = np.full(n, np.nan)
    elif w.acceptance_sd > 0 and 0.0 < alpha < 1.0:
        var = min(w.acceptance_sd ** 2, alpha * (1 - alpha) * 0.99)
        k = alpha * (1 - alpha) / var - 1.0          # Beta(α·k, (1 − α)·k): mean α, variance var
        a = rng.beta(alpha * k, (1 - alpha) * k, size=n)
    else:
        a = np.full(n, float(alpha))
    if w.shared_prompt_len:
        p = np.maximum(p, w.shared_prompt_len + 1)   # the system prompt plus at least one own token
    return Requests(np.asarray(t, dtype=float), p, g, a)
