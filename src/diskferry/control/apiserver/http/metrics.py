"""The API's Prometheus metrics: requests by verb, resource and code, latency, objects."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable

BUCKETS = (0.005, 0.025, 0.1, 0.25, 1.0, 5.0, 30.0)
Labels = tuple[str, str, str]  # verb, resource, code


def _labels(verb: str, resource: str, code: str | None = None) -> str:
    pairs = [f'verb="{verb}"', f'resource="{resource}"']
    if code is not None:
        pairs.append(f'code="{code}"')
    return ",".join(pairs)


class Metrics:
    """Counts and latencies of the requests served; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[Labels] = Counter()
        self._buckets: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self._sums: Counter[tuple[str, str]] = Counter()
        self._counts: Counter[tuple[str, str]] = Counter()

    def observe(self, verb: str, resource: str, code: int, seconds: float) -> None:
        """Count one request and its latency."""
        with self._lock:
            self._requests[(verb, resource, str(code))] += 1
            key = (verb, resource)
            buckets = self._buckets[key]
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    buckets[i] += 1
            self._sums[key] += seconds
            self._counts[key] += 1

    def text(self, objects: Callable[[], dict[str, int]], watches: int) -> str:
        """Every metric in the Prometheus text format; `objects` counts the stored objects."""
        name = "diskferry_api_requests_total"
        out = [f"# HELP {name} Requests answered.", f"# TYPE {name} counter"]
        with self._lock:
            for (verb, resource, code), n in sorted(self._requests.items()):
                out.append(f"{name}{{{_labels(verb, resource, code)}}} {n}")
            name = "diskferry_api_request_duration_seconds"
            out += [f"# HELP {name} Time to answer a request.", f"# TYPE {name} histogram"]
            for key in sorted(self._counts):
                labels = _labels(*key)
                for bound, n in zip(BUCKETS, self._buckets[key], strict=True):
                    out.append(f'{name}_bucket{{{labels},le="{bound}"}} {n}')
                out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self._counts[key]}')
                out.append(f"{name}_sum{{{labels}}} {self._sums[key]:.6f}")
                out.append(f"{name}_count{{{labels}}} {self._counts[key]}")
        name = "diskferry_api_watches"
        out += [f"# HELP {name} Watches open.", f"# TYPE {name} gauge", f"{name} {watches}"]
        name = "diskferry_objects"
        out += [f"# HELP {name} Objects stored, by kind.", f"# TYPE {name} gauge"]
        for kind, n in sorted(objects().items()):
            out.append(f'{name}{{kind="{kind}"}} {n}')
        return "\n".join(out) + "\n"
