"""Model prices and capabilities from the price map litellm ships, read without importing litellm.

litellm's package carries a JSON copy of its model map (prices per token,
``supports_response_schema``, ...). The plain HTTP wire needs two facts from
it: what an answer cost, and whether a model takes a JSON-schema
``response_format``. Importing litellm for them would cost seconds, so the
file is located with ``importlib.util.find_spec`` (which runs nothing of the
package) and parsed once (tens of milliseconds). Without litellm installed,
or for a model the map does not know, costs are None and schemas are not
forwarded under ``structured_outputs=auto``, as litellm itself would do.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from pathlib import Path
from typing import Any

_FILE = "model_prices_and_context_window_backup.json"
_lock = threading.Lock()
_map: dict[str, dict[str, Any]] | None = None


def load() -> dict[str, dict[str, Any]]:
    """The whole map, model id to its entry ({} when litellm's copy cannot be read)."""
    global _map
    with _lock:
        if _map is None:
            _map = _read()
        return _map


def _read() -> dict[str, dict[str, Any]]:
    try:
        spec = importlib.util.find_spec("litellm")
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in folders:
            path = Path(folder) / _FILE
            if path.is_file():
                data = json.loads(path.read_text(encoding="utf-8"))
                return {str(k): v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError, ImportError) as exc:
        logging.getLogger("gigaevo").debug("no model price map: %s", exc)
    return {}


def entry(model: str) -> dict[str, Any] | None:
    """The map's entry for ``model`` (``openai/gpt-4o-mini`` finds ``gpt-4o-mini``), or None."""
    table = load()
    found = table.get(model)
    if found is None and "/" in model:
        found = table.get(model.split("/", 1)[1])
    return found


def cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The price of a call in USD by the map's per-token prices, or None when it has none."""
    info = entry(model)
    if info is None:
        return None
    prompt_price = info.get("input_cost_per_token")
    completion_price = info.get("output_cost_per_token")
    if not isinstance(prompt_price, (int, float)) or not isinstance(completion_price, (int, float)):
        return None
    return prompt_tokens * float(prompt_price) + completion_tokens * float(completion_price)


def supports_response_schema(model: str) -> bool:
    """Whether the map says ``model`` accepts a JSON-schema ``response_format``."""
    info = entry(model)
    return bool(info and info.get("supports_response_schema"))
