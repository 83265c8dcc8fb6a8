"""Serving scenario: a discrete-event simulation of requests arriving at one on-device inference
session with a bounded wait queue and a per-request timeout.

The policy simulated is the one the source material recommends for a phone: one session (one
model instance, requests served first come first served), at most `queue_limit` requests waiting
(default 3) - a request arriving to a full queue is answered "busy" at once - and a timeout
(default 15 s, counted from arrival) after which a request is cut off, whether it is still waiting
or already generating, and counted as degraded.

Arrivals come from `poisson_arrivals` (seeded) or `load_trace` (CSV: arrival_s, prompt_tokens,
new_tokens). Service times come from a `ServiceModel`: any callable (prompt_tokens, new_tokens)
-> ServiceTime(ttft_s, total_s); `device_service_model` builds one from the device cost model.
With conversations (device/chat.py), `simulate_serving(..., admit=...)` asks `admit(request)` for
the service time at each service start instead: the conversation KV cache decides there what the
request reuses, or returns None to refuse it (past the context limit), counted as `refused`.
Identical inputs give identical results: the event order is total (time, then event kind, then
arrival index).

The work is bounded like thermal's steps: at most MAX_REQUESTS arrivals per run (a Poisson rate
and window expecting more, or a longer trace, is refused up front, naming the limit). Statistics
stream: each outcome adds to counters and to one float per latency, so the percentiles stay
exact (numpy's linear interpolation over every value) at a cost of at most 16 bytes per request
(16 MB at the limit); the per-request outcomes are kept only when asked (`keep_outcomes`, for
tests and small what-ifs). What remains is the arrivals themselves: `serve --rate 1600
--minutes 10` (960,000 requests) peaks at 330 MB RSS and takes 29 s on a 2-core Xeon. Exact at
any allowed size beats a quantile sketch here: 10^6 requests is far past what one phone session
can serve in any window asked for (at 0.2 requests/s, 58 days).
"""

from __future__ import annotations

import csv
import functools
import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harmony_ref.metrics import Metrics
from harmony_ref.units import MS_PER_S

DEFAULT_QUEUE_LIMIT = 3
DEFAULT_TIMEOUT_S = 15.0
PERCENTILES = (50, 90, 99)
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "new_tokens")
MAX_REQUESTS = 1_000_000  # arrivals per run: the event count is at most 3 per arrival

# Event kinds, in the order they are handled when they fall on the same instant: a session that
# frees up at t serves the queue before a request expiring at t is dropped, and both before an
# arrival at t is admitted (so an arrival sees the queue as it is after everything due at t).
_EV_DONE = 0
_EV_QUEUE_TIMEOUT = 1
_EV_ARRIVAL = 2


@dataclass(frozen=True)
class Request:
    arrival_s: float
    prompt_tokens: int
    new_tokens: int
    conversation: int = 0  # the conversation it belongs to (device/chat.py)


@dataclass(frozen=True)
class ServiceTime:
    """Time from start of service to the first output token, and to the last one."""

    ttft_s: float
    total_s: float

    def __post_init__(self):
        if not (0.0 <= self.ttft_s <= self.total_s) or not math.isfinite(self.total_s):
            raise ValueError(f"service time needs 0 <= ttft_s <= total_s < inf, got {self}")


ServiceModel = Callable[[int, int], ServiceTime]


@dataclass(frozen=True)
class RequestOutcome:
    request: Request
    status: str  # "completed", "busy", "timeout", "refused" (past the context limit)
    start_s: float = math.nan  # service start (nan if never started)
    end_s: float = math.nan  # completion, cut-off or rejection time
    first_token_s: float = math.nan  # absolute time of the first token, nan if none was produced

    @property
    def latency_s(self) -> float:
        return self.end_s - self.request.arrival_s

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.request.arrival_s


