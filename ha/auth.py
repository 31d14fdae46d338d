"""The cluster key on the HA link (issue 22): a slave's hello carries an HMAC-SHA256, with
the cluster key, over who it is, its proof of data, a wall-clock timestamp and a nonce. A
master with a cluster key closes a link whose hello is missing, stale, replayed or wrong,
before any data is sent on it: a stranger cannot pose as a slave."""

from __future__ import annotations

import hashlib
import hmac

from acl.signing import AuthError, NonceCache, new_nonce, now_ms
from ha.codec import SlaveHello


def hello_mac(key: str, hello: SlaveHello, ts: int, nonce: str) -> str:
    text = (f"ha-hello\n{hello.broker_id}\n{hello.broker_name}\n{hello.broker_addr}\n"
            f"{hello.max_offset}\n{hello.tail_size}\n{hello.tail_crc}\n{ts}\n{nonce}")
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def sign_hello(hello: SlaveHello, key: str, ts: int | None = None) -> SlaveHello:
    ts = now_ms() if ts is None else ts
    nonce = new_nonce()
    return hello._replace(auth_ts=ts, auth_nonce=nonce,
                          auth_mac=hello_mac(key, hello, ts, nonce))


def verify_hello(hello: SlaveHello, key: str, nonces: NonceCache, now: int) -> None:
    """Raises AuthError when `hello` does not prove the cluster key."""
    if not hello.auth_mac:
        raise AuthError("the hello carries no cluster-key proof (set clusterKey on the "
                        "slave)")
    if not 0 < len(hello.auth_nonce) <= 64:
        raise AuthError("bad nonce in the hello")
    expected = hello_mac(key, hello, hello.auth_ts, hello.auth_nonce)
    if not hmac.compare_digest(expected, hello.auth_mac):
        raise AuthError("the hello's cluster-key proof does not match (another clusterKey?)")
    nonces.check_and_add("@ha", hello.auth_nonce, hello.auth_ts, now)
