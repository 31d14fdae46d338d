#!/usr/bin/env bash
# The compose cluster's files with whichever compose tool is installed (`docker compose`,
# else `docker-compose` v1).
#
#   compose/compose.sh [--async] [--in-network] [--monitoring] [-p PROJECT] COMMAND [ARGS...]
#   compose/compose.sh [...] wait [SECONDS]     # until every container is healthy (default 180)
#
# --async adds docker-compose.async.yml (ASYNC_MASTER + ASYNC_FLUSH), --in-network adds
# docker-compose.in-network.yml (addresses for clients in containers on the compose network),
# --monitoring adds docker-compose.monitoring.yml (Prometheus + Grafana; needs their images).
# COMMAND is any compose command: up -d, ps, logs broker-a-0, --profile analytics up -d,
# down -v, ... PROJECT defaults to $COMPOSE_PROJECT_NAME, else pyrocketmq (network
# pyrocketmq_default, volumes pyrocketmq_broker-a-0, ...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
files=(-f "$HERE/docker-compose.yml")
project=(-p "${COMPOSE_PROJECT_NAME:-pyrocketmq}")
while [ $# -gt 0 ]; do
    case "$1" in
        --async) files+=(-f "$HERE/docker-compose.async.yml"); shift ;;
        --in-network) files+=(-f "$HERE/docker-compose.in-network.yml"); shift ;;
        --monitoring) files+=(-f "$HERE/docker-compose.monitoring.yml"); shift ;;
        -p|--project-name) project=(-p "$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { sed -n '2,/^set /{/^#/p}' "$0" >&2; exit 2; }

if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif docker-compose version >/dev/null 2>&1; then
    compose=(docker-compose)
else
    echo "compose.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi
compose+=("${files[@]}" "${project[@]}")

if [ "$1" != wait ]; then
    exec "${compose[@]}" "$@"
fi

# wait: poll the project's containers until each is healthy (or running, without a check).
timeout_s="${2:-180}"
deadline=$(( $(date +%s) + timeout_s ))
while :; do
    ids="$("${compose[@]}" ps -q)"
    [ -n "$ids" ] || { echo "compose.sh wait: no containers (run up -d first)" >&2; exit 1; }
    # shellcheck disable=SC2086
    states="$(docker inspect --format \
        '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' \
        $ids)"
    waiting="$(echo "$states" | grep -v -E ' (healthy|running)$' || true)"
    if [ -z "$waiting" ]; then
        echo "$states" | sed 's|^/||'
        exit 0
    fi
    if echo "$waiting" | grep -q -E ' (unhealthy|exited|dead)$'; then
        echo "compose.sh wait: not coming up:" >&2
        echo "$waiting" | sed 's|^/||' >&2
        exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "compose.sh wait: still waiting after ${timeout_s} s:" >&2
        echo "$waiting" | sed 's|^/||' >&2
        exit 1
    fi
    sleep 1
done