@dataclass
class ServeResult:
    outcomes: list[RequestOutcome]
    queue_limit: int
    timeout_s: float
    horizon_s: float  # simulated span: max(duration, last event)
    busy_time_s: float  # session occupied (serving, including work later cut off)
    max_queue_len: int
    queue_len_samples: list[int] = field(default_factory=list)  # queue length after every event
    counts: dict = field(default_factory=dict)  # status -> requests (streamed)
    latency_ms: np.ndarray = field(default_factory=lambda: np.empty(0))  # completed requests
    ttft_ms: np.ndarray = field(default_factory=lambda: np.empty(0))  # every first token

    def count(self, status: str) -> int:
        return self.counts.get(status, 0)

    @property
    def arrived(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> dict:
        """Plain numbers, units in the names. Latency percentiles are over completed requests;
        TTFT percentiles over every request that got a first token (some were cut off later);
        None when there is nothing to rank."""
        arrived = self.arrived
        out = {
            "arrived": arrived,
            "completed": self.count("completed"),
            "busy": self.count("busy"),
            "timed_out": self.count("timeout"),
            "refused": self.count("refused"),
            "busy_rate": self.count("busy") / arrived if arrived else 0.0,
            "timeout_rate": self.count("timeout") / arrived if arrived else 0.0,
            "utilisation": self.busy_time_s / self.horizon_s if self.horizon_s > 0 else 0.0,
            "max_queue_len": self.max_queue_len,
            "queue_limit": self.queue_limit,
            "timeout_s": self.timeout_s,
            "horizon_s": self.horizon_s,
        }
        lat, ttft = self.latency_ms, self.ttft_ms
        for q in PERCENTILES:
            out[f"latency_p{q}_ms"] = float(np.percentile(lat, q)) if len(lat) else None
        for q in PERCENTILES:
            out[f"ttft_p{q}_ms"] = float(np.percentile(ttft, q)) if len(ttft) else None
        return out

    def metrics(self) -> Metrics:
        """The summary as exact metrics (the simulation is deterministic for its inputs)."""
        s = self.summary()
        m = Metrics()
        for q in PERCENTILES:
            for key in (f"latency_p{q}_ms", f"ttft_p{q}_ms"):
                if s[key] is not None:
                    m.add(f"serve_{key}", s[key], "ms", "lower")
        m.add("serve_busy_rate", s["busy_rate"], "fraction", "lower")
        m.add("serve_timeout_rate", s["timeout_rate"], "fraction", "lower")
        m.add("serve_utilisation", s["utilisation"], "fraction", "none")
        return m


def simulate_serving(
    requests: Sequence[Request],
    service: ServiceModel,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    duration_s: float = 0.0,
    keep_outcomes: bool = True,
    admit: Callable[[Request], ServiceTime | None] | None = None,
) -> ServeResult:
    """Run the event loop over `requests` (any order; served by arrival time, ties by index).
    keep_outcomes=False keeps only the streamed statistics (no per-request outcomes); `admit`,
    when given, replaces `service` (see the module docstring)."""
    if len(requests) > MAX_REQUESTS:
        raise ValueError(
            f"{len(requests):,} requests: more than the limit of {MAX_REQUESTS:,} "
            "requests per serving run"
        )
    if queue_limit < 0:
        raise ValueError(f"queue_limit = {queue_limit}: must be >= 0")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s = {timeout_s}: must be > 0")
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i))
    outcomes: list[RequestOutcome | None] = [None] * len(requests) if keep_outcomes else []
    counts = {"completed": 0, "busy": 0, "timeout": 0, "refused": 0}
    latency_ms, ttft_ms = array("d"), array("d")

    def finish(i: int, outcome: RequestOutcome) -> None:
        counts[outcome.status] += 1
        if outcome.status == "completed":
            latency_ms.append(outcome.latency_s * MS_PER_S)
        if not math.isnan(outcome.first_token_s):
            ttft_ms.append(outcome.ttft_s * MS_PER_S)
        if keep_outcomes:
            outcomes[i] = outcome

    events: list[tuple[float, int, int]] = [(requests[i].arrival_s, _EV_ARRIVAL, i) for i in order]
    heapq.heapify(events)
    queue: deque[int] = deque()
    in_service: int | None = None
    service_of: dict[int, tuple[float, float, float, bool]] = {}  # start, first token, end, done
    busy_time = 0.0
    max_q = 0
    q_samples: list[int] = []
    last_t = 0.0

    def start(i: int, t: float) -> bool:
        """Serve request i from t; False when `admit` refuses it (answered at t)."""
        nonlocal in_service, busy_time
        r = requests[i]
        svc = service(r.prompt_tokens, r.new_tokens) if admit is None else admit(r)
        if svc is None:
            finish(i, RequestOutcome(r, "refused", end_s=t))
            return False
        deadline = r.arrival_s + timeout_s
        end = t + svc.total_s
        completes = end <= deadline
        stop = end if completes else deadline
        service_of[i] = (t, t + svc.ttft_s, stop, completes)
        busy_time += stop - t
        in_service = i
        heapq.heappush(events, (stop, _EV_DONE, i))
        return True

    def serve_next(t: float) -> None:
        nonlocal in_service
        in_service = None
        while queue:
            j = queue.popleft()
            if requests[j].arrival_s + timeout_s > t:
                if start(j, t):
                    return
                continue
            # Its deadline is now: it never starts (its own timeout event finds it gone).
            finish(j, RequestOutcome(requests[j], "timeout", end_s=t))

    while events:
        t, event, i = heapq.heappop(events)
        last_t = max(last_t, t)
        r = requests[i]
        if event == _EV_ARRIVAL:
            if in_service is None and not queue:
                start(i, t)
            elif len(queue) < queue_limit:
                queue.append(i)
                heapq.heappush(events, (r.arrival_s + timeout_s, _EV_QUEUE_TIMEOUT, i))
            else:
                finish(i, RequestOutcome(r, "busy", end_s=t))
        elif event == _EV_QUEUE_TIMEOUT:
            if i in queue:  # still waiting (not started): cut off
                queue.remove(i)
                finish(i, RequestOutcome(r, "timeout", end_s=t))
        else:  # _EV_DONE: finished or cut off mid-generation
            s, first, stop, completes = service_of[i]
            got_token = first <= stop
            del service_of[i]
            finish(
                i,
                RequestOutcome(
                    r,
                    "completed" if completes else "timeout",
                    start_s=s,
                    end_s=stop,
                    first_token_s=first if got_token else math.nan,
                ),
            )
            serve_next(t)
        max_q = max(max_q, len(queue))
        if keep_outcomes:
            q_samples.append(len(queue))
    if sum(counts.values()) != len(
        requests
    ):  # every arrival ends completed, busy, timed out or refused
        raise AssertionError(f"{len(requests) - sum(counts.values())} requests have no outcome")
    horizon = max(duration_s, last_t)
    return ServeResult(
        outcomes,
        queue_limit,
        timeout_s,
        horizon,
        busy_time,
        max_q,
        q_samples,
        counts,
        np.frombuffer(latency_ms, dtype=np.float64),
        np.frombuffer(ttft_ms, dtype=np.float64),
    )


