"""Whether a name is a Hugging Face hub id ("owner/name"), for model and dataset paths alike."""

from __future__ import annotations

import re

# starts with a letter or digit, so "/abs", "./rel" and "~/home" paths never match
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(name: str) -> bool:
    return bool(_HUB_ID.match(name))
