"""Signatures and shape stability: exact counts, from the trace and the bucketing policy alone.

The compiler builds one program per static input signature, here (batch,
padded length). Given the requests in arrival order and a policy, everything
about shape stability is arithmetic, not measurement:

* distinct signatures = programs a cold deployment compiles; ``compiles`` =
  signatures x programs per signature (graph breaks give more than one);
  ``recompiles`` = compiles beyond the first signature's (the real backend
  recompiles on every new signature of a compiled function);
* warm-up = the first ``warmup`` fraction of the trace: a deployment compiles
  (or tests) those shapes before it takes traffic;
* after warm-up, a request is *served by an already-compiled NEFF* unless its
  signature occurs for the first time (a compile stall the user feels);
* a request after warm-up is a *shape nobody tested* when its signature never
  occurred during warm-up (it may have been compiled on the fly since).

Policies (``torch.neuron.shapes``) are resolved against the trace: ``max`` with
no length is the longest request rounded up to a multiple of 128, and
``buckets:auto`` lists the trace's p25, p50, p75, p90, p99 and maximum lengths,
each rounded up to a multiple of 128 (how a hand-tuned bucket list is usually
chosen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from harness.port.device import bucketing
from harness.port.traces import Request

DEFAULT_POLICIES = ("none", "multiple:128", "pow2", "buckets:auto", "max")
QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.99, 1.0)

Signature = tuple[int, int]  # (batch, padded length)


def _round_up(n: int, multiple: int = 128) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Policy:
    spec: str      # as the user wrote it ("buckets:auto", "max")
    name: str      # resolved ("buckets:384,512,1024", "max:2048")
    policy: Any    # a torch.neuron.shapes BucketPolicy


def resolve(specs: Sequence[str], requests: Sequence[Request]) -> list[Policy]:
    """Bucketing policies for this trace; ``max`` and ``buckets:auto`` take their lengths from it."""
    shapes = bucketing()
    lengths = [r.seq_len for r in requests]
    longest = max(lengths)
    resolved: list[Policy] = []
    for spec in specs:
        text = spec.strip()
        kind = text.split(":", 1)[0].strip().lower()
        if text.lower() == "max":
            text = f"max:{_round_up(longest)}"
        elif text.lower() == "buckets:auto":
            text = "buckets:" + ",".join(str(b) for b in sorted({_round_up(math.ceil(quantile(lengths, q)))
                                                                  for q in QUANTILES}))
        elif kind not in ("none", "multiple", "pow2", "buckets", "max"):
            raise ValueError(f"unknown bucketing policy {spec!r}; use none, multiple:N, pow2[:MIN], "
                             f"buckets:a,b,c, buckets:auto or max[:L]")
        policy = shapes.parse(text)
        if any(p.name == policy.name for p in resolved):
            continue  # two spellings of one policy are measured once
        resolved.append(Policy(spec=spec.strip(), name=policy.name, policy=policy))
    return resolved


def signatures(requests: Sequence[Request], policy: Policy | None) -> list[Signature | None]:
    """Each request's signature under the policy (None: longer than the policy's largest bucket).

    ``policy=None`` gives the raw shapes (batch, seq_len).
    """
    if policy is None:
        return [(r.batch, r.seq_len) for r in requests]
    overflow = bucketing().BucketOverflowError
    out: list[Signature | None] = []
    for r in requests:
        try:
            out.append((r.batch, policy.policy.bucket(r.seq_len)))
        except overflow:
            out.append(None)
    return out


def warmup_count(n: int, fraction: float) -> int:
    """Requests in the warm-up: the first floor(n x fraction)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"the warm-up fraction must be in [0, 1) (got {fraction})")
    return int(n * fraction)


def stability(sigs: Sequence[Signature | None], warmup: int, programs_per_signature: int = 1) -> dict[str, Any]:
    """Exact shape-stability counts for one policy (see the module docstring for the definitions)."""
    served = [s for s in sigs if s is not None]
    distinct = len(set(served))
    seen: set[Signature] = set()
    warm: set[Signature] = set()
    after = stalls = untested = 0
    first_seen_after: list[int] = []  # request indices that trigger a compile after warm-up
    for index, sig in enumerate(sigs):
        if sig is None:
            continue
        if index < warmup:
            warm.add(sig)
            seen.add(sig)
            continue
        after += 1
        if sig not in warm:
            untested += 1
        if sig not in seen:
            stalls += 1
            first_seen_after.append(index)
            seen.add(sig)
    return {
        "distinct_signatures": distinct,
        "compiles": distinct * programs_per_signature,
        "recompiles": max(distinct - 1, 0) * programs_per_signature,
        "warmup_signatures": len(warm),
        "requests_after_warmup": after,
        "compiles_after_warmup": stalls * programs_per_signature,
        "stall_requests": first_seen_after,
        "served_by_compiled_after_warmup": None if after == 0 else 1 - stalls / after,
        "nobody_tested": None if after == 0 else untested / after,
        "overflow": len(sigs) - len(served),
    }


def padded_fraction(requests: Sequence[Request], sigs: Sequence[Signature | None]) -> float:
    """Share of served tokens that are padding (requests the policy cannot serve are left out)."""
    real = sum(r.tokens for r, s in zip(requests, sigs) if s is not None)
    served = sum(s[0] * s[1] for s in sigs if s is not None)
    return 0.0 if served == 0 else 1 - real / served


def tokens(sig: Signature) -> int:
    return sig[0] * sig[1]


def sample(sigs: Sequence[Signature], k: int) -> list[Signature]:
    """Up to ``k`` signatures evenly spaced in token count from the smallest to the largest.

    For each of ``k`` targets on a linear grid over [min tokens, max tokens], the
    nearest signature not yet taken; the smallest and largest are always in, so
    estimates interpolate and never extrapolate.
    """
    ordered = sorted(set(sigs), key=lambda s: (tokens(s), s))
    if len(ordered) <= k:
        return ordered
    if k < 2:
        raise ValueError(f"a sample needs at least 2 signatures (the smallest and the largest); got k={k}")
    lo, hi = tokens(ordered[0]), tokens(ordered[-1])
    chosen: list[Signature] = []
    for i in range(k):
        target = lo + (hi - lo) * i / (k - 1)
        free = [s for s in ordered if s not in chosen]
        chosen.append(min(free, key=lambda s: (abs(tokens(s) - target), tokens(s))))
    return sorted(chosen, key=lambda s: (tokens(s), s))
