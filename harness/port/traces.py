"""Request traces: the shapes a deployment serves, read from a file or drawn from a named distribution.

A trace is a list of requests, each a (batch, seq_len) shape and optionally an
arrival time in seconds. Files are CSV with a header or JSONL (one object per
line); lines that are blank or start with ``#`` are skipped:

    seq_len,batch,arrival_s        {"seq_len": 412, "batch": 1, "arrival_s": 0.0}
    412,1,0.0                      {"seq_len": 97}
    97,1,0.13

``seq_len`` is required (``length``, ``seq`` and ``tokens`` are accepted
spellings); ``batch`` defaults to 1; ``arrival_s`` is all or nothing. A bad line
raises ``TraceError`` naming the file, the line and the fix.

Synthetic traces (``parse_synthetic("lognormal:n=1000,median=384")``) are
seeded, so the same spec always gives the same trace:

==========  =======================================  ============================================
kind        parameters (defaults)                    models
==========  =======================================  ============================================
fixed       length=512                               a padded batch job: one shape
uniform     low=16, high=2048                        no structure at all
lognormal   median=384, sigma=0.9, min=1, max=2048   agent tool loops: most prompts short, a heavy
                                                     right tail of long tool outputs
bimodal     short=96, long=1536, p_long=0.25,        chat turns plus document/RAG prompts
            spread=0.25, min=1, max=2048
==========  =======================================  ============================================

Every kind also takes ``n=1000``, ``batch=1``, ``seed=0`` and ``rate=0`` (mean
requests per second; with ``rate>0`` arrivals are a Poisson process).
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence


class TraceError(ValueError):
    """A trace file or a synthetic spec that cannot be read; the message names the line or parameter."""


@dataclass(frozen=True)
class Request:
    seq_len: int
    batch: int = 1
    arrival_s: float | None = None

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len


# accepted column spellings -> field
_COLUMNS = {"seq_len": "seq_len", "length": "seq_len", "seq": "seq_len", "tokens": "seq_len",
            "sequence_length": "seq_len", "batch": "batch", "batch_size": "batch", "arrival_s": "arrival_s",
            "arrival": "arrival_s", "time": "arrival_s", "timestamp": "arrival_s"}


def _positive_int(value: object, field: str, where: str) -> int:
    if isinstance(value, bool):
        raise TraceError(f"{where}: {field} must be a positive integer (got {value!r})")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        text = str(value).strip()
        try:
            number = int(text)
        except ValueError:
            raise TraceError(f"{where}: {field} must be a positive integer (got {value!r})") from None
    if number < 1:
        raise TraceError(f"{where}: {field} must be a positive integer (got {number})")
    return number


def _arrival(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: arrival_s must be a number of seconds (got {value!r})") from None
    if not math.isfinite(number) or number < 0:
        raise TraceError(f"{where}: arrival_s must be a finite number of seconds >= 0 (got {value!r})")
    return number


def _request(record: dict, where: str) -> Request:
    fields: dict[str, object] = {}
    for key, value in record.items():
        name = _COLUMNS.get(str(key).strip().lower())
        if name is None:
            continue  # extra columns (request ids, model names) are allowed and ignored
        if name in fields:
            raise TraceError(f"{where}: two columns mean {name} ({key!r} and another); keep one")
        fields[name] = value
    if fields.get("seq_len") in (None, ""):
        raise TraceError(f"{where}: no seq_len (columns: seq_len, batch, arrival_s; got {sorted(record)})")
    batch = fields.get("batch")
    arrival = fields.get("arrival_s")
    return Request(seq_len=_positive_int(fields["seq_len"], "seq_len", where),
                   batch=1 if batch in (None, "") else _positive_int(batch, "batch", where),
                   arrival_s=None if arrival in (None, "") else _arrival(arrival, where))


def _check_arrivals(requests: list[Request], source: str) -> None:
    timed = [r.arrival_s is not None for r in requests]
    if any(timed) and not all(timed):
        line = timed.index(False) if timed[0] else timed.index(True)
        raise TraceError(f"{source}: arrival_s is given for some requests but not others (request {line + 1}); "
                         f"give it on every line or on none")


def _data_lines(text: str) -> Iterable[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield number, line


def parse_csv(text: str, source: str = "<csv>") -> list[Request]:
    lines = list(_data_lines(text))
    if not lines:
        raise TraceError(f"{source}: no requests (expected a header such as 'seq_len,batch,arrival_s' and rows)")
    header_number, header_line = lines[0]
    header = next(csv.reader([header_line]))
    if not any(_COLUMNS.get(h.strip().lower()) == "seq_len" for h in header):
        raise TraceError(f"{source} line {header_number}: the first line must be a header naming seq_len "
                         f"(and optionally batch, arrival_s); got {header_line.strip()!r}")
    requests = []
    for number, line in lines[1:]:
        row = next(csv.reader([line]))
        if len(row) != len(header):
            raise TraceError(f"{source} line {number}: {len(row)} values for {len(header)} columns ({header})")
        requests.append(_request(dict(zip(header, row)), f"{source} line {number}"))
    if not requests:
        raise TraceError(f"{source}: a header but no requests")
    _check_arrivals(requests, source)
    return requests


def parse_jsonl(text: str, source: str = "<jsonl>") -> list[Request]:
    requests = []
    for number, line in _data_lines(text):
        where = f"{source} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not JSON ({e.msg}); each line must be an object like "
                             f'{{"seq_len": 412, "batch": 1}}') from None
        if not isinstance(record, dict):
            raise TraceError(f"{where}: expected a JSON object with seq_len, got {type(record).__name__}")
        requests.append(_request(record, where))
    if not requests:
        raise TraceError(f"{source}: no requests")
    _check_arrivals(requests, source)
    return requests


_READERS = {".csv": parse_csv, ".jsonl": parse_jsonl, ".ndjson": parse_jsonl, ".json": parse_jsonl}


def read(path: str | Path) -> list[Request]:
    """Requests from a CSV or JSONL file (by suffix), in file order."""
    path = Path(path)
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise TraceError(f"{path}: unknown trace format {path.suffix!r}; use .csv (with a header) or .jsonl")
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    return reader(path.read_text(encoding="utf-8"), str(path))


def to_csv(requests: Sequence[Request]) -> str:
    timed = bool(requests) and requests[0].arrival_s is not None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["seq_len", "batch"] + (["arrival_s"] if timed else []))
    for r in requests:
        writer.writerow([r.seq_len, r.batch] + ([repr(r.arrival_s)] if timed else []))
    return out.getvalue()


def to_jsonl(requests: Sequence[Request]) -> str:
    lines = []
    for r in requests:
        record: dict[str, object] = {"seq_len": r.seq_len, "batch": r.batch}
        if r.arrival_s is not None:
            record["arrival_s"] = r.arrival_s
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


_WRITERS = {".csv": to_csv, ".jsonl": to_jsonl, ".ndjson": to_jsonl, ".json": to_jsonl}


def write(path: str | Path, requests: Sequence[Request]) -> Path:
    path = Path(path)
    writer = _WRITERS.get(path.suffix.lower())
    if writer is None:
        raise TraceError(f"{path}: unknown trace format {path.suffix!r}; use .csv or .jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(writer(requests), encoding="utf-8")
    return path


# --- synthetic traces -------------------------------------------------------------------------------------------

def _clip(value: float, low: int, high: int) -> int:
    return max(low, min(high, int(round(value))))


def _fixed(rng: random.Random, p: dict[str, float]) -> int:
    return int(p["length"])


def _uniform(rng: random.Random, p: dict[str, float]) -> int:
    return rng.randint(int(p["low"]), int(p["high"]))


def _lognormal(rng: random.Random, p: dict[str, float]) -> int:
    # median of a lognormal is exp(mu): mu = ln(median)
    return _clip(rng.lognormvariate(math.log(p["median"]), p["sigma"]), int(p["min"]), int(p["max"]))


def _bimodal(rng: random.Random, p: dict[str, float]) -> int:
    mode = p["long"] if rng.random() < p["p_long"] else p["short"]
    return _clip(rng.lognormvariate(math.log(mode), p["spread"]), int(p["min"]), int(p["max"]))


_COMMON = {"n": 1000, "batch": 1, "seed": 0, "rate": 0.0}
# kind -> (draw one length, its parameters with defaults, a check of the parameters)
_KINDS: dict[str, tuple[Callable[[random.Random, dict[str, float]], int], dict[str, float],
                        Callable[[dict[str, float]], str | None]]] = {
    "fixed": (_fixed, {"length": 512}, lambda p: None if p["length"] >= 1 else "length must be >= 1"),
    "uniform": (_uniform, {"low": 16, "high": 2048},
                lambda p: None if 1 <= p["low"] <= p["high"] else "need 1 <= low <= high"),
    "lognormal": (_lognormal, {"median": 384, "sigma": 0.9, "min": 1, "max": 2048},
                  lambda p: None if p["median"] > 0 and p["sigma"] >= 0 and 1 <= p["min"] <= p["max"]
                  else "need median > 0, sigma >= 0, 1 <= min <= max"),
    "bimodal": (_bimodal, {"short": 96, "long": 1536, "p_long": 0.25, "spread": 0.25, "min": 1, "max": 2048},
                lambda p: None if 0 < p["short"] <= p["long"] and 0 <= p["p_long"] <= 1 and p["spread"] >= 0
                and 1 <= p["min"] <= p["max"] else "need 0 < short <= long, 0 <= p_long <= 1, spread >= 0, "
                                                   "1 <= min <= max"),
}


def parse_synthetic(spec: str) -> tuple[str, dict[str, float]]:
    """``"lognormal:n=1000,median=384"`` -> ("lognormal", every parameter with defaults filled in)."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in _KINDS:
        raise TraceError(f"unknown synthetic trace {kind!r}; use one of {', '.join(_KINDS)} "
                         f"(e.g. lognormal:n=1000,median=384)")
    _, defaults, check = _KINDS[kind]
    params: dict[str, float] = {**_COMMON, **defaults}
    for item in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in params:
            raise TraceError(f"bad parameter {item!r} in {spec!r}; {kind} takes "
                             f"{', '.join(f'{k}=' for k in params)}")
        try:
            params[key] = float(value)
        except ValueError:
            raise TraceError(f"parameter {key} of {spec!r} must be a number (got {value.strip()!r})") from None
    if params["n"] < 1 or not float(params["n"]).is_integer():
        raise TraceError(f"{spec!r}: n must be a positive integer")
    if params["batch"] < 1 or not float(params["batch"]).is_integer():
        raise TraceError(f"{spec!r}: batch must be a positive integer")
    if params["rate"] < 0:
        raise TraceError(f"{spec!r}: rate must be >= 0 requests per second")
    problem = check(params)
    if problem:
        raise TraceError(f"{spec!r}: {problem}")
    return kind, params


def synthetic(spec: str) -> list[Request]:
    """A seeded synthetic trace (see the module docstring for kinds and parameters)."""
    kind, params = parse_synthetic(spec)
    draw = _KINDS[kind][0]
    rng = random.Random(int(params["seed"]))
    batch = int(params["batch"])
    clock = 0.0
    requests = []
    for _ in range(int(params["n"])):
        arrival = None
        if params["rate"] > 0:
            arrival = round(clock, 6)
            clock += rng.expovariate(params["rate"])
        requests.append(Request(seq_len=draw(rng, params), batch=batch, arrival_s=arrival))
    return requests


def describe_synthetic(spec: str) -> str:
    """The spec with every parameter spelled out (what the report shows)."""
    kind, params = parse_synthetic(spec)
    return kind + ":" + ",".join(f"{k}={int(v) if float(v).is_integer() else v}" for k, v in params.items())


def in_arrival_order(requests: Sequence[Request]) -> list[Request]:
    """Requests sorted by arrival time when the trace has one (stable), else as given."""
    if requests and requests[0].arrival_s is not None:
        return sorted(requests, key=lambda r: r.arrival_s)  # type: ignore[arg-type, return-value]
    return list(requests)
