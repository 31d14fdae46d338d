"""Server-side TLS for an asyncio.BufferedProtocol (the broker's send channel), through
memory BIOs: what asyncio's own TLS layer (`create_server(ssl=...)`, asyncio.sslproto)
does for it, with less work per read.

Why: with TLS on, a batch of 32 KiB cost the broker's event loop thread some 60-70 us more
than without (issue 22's 80 % goal was missed by batches of 32). asyncio.sslproto runs ~25
Python calls per read and write, reads records until SSLWantReadError (one exception and one
more GIL release a read: each C call into OpenSSL lets the store's threads take the GIL), and
checks flow control at every step. Here a read decrypts the records that arrived straight
into the application's buffer and stops when no input is left, and a write encrypts into
memory and hands the records to the socket in one write.

The handshake, certificate checks and cipher choice are the SSLContext's, as with asyncio;
the application sees the connection once the handshake is done (a failed or timed out
handshake closes the socket and never reaches it, as with asyncio). The transport the
application gets supports what the send channel uses: write, close, abort, is_closing,
pause_reading / resume_reading and get_extra_info ("ssl_object", "peercert", "cipher" and the
socket's keys).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Encrypted bytes read from the socket at a time: a batch of 32 KiB arrives in one read.
RAW_READ_BYTES = 64 * 1024


class TlsServerProtocol(asyncio.BufferedProtocol):
    """The socket's protocol: TLS between it and `app` (made by `app_factory`)."""

    def __init__(self, context: ssl.SSLContext,
                 app_factory: Callable[[], asyncio.BufferedProtocol],
                 handshake_timeout_s: float) -> None:
        self._context = context
        self._app = app_factory()
        self._handshake_timeout_s = handshake_timeout_s
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls: ssl.SSLObject | None = None
        self._raw: asyncio.Transport | None = None
        self._buffer = memoryview(bytearray(RAW_READ_BYTES))
        self._transport = _TlsTransport(self)
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._app_connected = False
        self._reading_paused = False
        self._closing = False

    # -- the socket's side -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        self._tls = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshake_timer = asyncio.get_running_loop().call_later(
            self._handshake_timeout_s, self._handshake_timed_out)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(self._buffer[:nbytes])
        if self._app_connected:
            self._deliver()
        elif not self._closing:
            self._handshake()

    def eof_received(self) -> bool:
        return False  # the socket closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._cancel_handshake_timer()
        self._raw = None
        if self._app_connected:
            self._app_connected = False
            self._app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._app_connected:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app_connected:
            self._app.resume_writing()

    # -- TLS --------------------------------------------------------------------------------
    def _handshake(self) -> None:
        assert self._tls is not None
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._send_outgoing()
            return
        except (ssl.SSLError, ssl.CertificateError) as e:
            # asyncio logs these at debug level only: a port scanner or a plaintext client
            # is not the broker's error. The alert, when there is one, still goes out.
            log.debug("TLS handshake with %s failed: %s", self._peer(), e)
            self._send_outgoing()
            self._abort_raw(close=True)
            return
        self._cancel_handshake_timer()
        self._send_outgoing()
        self._app_connected = True
        self._app.connection_made(self._transport)
        if not self._closing:
            self._deliver()  # records that came with the handshake's last flight

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        if not self._app_connected:
            log.debug("TLS handshake with %s timed out after %.0f s", self._peer(),
                      self._handshake_timeout_s)
            self._abort_raw(close=False)

    def _deliver(self) -> None:
        """Decrypts what arrived into the application's buffers (one buffer_updated per
        buffer filled), until no input is left or the application paused reading."""
        tls, incoming, app = self._tls, self._incoming, self._app
        assert tls is not None
        while not self._reading_paused and not self._closing:
            if not incoming.pending and not tls.pending():
                break  # reading now would only raise SSLWantReadError
            buffer = app.get_buffer(-1)
            wants = len(buffer)
            got = 0
            closed = False
            try:
                while got < wants and (incoming.pending or tls.pending()):
                    n = tls.read(wants - got, buffer[got:] if got else buffer)
                    if not n:  # close_notify
                        closed = True
                        break
                    got += n
            except ssl.SSLWantReadError:
                pass  # a record not complete yet
            except ssl.SSLError as e:
                log.debug("TLS from %s failed: %s", self._peer(), e)
                closed = True
            if got:
                app.buffer_updated(got)
            if closed:
                self._transport.close()
                return
            if got < wants:
                break
        if self._outgoing.pending:  # post-handshake messages
            self._send_outgoing()

    def _send_outgoing(self) -> None:
        if self._outgoing.pending and self._raw is not None:
            self._raw.write(self._outgoing.read())

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._tls is None:
            return
        try:
            self._tls.write(data)  # into memory: all of it
        except ssl.SSLError as e:
            log.debug("TLS to %s failed: %s", self._peer(), e)
            self._abort_raw(close=False)
            return
        self._send_outgoing()

    def _close(self) -> None:
        """close_notify, then the socket closes once what is written went out."""
        if self._closing:
            return
        self._closing = True
        if self._tls is not None and self._app_connected:
            try:
                self._tls.unwrap()
            except ssl.SSLError:
                pass  # SSLWantReadError: the peer's close_notify is not awaited
        self._send_outgoing()
        self._abort_raw(close=True)

    def _abort_raw(self, close: bool) -> None:
        self._closing = True
        self._cancel_handshake_timer()
        if self._raw is not None:
            if close:
                self._raw.close()
            else:
                self._raw.abort()

    def _pause_reading(self) -> None:
        self._reading_paused = True
        if self._raw is not None:
            self._raw.pause_reading()

    def _resume_reading(self) -> None:
        if not self._reading_paused:
            return
        self._reading_paused = False
        if self._raw is not None:
            self._raw.resume_reading()
            # records decrypted or received while paused are not announced by the socket
            asyncio.get_running_loop().call_soon(self._deliver_if_open)

    def _deliver_if_open(self) -> None:
        if self._app_connected and not self._closing:
            self._deliver()

    def _cancel_handshake_timer(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def _peer(self) -> Any:
        return self._raw.get_extra_info("peername") if self._raw is not None else None

    def _extra_info(self, name: str, default: Any) -> Any:
        tls = self._tls
        if name == "ssl_object":
            return tls
        if tls is not None and name == "peercert":
            return tls.getpeercert()
        if tls is not None and name == "cipher":
            return tls.cipher()
        if self._raw is None:
            return default
        return self._raw.get_extra_info(name, default)


class _TlsTransport(asyncio.Transport):
    """The application's transport: plaintext in and out of TlsServerProtocol."""

    def __init__(self, protocol: TlsServerProtocol) -> None:
        super().__init__()
        self._protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._protocol._write(data)

    def close(self) -> None:
        self._protocol._close()

    def abort(self) -> None:
        self._protocol._abort_raw(close=False)

    def is_closing(self) -> bool:
        return self._protocol._closing

    def pause_reading(self) -> None:
        self._protocol._pause_reading()

    def resume_reading(self) -> None:
        self._protocol._resume_reading()

    def is_reading(self) -> bool:
        return not self._protocol._reading_paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._protocol._extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        raw = self._protocol._raw
        return raw.get_write_buffer_size() if raw is not None else 0
