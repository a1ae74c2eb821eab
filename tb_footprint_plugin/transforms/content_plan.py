"""Content-level planning (event-file rewriting, trace slimming): placeholder until the
content-level reduction lands; it plans nothing, so policies act on whole files only."""
from __future__ import annotations

from typing import List, Tuple


def plan_content(run, policy, file_actions) -> Tuple[list, List[str]]:
    """No content-level actions yet."""
    return [], []
