"""gRPC interceptors: the broker's and the name server's checks, the clients' signatures.

Server side (`ServerAuth`): a request's metadata carries the access key, a timestamp, a
nonce and the signature (acl.signing); the check runs before the handler, so a refused
request changes nothing. UNAUTHENTICATED: no, unknown or bad credentials (stale, replayed,
wrong signature); PERMISSION_DENIED: an address not allowed or a permission lacking (the
message names the account, the resource and the permission). The cluster key signs as
`@cluster` (brokers towards each other and towards the name servers) and may do anything.
The handler then serves as the request's account (acl.caller), to check what it finds (a
send-back's message, an EndTransaction's half).

Client side (`ClientAuth`): the same signature added to every call of a channel
(`aio_interceptors()` for grpc.aio channels, `intercept(channel)` for blocking ones).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

import grpc

from acl import caller
from acl.config import Account
from acl.decision import Denied, decide
from acl.resources import NAMESRV, requirement, signed_fields
from acl.signing import (
    ACCESS_KEY_MD,
    CLUSTER_ACCESS_KEY,
    NONCE_MD,
    SIGNATURE_MD,
    TIMESTAMP_MD,
    AuthError,
    Verifier,
    credentials,
)
from acl.store import AclStore
from remoting.framing import SEND_CHANNEL_AUTH_METHOD
from remoting.serving import RateLimitedLog, Undecodable

log = logging.getLogger(__name__)

ACCESS_KEY_ENV = "MQ_ACCESS_KEY"
SECRET_KEY_ENV = "MQ_SECRET_KEY"
CLUSTER_KEY_ENV = "MQ_CLUSTER_KEY"
MAX_LOGGED_DENIALS = 10_000
# Name server methods only brokers may call (with the cluster key).
NAMESRV_BROKER_METHODS = frozenset(NAMESRV + m for m in (
    "RegisterBroker", "UnregisterBroker", "WatchBrokerLink"))


def peer_host(peer: str) -> str:
    """'ipv4:127.0.0.1:5' -> '127.0.0.1'; 'ipv6:[::1]:5' -> '::1'; else ''."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return host[1:-1] if host.startswith("[") else host
    return ""


class Refusal(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ServerAuth(grpc.aio.ServerInterceptor):
    """The broker's (accounts and/or cluster key) or the name server's (cluster key, for
    `protected` methods only) check of every request."""

    def __init__(self, store: AclStore | None, cluster_key: str = "",
                 protected: Collection[str] | None = None,
                 verifier: Verifier | None = None) -> None:
        self.store = store
        self.cluster_key = cluster_key
        self.protected = protected  # None: every method
        self.verifier = verifier or Verifier()
        self.refused = 0
        self._auth_log = RateLimitedLog(log, interval_s=10.0)
        self._logged: set[str] = set()

    def check(self, method: str, request: Any, metadata: dict[str, str], peer: str
              ) -> Account | None:
        """The account the request may run as (None: the cluster key); raises Refusal when
        it may not run."""
        host = peer_host(peer)
        self._check_address(host, host or peer)
        if not metadata.get(ACCESS_KEY_MD, ""):
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                          "access control is on: the request carries no access key (give "
                          f"the client credentials, e.g. ${ACCESS_KEY_ENV} and "
                          f"${SECRET_KEY_ENV})" if self.store is not None else
                          "this name server requires the cluster key (clusterKey) for "
                          f"{method.rpartition('/')[2]}")
        need = requirement(method, request)
        account = self._verified(method, metadata, host, host or peer, need.signed_text())
        if account is not None:
            try:
                decide(account, need)
            except Denied as e:
                raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                              f"{e} for {method.rpartition('/')[2]}") from None
        return account

    def caller_of(self, account: Account | None) -> caller.Caller | None:
        """Whom a handler serves for `account` (None: unrestricted, the cluster key)."""
        store = self.store
        if account is None or store is None:
            return None
        return caller.Caller(account, lambda: store.config.accounts)

    def _check_address(self, host: str, shown_host: str) -> None:
        """Raises Refusal when the ACL's global white list leaves `host` out."""
        store = self.store
        if store is not None and not store.config.address_allowed(host):
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"client address {shown_host} is not in the ACL's "
                          "globalWhiteRemoteAddresses")

    def _verified(self, method: str, credentials_md: dict[str, str], host: str,
                  shown_host: str, fields: str) -> Account | None:
        """The account whose signature `credentials_md` carries (None for the cluster
        key), once the signature, its freshness and its nonce are checked. Raises
        Refusal."""
        access_key = credentials_md.get(ACCESS_KEY_MD, "")
        secret, account = self._secret_of(access_key, host, shown_host)
        try:
            self.verifier.verify(secret, method, access_key,
                                 credentials_md.get(TIMESTAMP_MD, ""),
                                 credentials_md.get(NONCE_MD, ""),
                                 credentials_md.get(SIGNATURE_MD, ""), fields)
        except AuthError as e:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(e)) from None
        return account

    def _secret_of(self, access_key: str, host: str, shown_host: str
                   ) -> tuple[str, Account | None]:
        """The secret that signs for `access_key` calling from `host`, and its account
        (None for the cluster key). Raises Refusal."""
        if access_key == CLUSTER_ACCESS_KEY:
            if not self.cluster_key:
                raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                              "cluster-key credentials, but no clusterKey is set here")
            return self.cluster_key, None
        store = self.store
        account = store.config.accounts.get(access_key) if store is not None else None
        if account is None:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                          f"unknown access key {access_key[:64]!r}")
        if account.white_addresses and not any(
                p.matches(host) for p in account.white_addresses):
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"account {access_key} may not call from {shown_host}")
        return account.secret_key, account

    def account_for(self, access_key: str, host: str) -> tuple[str, Account | None]:
        """The secret signing for `access_key` calling from `host` and its account (None
        for the cluster key), for a protocol that verifies its own signatures (4.x
        remoting: broker/remoting4x). Raises Refusal."""
        self._check_address(host, host)
        return self._secret_of(access_key, host, host)

    def authenticate(self, method: str, credentials_md: dict[str, str], host: str,
                     fields: str = "") -> Account | None:
        """The account of a signed connection (the send channel's AUTH frame); None for
        the cluster key. Raises Refusal."""
        self._check_address(host, host)
        return self._verified(method, credentials_md, host, host, fields)

    def log_refusal(self, method: str, peer: str, refusal: Refusal) -> None:
        self.refused += 1
        text = f"{method.rpartition('/')[2]} from {peer_host(peer) or peer} refused: {refusal}"
        if refusal.code is grpc.StatusCode.PERMISSION_DENIED:
            key = str(refusal)
            if key in self._logged:
                return
            if len(self._logged) >= MAX_LOGGED_DENIALS:
                self._logged.clear()
            self._logged.add(key)
            log.warning("%s", text)
        else:
            self._auth_log.log("%s", text)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method  # type: ignore[attr-defined]
        if handler is None or (self.protected is not None and method not in self.protected):
            return handler
        if handler.request_streaming:
            return handler  # no request-streaming RPC is served (see remoting.serving)
        metadata = {k: v for k, v in (details.invocation_metadata or ())  # type: ignore[attr-defined]
                    if isinstance(v, str)}
        check, log_refusal, caller_of = self.check, self.log_refusal, self.caller_of

        async def refuse_or_pass(request: Any, context: grpc.aio.ServicerContext) -> None:
            """Aborts the call, or lets its task serve as the request's account (each call
            has a task of its own)."""
            if type(request) is Undecodable:
                return  # the handler answers INVALID_ARGUMENT
            try:
                caller.serve_as(caller_of(check(method, request, metadata, context.peer())))
            except Refusal as r:
                log_refusal(method, context.peer(), r)
                await context.abort(r.code, str(r))

        def checked(inner: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
            """A unary-response (or context.write) handler, behind the check."""
            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await refuse_or_pass(request, context)
                result = inner(request, context)
                return (await result) if inspect.isawaitable(result) else result
            return call

        if handler.unary_unary is not None:
            return handler._replace(  # type: ignore[attr-defined]
                unary_unary=checked(handler.unary_unary))
        streaming = handler.unary_stream
        if streaming is None:
            return handler
        if not inspect.isasyncgenfunction(streaming):
            return handler._replace(unary_stream=checked(streaming))  # type: ignore[attr-defined]

        async def stream(request: Any, context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[Any]:
            await refuse_or_pass(request, context)
            async for item in streaming(request, context):
                yield item

        return handler._replace(unary_stream=stream)  # type: ignore[attr-defined]


# -- client side ---------------------------------------------------------------------------
class ClientAuth:
    """Signs each call with an access key and its secret (or the cluster key)."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError("both an access key and a secret key are needed")
        self.access_key = access_key
        self.secret_key = secret_key

    @classmethod
    def cluster(cls, cluster_key: str) -> ClientAuth | None:
        return cls(CLUSTER_ACCESS_KEY, cluster_key) if cluster_key else None

    @classmethod
    def from_env(cls, access_key: str | None = None, secret_key: str | None = None,
                 env: dict[str, str] | None = None) -> ClientAuth | None:
        """Explicit keys, else $MQ_ACCESS_KEY / $MQ_SECRET_KEY; None when neither is set."""
        env = dict(os.environ) if env is None else env
        ak = access_key or env.get(ACCESS_KEY_ENV, "")
        sk = secret_key or env.get(SECRET_KEY_ENV, "")
        if not ak and not sk:
            return None
        if not ak or not sk:
            raise ValueError(f"an access key needs its secret key and the other way round "
                             f"(${ACCESS_KEY_ENV} / ${SECRET_KEY_ENV})")
        return cls(ak, sk)

    def metadata(self, method: str | bytes, request: Any) -> tuple[tuple[str, str], ...]:
        name = method.decode() if isinstance(method, bytes) else method
        return credentials(self.access_key, self.secret_key, name,
                           signed_fields(name, request))

    def aio_interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        return [_AioUnaryUnary(self), _AioUnaryStream(self)]

    def send_channel_auth(self) -> bytes:
        """The payload of the send channel's AUTH frame (remoting/framing.py)."""
        md = dict(credentials(self.access_key, self.secret_key, SEND_CHANNEL_AUTH_METHOD, ""))
        return json.dumps({"accessKey": md[ACCESS_KEY_MD], "timestamp": md[TIMESTAMP_MD],
                           "nonce": md[NONCE_MD], "signature": md[SIGNATURE_MD]}).encode()

    def intercept(self, channel: grpc.Channel) -> grpc.Channel:
        return grpc.intercept_channel(channel, _SyncInterceptor(self))


class _Signer:
    """The interceptors' part in common: `signed` adds the call's credentials. (grpc.aio
    files an interceptor under its first matching kind only: one class per kind.)"""

    def __init__(self, auth: ClientAuth) -> None:
        self.auth = auth

    def signed(self, details: Any, request: Any) -> Any:
        signed = self.auth.metadata(details.method, request)
        existing = tuple(details.metadata or ())
        return details._replace(metadata=grpc.aio.Metadata(*existing, *signed)
                                if isinstance(details, grpc.aio.ClientCallDetails)
                                else [*existing, *signed])


class _AioUnaryUnary(_Signer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any,
                                    request: Any) -> Any:
        return await continuation(self.signed(client_call_details, request), request)


class _AioUnaryStream(_Signer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any,
                                     request: Any) -> Any:
        return await continuation(self.signed(client_call_details, request), request)


class _SyncInterceptor(_Signer, grpc.UnaryUnaryClientInterceptor,
                       grpc.UnaryStreamClientInterceptor):
    def intercept_unary_unary(self, continuation: Any, client_call_details: Any,
                              request: Any) -> Any:
        return continuation(self.signed(client_call_details, request), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any,
                               request: Any) -> Any:
        return continuation(self.signed(client_call_details, request), request)
