"""Text from a file a user hands us, made safe to put into a config: OmegaConf reads it back unchanged."""
from __future__ import annotations

import re


def escape_text(text: str) -> str:
    """Text OmegaConf returns unchanged: each `${` (and the backslashes before it) escaped."""
    return re.sub(r"(\\*)\$\{", lambda match: match.group(1) * 2 + "\\${", text)
