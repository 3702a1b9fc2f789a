"""Store benchmark: objects created one by one, a list with a label selector, paging, and a
watch following updates live without re-listing. Prints the times; nothing is asserted.

`python -m benchmarks.bench_store [--objects 100000] [--updates 10000] [--json]`
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.registry import REGISTRY

APPS = 10
SELECTOR = "app=app3,shard in (3,13,23)"
PAGE = 500


def labels(i: int) -> dict[str, str]:
    """The labels object `i` gets: one of APPS apps, one of 100 shards."""
    return {"app": f"app{i % APPS}", "shard": str(i % 100)}


def expected_matches(objects: int) -> int:
    """How many of `objects` SELECTOR picks."""
    return sum(1 for i in range(objects) if i % APPS == 3 and i % 100 in (3, 13, 23))


def timed(results: dict[str, Any], name: str, start: float) -> None:
    """Record the seconds since `start` under `name`."""
    results[f"{name}_seconds"] = round(time.monotonic() - start, 3)


def run(workdir: Path, objects: int, updates: int) -> dict[str, Any]:
    """Run the benchmark in `workdir`; returns the times and counts it measured."""
    service = ObjectService(workdir / "state.db", REGISTRY, keep_changes=max(10_000, updates))
    results: dict[str, Any] = {"objects": objects, "updates": updates}
    try:
        start = time.monotonic()
        for i in range(objects):
            body = {"metadata": {"name": f"s{i:06d}", "labels": labels(i)}, "data": {}}
            service.create(SECRETS, "default", body)
        timed(results, "create", start)

        start = time.monotonic()
        results["matched"] = len(service.list(SECRETS, None, label_selector=SELECTOR).items)
        timed(results, "list_selector", start)
        results["expected"] = expected_matches(objects)

        start = time.monotonic()
        listed, token = 0, None
        while True:
            page = service.list(SECRETS, "default", limit=PAGE, continue_token=token)
            listed, token = listed + len(page.items), page.continue_token
            if token is None:
                break
        results["paged"] = listed
        timed(results, "list_pages", start)

        results.update(follow(service, objects, updates))
    finally:
        service.close()
    return results


def follow(service: ObjectService, objects: int, updates: int) -> dict[str, Any]:
    """Update objects from one thread while a watch follows every change from another."""
    watch = service.watch(SECRETS, "default", resource_version=service.resource_version())
    results: dict[str, Any] = {}

    def writer() -> None:
        for n in range(updates):
            name = f"s{n % objects:06d}"
            patch = {"metadata": {"annotations": {"round": str(n)}}}
            service.patch(SECRETS, "default", name, patch, "merge")

    start = time.monotonic()
    thread = threading.Thread(target=writer)
    thread.start()
    seen = 0
    last_rv = 0
    while seen < updates:
        events = watch.next(timeout=30)
        if not events:
            break
        for event in events:
            rv = int(event.object["metadata"]["resourceVersion"])
            results["in_order"] = results.get("in_order", True) and rv > last_rv
            last_rv = rv
            seen += event.type == "MODIFIED"
    thread.join()
    watch.close()
    timed(results, "watch", start)
    results["seen"] = seen
    return results


def main() -> None:
    """Run the benchmark and print its times."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        results = run(Path(tmp), args.objects, args.updates)
    if args.json:
        print(json.dumps(results))
        return
    n, u = results["objects"], results["updates"]
    print(f"create {n} objects one by one: {results['create_seconds']:.2f} s")
    print(
        f"list with label selector {SELECTOR!r}: {results['list_selector_seconds']:.2f} s,"
        f" {results['matched']} items"
    )
    print(
        f"list in pages of {PAGE}: {results['list_pages_seconds']:.2f} s, {results['paged']} items"
    )
    print(f"watch following {u} updates: {results['watch_seconds']:.2f} s, saw {results['seen']}")


if __name__ == "__main__":
    main()
