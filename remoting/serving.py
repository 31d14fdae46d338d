"""Helpers shared by the servers of the broker and the name server (not the wire format).

- `add_servicer`: registers a gRPC servicer so that a request that does not decode (bytes
  that are not protobuf, bad UTF-8 in a string field) is answered INVALID_ARGUMENT with a
  one-line reason and logged as one line, instead of gRPC's `UNKNOWN: Unexpected
  <class 'DecodeError'>` and a traceback per request.
  A unary handler may also answer with its response already serialized (bytes).
- `RateLimitedLog`: one log line per interval for a condition that can repeat very fast (a
  flood of bad requests, accept() failing at the file-descriptor limit), with the count of
  the lines it held back.
- `log_accept_errors_briefly`: asyncio's traceback per failed accept() (at the fd limit)
  as one line per 10 s.
- `raise_nofile_limit`: the soft RLIMIT_NOFILE raised to the hard limit at process start, as
  RocketMQ's start scripts do with `ulimit -n`.
- `watch_loop_stalls`: with $MQ_LOOP_STALL_LOG_MS set, one log line per event-loop stall
  longer than that many milliseconds (a diagnostic: bench.scale reads these lines).
- `run_steps` / `run_steps_on_loop`: pure-Python work written as a generator that yields
  between slices, run through at once, or on the event loop with a turn between slices.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import os
import resource
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, TypeVar

import grpc

log = logging.getLogger(__name__)


class RateLimitedLog:
    """`log(fmt, *args)` logs at most one line per `interval_s`; a line after a quiet spell
    says how many were held back."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.level = level
        self.interval_s = interval_s
        self.clock = clock
        self.suppressed = 0
        self.total = 0
        self._next = float("-inf")

    def log(self, fmt: str, *args: object) -> bool:
        """True when the line was written."""
        self.total += 1
        now = self.clock()
        if now < self._next:
            self.suppressed += 1
            return False
        self._next = now + self.interval_s
        if self.suppressed:
            fmt += " (and %d more like it in the last %.0f s)"
            args = (*args, self.suppressed, self.interval_s)
            self.suppressed = 0
        self.logger.log(self.level, fmt, *args)
        return True


class Undecodable:
    """What the request deserializer returns for bytes that are not the request message."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _safe_deserializer(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def safe(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as e:  # protobuf's DecodeError (or anything a parser raises)
            return Undecodable(str(e).splitlines()[0] if str(e) else type(e).__name__)

    return safe


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A handler may answer with its response already serialized (bytes), e.g. a large one
    serialized in a worker thread: gRPC serializes on the event loop, holding the GIL."""

    def serializer(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return serializer


class _DecodeGuard:
    def __init__(self, logger: logging.Logger) -> None:
        self.bad_requests = RateLimitedLog(logger, interval_s=5.0)

    async def refuse(self, method: str, request: Undecodable,
                     context: grpc.aio.ServicerContext) -> None:
        self.bad_requests.log("%s: undecodable request from %s refused: %s", method,
                              context.peer(), request.reason)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"undecodable {method} request: {request.reason}")

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if handler.request_streaming or handler.request_deserializer is None:
            return handler  # no request-streaming RPC is served; left as gRPC has it
        if handler.response_serializer is not None and not handler.response_streaming:
            handler = handler._replace(  # type: ignore[attr-defined]
                response_serializer=_passing_bytes(handler.response_serializer))
        safe = _safe_deserializer(handler.request_deserializer)
        refuse = self.refuse

        def guarded(call: Any) -> Any:
            """`call` (returning a value or an awaitable), refusing an undecodable request."""
            async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if type(request) is Undecodable:
                    await refuse(method, request, context)
                result = call(request, context)
                return (await result) if inspect.isawaitable(result) else result
            return run

        if handler.unary_unary is not None:
            return handler._replace(request_deserializer=safe,  # type: ignore[attr-defined]
                                    unary_unary=guarded(handler.unary_unary))
        streaming = handler.unary_stream
        if not inspect.isasyncgenfunction(streaming):  # writes with context.write()
            return handler._replace(request_deserializer=safe,  # type: ignore[attr-defined]
                                    unary_stream=guarded(streaming))

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext
                               ) -> AsyncIterator[Any]:
            if type(request) is Undecodable:
                await refuse(method, request, context)
            async for item in streaming(request, context):
                yield item

        return handler._replace(request_deserializer=safe,  # type: ignore[attr-defined]
                                unary_stream=unary_stream)


_guards: weakref.WeakKeyDictionary[Any, _DecodeGuard] = weakref.WeakKeyDictionary()