def poisson_arrivals(
    rate_per_s: float,
    duration_s: float,
    seed: int = 0,
    prompt_tokens: int = 512,
    new_tokens: int = 128,
) -> list[Request]:
    """Arrivals of a Poisson process over [0, duration_s): exponential gaps from a seeded RNG."""
    if not (0 < rate_per_s < math.inf) or not (0 < duration_s < math.inf):
        raise ValueError(
            f"rate_per_s = {rate_per_s} and duration_s = {duration_s} must be finite and > 0"
        )
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed = {seed!r}: must be an int >= 0")
    expected = rate_per_s * duration_s
    if expected > MAX_REQUESTS:
        raise ValueError(
            f"{rate_per_s:g} requests/s over {duration_s:g} s is {expected:,.0f} "
            f"expected arrivals: more than the limit of {MAX_REQUESTS:,} requests "
            "per serving run (lower the rate or the window)"
        )
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    while True:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= duration_s:
            return out
        if len(out) == MAX_REQUESTS:
            raise ValueError(
                f"more than the limit of {MAX_REQUESTS:,} requests per serving run "
                f"arrived in {duration_s:g} s at {rate_per_s:g}/s"
            )
        out.append(Request(t, prompt_tokens, new_tokens))


def load_trace(path: str | Path) -> list[Request]:
    """Read a CSV trace: one request per line, `arrival_s,prompt_tokens,new_tokens`; an optional
    header line with those names; blank lines and lines starting with # are skipped. Arrival
    times must be >= 0 and non-decreasing. Errors name the file and line."""
    path = Path(path)
    out: list[Request] = []
    with path.open(newline="") as f:
        for lineno, row in enumerate(csv.reader(f), start=1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            cells = [c.strip() for c in row]
            if not out and tuple(cells) == TRACE_COLUMNS:
                continue
            where = f"{path}: line {lineno}"
            if len(out) == MAX_REQUESTS:
                raise ValueError(
                    f"{where}: more than the limit of {MAX_REQUESTS:,} requests per serving run"
                )
            if len(cells) != 3:
                raise ValueError(
                    f"{where}: expected 3 fields {TRACE_COLUMNS}, got {len(cells)}: {row!r}"
                )
            try:
                arrival = float(cells[0])
            except ValueError:
                raise ValueError(f"{where}: arrival_s = {cells[0]!r} is not a number") from None
            if not (math.isfinite(arrival) and arrival >= 0):
                raise ValueError(f"{where}: arrival_s = {cells[0]!r}: must be finite and >= 0")
            if out and arrival < out[-1].arrival_s:
                raise ValueError(
                    f"{where}: arrival_s = {arrival} is earlier than the previous "
                    f"line's {out[-1].arrival_s}: arrivals must be non-decreasing"
                )
            lengths = []
            for name, cell in zip(TRACE_COLUMNS[1:], cells[1:]):
                try:
                    v = int(cell)
                except ValueError:
                    raise ValueError(f"{where}: {name} = {cell!r} is not an integer") from None
                if v < 1:
                    raise ValueError(f"{where}: {name} = {v}: must be >= 1")
                lengths.append(v)
            out.append(Request(arrival, lengths[0], lengths[1]))
    if not out:
        raise ValueError(f"{path}: trace has no requests")
    return out


def constant_rate_service(prefill_tokens_per_s: float, decode_tokens_per_s: float) -> ServiceModel:
    """A service model with fixed prefill and decode speeds: ttft = prompt / prefill rate (+ one
    decode step), total = ttft + (new - 1) / decode rate. Used by tests and as a fallback."""

    def service(prompt_tokens: int, new_tokens: int) -> ServiceTime:
        ttft = prompt_tokens / prefill_tokens_per_s + 1.0 / decode_tokens_per_s
        return ServiceTime(ttft, ttft + (new_tokens - 1) / decode_tokens_per_s)

    return service


def device_service_model(profile, config) -> ServiceModel:
    """Service times from the device cost model: for each (prompt, new) a RunConfig like `config`
    with that scenario (context grown to fit), TTFT and end-to-end from `scenario_timing`.
    Memoised per length pair: the cost model is exact, so repeats cost nothing."""
    import dataclasses

    from harmony_ref.config import Scenario
    from harmony_ref.device.cost import scenario_timing

    base = config.scenario

    @functools.cache
    def service(prompt_tokens: int, new_tokens: int) -> ServiceTime:
        sc = Scenario(
            prompt_tokens,
            new_tokens,
            max(base.context_tokens, prompt_tokens + new_tokens),
            base.batch,
        )
        t = scenario_timing(profile, dataclasses.replace(config, scenario=sc))
        return ServiceTime(t.ttft_s, t.e2e_s)

    return service
