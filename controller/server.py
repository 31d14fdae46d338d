"""The controller service (RocketMQ 5's ControllerManager + DefaultBrokerHeartbeatManager):
one process (or one name server, enableControllerInNamesrv) among several, the one holding
etcd's leader key active, the others answering NOT_LEADER with its address.

The active controller keeps the groups it read from etcd and the brokers' heartbeats (in
memory only: a new leader first waits one heartbeat timeout, so that live brokers are heard
before anyone is declared dead). Every `scanInterval` it elects a new master for each group
whose master has not been heard for `heartbeatTimeout` (or that has none while a candidate
is alive). A change is written to etcd first (fenced: controller/etcd_store.py) and answered
or acted upon only once written; a refused write makes it read etcd again, and step down
when it no longer leads.

Brokers poll: each heartbeat is answered with the group's replica info (master, epochs,
SyncStateSet, the master's epoch entries), so a broker learns a new role within one
heartbeat interval of the election.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from controller import protocol as p
from controller.etcd_store import EtcdStore, EtcdUnreachable, Fenced
from controller.state import (
    DEFAULT_ELECTION_PRIORITY,
    INVALID_REQUEST,
    NOT_REGISTERED,
    ControllerError,
    LiveInfo,
    Replica,
    ReplicaSet,
    alter_sync_state_set,
    clean_broker,
    elect_master,
    register,
)

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclasses.dataclass
class ControllerConfig:
    listen: str = "127.0.0.1:0"
    advertise: str = ""  # the address brokers are sent to; "" = the bound listen address
    etcd_endpoints: str = "127.0.0.1:2379"
    etcd_prefix: str = "/mqcluster/controller"
    # A broker not heard for this long is dead (RocketMQ: controllerHeartBeatTimeoutMills
    # 10 s; brokers here heartbeat every 0.3 s).
    heartbeat_timeout_ms: int = 2000
    scan_interval_ms: int = 100  # RocketMQ: scanInactiveMasterInterval 5 s
    lease_ttl_s: int = 2  # the leader key's lease
    enable_elect_unclean_master: bool = False


@dataclasses.dataclass
class _Live:
    info: LiveInfo
    seen: float  # monotonic seconds
    max_offset: int = 0
    confirm_offset: int = 0
    epoch_entries: list[list[int]] = dataclasses.field(default_factory=list)


def _req_str(req: dict[str, Any], key: str) -> str:
    value = req.get(key)
    if not isinstance(value, str) or not value:
        raise ControllerError(INVALID_REQUEST, f"{key} is required")
    return value


def _req_int(req: dict[str, Any], key: str, default: int | None = None) -> int:
    value = req.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControllerError(INVALID_REQUEST, f"{key} must be an integer")
    return value


class Controller:
    def __init__(self, config: ControllerConfig, store: EtcdStore, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.address = config.advertise
        self.groups: dict[str, tuple[ReplicaSet, int]] = {}
        self.live: dict[tuple[str, int], _Live] = {}
        self.leading = False
        self.leading_since = 0.0
        self.known_leader = ""
        self._lock = asyncio.Lock()
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.elections = 0  # masters elected by this controller (tests, logs)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> str:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        handlers = {
            p.REGISTER: self._register, p.HEARTBEAT: self._heartbeat,
            p.ELECT_MASTER: self._elect, p.ALTER_SYNC_STATE_SET: self._alter,
            p.GET_REPLICA_INFO: self._replica_info, p.GET_METADATA: self._metadata,
            p.GET_SYNC_STATE_DATA: self._sync_state_data, p.CLEAN_BROKER_DATA: self._clean,
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(p.SERVICE, {
            name: grpc.unary_unary_rpc_method_handler(
                self._wrap(name, fn), request_deserializer=p.decode,
                response_serializer=p.encode)
            for name, fn in handlers.items()}),))
        port = server.add_insecure_port(self.config.listen)
        if port == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        host = self.config.listen.rpartition(":")[0] or "127.0.0.1"
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        self.address = self.config.advertise or f"{host}:{port}"
        await server.start()
        self._server = server
        self._tasks = [asyncio.create_task(self._lead_loop(), name="controllerLeader"),
                       asyncio.create_task(self._scan_loop(), name="controllerScan")]
        log.info("controller serving on %s, state in etcd %s under %s", self.address,
                 self.store.endpoints_text, self.config.etcd_prefix)
        return self.address

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self.leading:
            await self.store.resign()
            self.leading = False
        if self._server is not None:
            await self._server.stop(0.5)
            self._server = None
        await self.store.close()

    # -- leadership ------------------------------------------------------------------------
    async def _lead_loop(self) -> None:
        ttl = self.config.lease_ttl_s
        last_refresh = self.clock()
        while True:
            try:
                if not self.leading:
                    if await self.store.campaign(self.address, ttl):
                        async with self._lock:
                            self.groups = await self.store.load_groups()
                            self.live.clear()
                            self.leading = True
                            self.leading_since = self.clock()
                            self.known_leader = self.address
                        last_refresh = self.clock()
                        log.info("controller %s leads (term %d): %d broker groups",
                                 self.address, self.store.term, len(self.groups))
                    else:
                        self.known_leader = await self.store.leader()
                elif await self.store.keep_alive():
                    last_refresh = self.clock()
                else:
                    self._step_down("its etcd lease expired")
            except (EtcdUnreachable, Fenced) as e:
                if self.leading and self.clock() - last_refresh > ttl:
                    self._step_down(f"etcd unreachable past its lease ({e})")
                else:
                    log.warning("controller: etcd: %s", e)
            except Exception:
                log.exception("controller leadership loop")
            await asyncio.sleep(ttl / 3)

    def _step_down(self, why: str) -> None:
        if self.leading:
            log.warning("controller %s no longer leads: %s", self.address, why)
        self.leading = False
        self.store.lose_lease()

    # -- requests --------------------------------------------------------------------------
    def _wrap(self, name: str, fn: Handler) -> Callable[[dict[str, Any], Any],
                                                       Awaitable[dict[str, Any]]]:
        async def handle(request: dict[str, Any], _context: Any) -> dict[str, Any]:
            if not self.leading and name != p.GET_METADATA:
                return {"code": p.NOT_LEADER, "remark": "not the active controller",
                        "leader": self.known_leader if self.known_leader != self.address
                        else ""}
            try:
                answer = await fn(request)
            except ControllerError as e:
                return {"code": e.code, "remark": str(e)}
            except EtcdUnreachable as e:
                return {"code": p.ETCD_UNAVAILABLE, "remark": str(e)}
            except Fenced as e:
                await self._reload_after_fence()
                return {"code": p.NOT_LEADER if not self.leading else "FENCED",
                        "remark": str(e), "leader": ""}
            answer.setdefault("code", "")
            return answer
        return handle

    async def _reload_after_fence(self) -> None:
        try:
            leader = await self.store.leader()
            if leader != self.address:
                self._step_down(f"etcd's leader key names {leader or 'nobody'}")
                self.known_leader = leader
                return
            async with self._lock:
                self.groups = await self.store.load_groups()
        except Exception as e:  # EtcdUnreachable, or anything etcd answered
            log.warning("controller: cannot read etcd after a refused write: %s", e)

    async def _update(self, name: str, change: Callable[[ReplicaSet | None], ReplicaSet | None]
                      ) -> ReplicaSet | None:
        """Applies `change` to a group and writes it (fenced); the cache follows only a
        write etcd took."""
        async with self._lock:
            rs, rev = self.groups.get(name, (None, 0))
            new = change(rs)
            if new == rs:
                return rs
            new_rev = await self.store.save_group(new, name, rev)
            if new is None:
                self.groups.pop(name, None)
            else:
                self.groups[name] = (new, new_rev)
            return new

    def _live_infos(self, rs: ReplicaSet) -> dict[int, LiveInfo]:
        now = self.clock()
        timeout = self.config.heartbeat_timeout_ms / 1000
        infos = {}
        for broker_id in rs.replicas:
            live = self.live.get((rs.broker_name, broker_id))
            if live is not None and now - live.seen <= timeout:
                infos[broker_id] = live.info
        return infos

    def replica_info(self, rs: ReplicaSet) -> dict[str, Any]:
        master = rs.master
        master_live = (self.live.get((rs.broker_name, rs.master_id))
                       if rs.master_id is not None else None)
        return {
            "clusterName": rs.cluster_name, "brokerName": rs.broker_name,
            "masterId": rs.master_id, "masterAddress": master.address if master else "",
            "masterHaAddress": master.ha_address if master else "",
            "masterEpoch": rs.master_epoch,
            "syncStateSet": sorted(rs.sync_state_set),
            "syncStateSetEpoch": rs.sync_state_set_epoch,
            "masterEpochEntries": master_live.epoch_entries if master_live else [],
            "masterMaxOffset": master_live.max_offset if master_live else -1,
            "replicas": {str(i): {"address": r.address, "haAddress": r.ha_address}
                         for i, r in sorted(rs.replicas.items())},
        }

    def _record_heartbeat(self, req: dict[str, Any], broker_name: str, broker_id: int) -> None:
        entries = req.get("epochEntries") or []
        self.live[(broker_name, broker_id)] = _Live(
            LiveInfo(_req_int(req, "epoch", 0), _req_int(req, "maxOffset", 0),
                     _req_int(req, "electionPriority", DEFAULT_ELECTION_PRIORITY)),
            self.clock(), _req_int(req, "maxOffset", 0), _req_int(req, "confirmOffset", 0),
            [[int(e), int(s)] for e, s in entries] if isinstance(entries, list) else [])

    async def _register(self, req: dict[str, Any]) -> dict[str, Any]:
        cluster, name = _req_str(req, "clusterName"), _req_str(req, "brokerName")
        broker_id = _req_int(req, "brokerId")
        replica = Replica(_req_str(req, "brokerAddress"), str(req.get("haAddress", "")))
        rs = await self._update(name, lambda old: register(old, cluster, name, broker_id,
                                                           replica))
        assert rs is not None
        self._record_heartbeat(req, name, broker_id)
        if rs.master_id is None:  # no master: this broker may be it
            rs = await self._elect_and_log(name, broker_id=broker_id)
        return self.replica_info(rs)

    async def _heartbeat(self, req: dict[str, Any]) -> dict[str, Any]:
        name = _req_str(req, "brokerName")
        broker_id = _req_int(req, "brokerId")
        entry = self.groups.get(name)
        if entry is None or broker_id not in entry[0].replicas:
            raise ControllerError(NOT_REGISTERED, f"broker {name}:{broker_id} is not registered")
        self._record_heartbeat(req, name, broker_id)
        return self.replica_info(entry[0])

    async def _elect_and_log(self, name: str, *, broker_id: int | None = None,
                             designated: bool = False) -> ReplicaSet:
        outcome: list[str] = []

        def change(rs: ReplicaSet | None) -> ReplicaSet | None:
            assert rs is not None or broker_id is not None
            result = elect_master(rs, self._live_infos(rs) if rs else {}, broker_id=broker_id,
                                  designated=designated,
                                  enable_elect_unclean_master=(
                                      self.config.enable_elect_unclean_master))
            outcome.append(result.code)
            return result.replica_set
        before = self.groups.get(name, (None, 0))[0]
        rs = await self._update(name, change)
        if rs is None:
            raise ControllerError(NOT_REGISTERED, f"broker group {name} is not registered")
        if before is None or rs.master_epoch != before.master_epoch:
            if rs.master_id is not None:
                self.elections += 1
                log.info("broker group %s: master is now %d (%s), master epoch %d",
                         name, rs.master_id, rs.master.address if rs.master else "?",
                         rs.master_epoch)
            else:
                log.warning("broker group %s: master %s lost and no SyncStateSet member alive "
                            "to replace it (master epoch %d)", name,
                            before.master_id if before else None, rs.master_epoch)
        if outcome and outcome[-1] and broker_id is not None and designated:
            raise ControllerError(outcome[-1], f"no election: {outcome[-1]}")
        return rs

    async def _elect(self, req: dict[str, Any]) -> dict[str, Any]:
        name = _req_str(req, "brokerName")
        broker_id = req.get("brokerId")
        if broker_id is not None:
            broker_id = _req_int(req, "brokerId")
        rs = await self._elect_and_log(name, broker_id=broker_id,
                                       designated=bool(req.get("designateElect")))
        return self.replica_info(rs)

    async def _alter(self, req: dict[str, Any]) -> dict[str, Any]:
        name = _req_str(req, "brokerName")
        members = req.get("syncStateSet")
        if not isinstance(members, list) or not all(isinstance(i, int) for i in members):
            raise ControllerError(INVALID_REQUEST, "syncStateSet must be a list of broker ids")

        def change(rs: ReplicaSet | None) -> ReplicaSet | None:
            alive = self._live_infos(rs) if rs else {}
            return alter_sync_state_set(rs, _req_int(req, "masterId"),
                                        _req_int(req, "masterEpoch"), frozenset(members),
                                        _req_int(req, "syncStateSetEpoch"), alive)
        rs = await self._update(name, change)
        assert rs is not None
        log.info("broker group %s: SyncStateSet %s (epoch %d)", name,
                 sorted(rs.sync_state_set), rs.sync_state_set_epoch)
        return self.replica_info(rs)

    async def _replica_info(self, req: dict[str, Any]) -> dict[str, Any]:
        name = _req_str(req, "brokerName")
        entry = self.groups.get(name)
        if entry is None:
            raise ControllerError(NOT_REGISTERED, f"broker group {name} is not registered")
        return self.replica_info(entry[0])

    async def _metadata(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"controllerAddress": self.address, "leading": self.leading,
                "leader": self.address if self.leading else self.known_leader,
                "term": self.store.term, "etcd": self.store.endpoints_text}

    async def _sync_state_data(self, req: dict[str, Any]) -> dict[str, Any]:
        names = req.get("brokerNames") or sorted(self.groups)
        now = self.clock()
        out = {}
        for name in names:
            entry = self.groups.get(str(name))
            if entry is None:
                continue
            info = self.replica_info(entry[0])
            info["alive"] = {str(i): round(now - lv.seen, 3)
                             for (g, i), lv in self.live.items() if g == name}
            out[name] = info
        return {"groups": out}

    async def _clean(self, req: dict[str, Any]) -> dict[str, Any]:
        name = _req_str(req, "brokerName")
        ids = req.get("brokerIds")
        if ids is not None and not (isinstance(ids, list)
                                    and all(isinstance(i, int) for i in ids)):
            raise ControllerError(INVALID_REQUEST, "brokerIds must be a list of ids")
        await self._update(name, lambda rs: clean_broker(rs, ids) if rs else None)
        return {}

    # -- dead masters ----------------------------------------------------------------------
    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_interval_ms / 1000)
            try:
                await self._scan()
            except Exception:  # never let the scan die: the next one tries again
                log.exception("controller: scan for silent masters")

    async def _scan(self) -> None:
        """Elects a master for each group whose master is silent (or that has none while a
        candidate is alive)."""
        if not self.leading:
            return
        # A new leader has heard nobody yet: give live brokers one timeout to speak.
        if self.clock() - self.leading_since < self.config.heartbeat_timeout_ms / 1000:
            return
        for name, (rs, _) in list(self.groups.items()):
            alive = self._live_infos(rs)
            if rs.master_id is not None and rs.master_id in alive:
                continue
            if rs.master_id is None and not (set(alive) & (
                    rs.sync_state_set if not self.config.enable_elect_unclean_master
                    else set(rs.replicas))):
                continue
            try:
                await self._elect_and_log(name)
            except (ControllerError, EtcdUnreachable, Fenced) as e:
                log.warning("broker group %s: election failed: %s", name, e)
                if isinstance(e, Fenced):
                    await self._reload_after_fence()
            except Exception:
                log.exception("broker group %s: election failed", name)