class _Registrar:
    """Stands in for the server in a generated `add_*_to_server`: takes its handler table,
    wraps each handler and registers the result with the real server."""

    def __init__(self, server: grpc.aio.Server, guard: _DecodeGuard) -> None:
        self.server = server
        self.guard = guard
        self.registered = False

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same table comes again through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str,
                                       handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        wrapped = {name: self.guard.wrap(f"{service.rpartition('.')[2]}.{name}", h)
                   for name, h in handlers.items()}
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, wrapped),))
        self.server.add_registered_method_handlers(service, wrapped)
        self.registered = True


def add_servicer(server: grpc.aio.Server, add_to_server: Callable[[Any, Any], None],
                 servicer: Any, logger: logging.Logger | None = None) -> None:
    """`add_to_server(servicer, server)` (a generated `add_*Servicer_to_server`) with every
    request decoded safely: bytes that do not decode answer INVALID_ARGUMENT naming the
    parser's reason, and log one line on `logger` (at most one per 5 s per server)."""
    guard = _guards.get(server)
    if guard is None:  # one rate limit per server, whatever services it has
        guard = _guards[server] = _DecodeGuard(logger or log)
    registrar = _Registrar(server, guard)
    add_to_server(servicer, registrar)
    if not registrar.registered:
        raise RuntimeError(f"{add_to_server.__name__} registered no handler table")


T = TypeVar("T")


def run_steps(steps: Generator[None, None, T]) -> T:
    """The result of a step generator, run through without yielding (any thread)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def run_steps_on_loop(steps: Generator[None, None, T]) -> T:
    """The result of a step generator, run on the event loop with a loop turn between steps.
    For pure-Python work over tens of thousands of items: in a worker thread it holds the
    GIL in 5 ms turns (sys.getswitchinterval), so the loop waits up to that long each
    time it takes the GIL back, several times per loop turn; here the loop waits one
    step at most."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(0)


LOOP_STALL_ENV = "MQ_LOOP_STALL_LOG_MS"
LOOP_STALL_TICK_S = 0.005


def watch_loop_stalls(logger: logging.Logger) -> asyncio.Task[None] | None:
    """Starts, when $MQ_LOOP_STALL_LOG_MS is set, a task that wakes every 5 ms and logs
    "event loop stalled N ms (CPU meanwhile: loop thread A ms, process B ms)" when a
    wake-up came that much later than due (time the loop was held by one callback or by
    a thread holding the GIL, or the process was not scheduled: then B is much less than
    N); None when not set."""
    text = os.environ.get(LOOP_STALL_ENV, "")
    if not text:
        return None
    try:
        threshold_ms = float(text)
    except ValueError:
        logger.warning("%s=%r is not a number of milliseconds: not watching", LOOP_STALL_ENV,
                       text)
        return None
    return asyncio.get_running_loop().create_task(_watch(logger, threshold_ms),
                                                  name="watchLoopStalls")


async def _watch(logger: logging.Logger, threshold_ms: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LOOP_STALL_TICK_S
        loop_cpu, process_cpu = time.thread_time(), time.process_time()
        await asyncio.sleep(LOOP_STALL_TICK_S)
        late_ms = (loop.time() - due) * 1000
        if late_ms > threshold_ms:
            # The CPU the process used meanwhile tells a stall of its own (about as much
            # CPU as the stall: the loop, or a thread holding the GIL) from a process the
            # machine did not run (little CPU: other work had the cores).
            logger.warning("event loop stalled %.1f ms (CPU meanwhile: loop thread %.1f ms, "
                           "process %.1f ms)", late_ms, (time.thread_time() - loop_cpu) * 1000,
                           (time.process_time() - process_cpu) * 1000)


def raise_nofile_limit(logger: logging.Logger | None = None) -> tuple[int, int]:
    """Raises the soft limit on open files to the hard limit; returns (soft, hard) as they
    are afterwards. A broker holds a descriptor per connection and per store file."""
    logger = logger or log
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:  # Linux refuses more than fs.nr_open
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            logger.info("open files limit raised from %d to %d", soft, target)
            soft = target
        except (OSError, ValueError) as e:
            logger.warning("cannot raise the open files limit from %d to %d: %s", soft,
                           target, e)
    return soft, hard


_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def log_accept_errors_briefly(loop: asyncio.AbstractEventLoop,
                              logger: logging.Logger | None = None) -> None:
    """asyncio's servers retry accept() every second when it fails for lack of file
    descriptors or memory, each time handing the loop's exception handler a traceback (some
    100,000 a minute were seen at the fd limit). This logs them as one line per 10 s, with
    the open files limit; other errors go to the handler there was."""
    if getattr(loop.get_exception_handler(), "_accept_errors_briefly", False):
        return
    previous = loop.get_exception_handler()
    brief = RateLimitedLog(logger or log, logging.ERROR, interval_s=10.0)

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            brief.log("%s: %s (open files limit %s); new connections wait until some close",
                      context.get("message", "accept() failed"), exc.strerror or exc, soft)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler._accept_errors_briefly = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)
