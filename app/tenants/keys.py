"""API key format and hashing: keys are random, so one SHA-256 is enough and fast."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "egm_"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def display_prefix(key: str) -> str:
    return key[: len(KEY_PREFIX) + 8]
