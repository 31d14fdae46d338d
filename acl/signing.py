"""Request signatures: HMAC-SHA256 with the account's secret over the method, the access
key, a timestamp (ms), a nonce and the request's identifying fields. The secret never
travels; a timestamp further than the window from the broker's clock is stale; a nonce seen
within the window is a replay (a bounded cache: when full, the oldest entries go and the
window's start moves up to them, so nothing older than an evicted entry is accepted)."""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import time
from collections.abc import Callable

# gRPC metadata keys (lower case, as gRPC requires).
ACCESS_KEY_MD = "x-mq-access-key"
TIMESTAMP_MD = "x-mq-timestamp"
NONCE_MD = "x-mq-nonce"
SIGNATURE_MD = "x-mq-signature"
# The access key under which brokers sign with the cluster key (never an account's key:
# accounts cannot start with @).
CLUSTER_ACCESS_KEY = "@cluster"

DEFAULT_WINDOW_MS = 60_000
DEFAULT_NONCE_CAPACITY = 200_000
MAX_NONCE_LENGTH = 64
MAX_SIGNATURE_LENGTH = 128


class AuthError(Exception):
    """A request whose credentials cannot be accepted; the message says why."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_nonce() -> str:
    return os.urandom(12).hex()


def sign(secret: str, method: str, access_key: str, timestamp_ms: int, nonce: str,
         fields: str) -> str:
    text = f"{method}\n{access_key}\n{timestamp_ms}\n{nonce}\n{fields}".encode()
    return hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()


def credentials(access_key: str, secret: str, method: str, fields: str,
                clock: Callable[[], int] = now_ms) -> tuple[tuple[str, str], ...]:
    """The metadata of one signed request."""
    ts, nonce = clock(), new_nonce()
    return ((ACCESS_KEY_MD, access_key), (TIMESTAMP_MD, str(ts)), (NONCE_MD, nonce),
            (SIGNATURE_MD, sign(secret, method, access_key, ts, nonce, fields)))


class NonceCache:
    """Nonces seen within the window, bounded to `capacity` entries."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS,
                 capacity: int = DEFAULT_NONCE_CAPACITY) -> None:
        self.window_ms = window_ms
        self.capacity = capacity
        self._seen: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self.floor_ms = 0  # requests at or before this are refused (evicted before expiry)

    def __len__(self) -> int:
        return len(self._seen)

    def check_and_add(self, access_key: str, nonce: str, timestamp_ms: int,
                      now: int) -> None:
        if abs(now - timestamp_ms) > self.window_ms:
            raise AuthError(f"stale timestamp {timestamp_ms} (broker time {now}, window "
                            f"{self.window_ms} ms)")
        if timestamp_ms <= self.floor_ms:
            raise AuthError("timestamp older than the replay cache keeps; sign again")
        key = (access_key, nonce)
        if key in self._seen:
            raise AuthError("replayed request (nonce already used)")
        seen = self._seen
        horizon = now - self.window_ms
        while seen:  # drop expired ones (insertion order ~ arrival order)
            first_key, first_ts = next(iter(seen.items()))
            if first_ts >= horizon and len(seen) < self.capacity:
                break
            seen.popitem(last=False)
            if first_ts >= horizon:  # evicted while still in the window
                self.floor_ms = max(self.floor_ms, first_ts)
        seen[key] = timestamp_ms


class Verifier:
    """Checks a request's credentials against secrets looked up by access key."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS,
                 capacity: int = DEFAULT_NONCE_CAPACITY,
                 clock: Callable[[], int] = now_ms) -> None:
        self.nonces = NonceCache(window_ms, capacity)
        self.clock = clock

    def verify(self, secret: str, method: str, access_key: str, timestamp: str, nonce: str,
               signature: str, fields: str) -> None:
        if not timestamp.isdigit() or len(timestamp) > 16:
            raise AuthError(f"bad timestamp {timestamp[:32]!r}")
        if not 0 < len(nonce) <= MAX_NONCE_LENGTH:
            raise AuthError("missing or bad nonce")
        if not 0 < len(signature) <= MAX_SIGNATURE_LENGTH:
            raise AuthError("missing or bad signature")
        ts = int(timestamp)
        expected = sign(secret, method, access_key, ts, nonce, fields)
        if not hmac.compare_digest(expected, signature):
            raise AuthError(f"signature mismatch for access key {access_key}")
        self.nonces.check_and_add(access_key, nonce, ts, self.clock())
