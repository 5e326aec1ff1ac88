"""Per-machine calibration: measured thresholds, kept in a policy file.

(Placeholder until `python -m clearpages calibrate` exists: no file is read.)
"""

from __future__ import annotations

from typing import Any


def load(cpu: Any, methods: tuple[str, ...], setting: str | None, default: Any) -> Any:
    """The calibration for this CPU, or None: none is written yet."""
    return None
