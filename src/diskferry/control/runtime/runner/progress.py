"""A worker's /progress, read over plain HTTP from its status port within a second."""

from __future__ import annotations

import http.client
import json
from typing import Any

PROGRESS_TIMEOUT = 1.0


def worker_progress(host: str, port: int) -> dict[str, Any] | None:
    """GET /progress of the worker at `host`:`port`, None when it does not answer in time."""
    conn = http.client.HTTPConnection(host, port, timeout=PROGRESS_TIMEOUT)
    try:
        conn.request("GET", "/progress")
        response = conn.getresponse()
        if response.status != 200:
            return None
        data = json.loads(response.read())
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    return data if isinstance(data, dict) else None
