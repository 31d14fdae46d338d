#!/usr/bin/env bash
# Builds the compose cluster's images; safe to run again (each step is skipped when done).
#
#   compose/build-images.sh [--base IMAGE] [--quiet]
#
# 1. Base image (skipped when it exists, or with --base): a Debian bookworm root file system
#    made with debootstrap (python3, python3-venv, python3-pip), imported as
#    pyrocketmq-cluster-base:bookworm. Nothing is pulled from a registry. Needs root (or
#    sudo) and http://deb.debian.org (DEBIAN_MIRROR to change it); installs debootstrap with
#    apt-get when it is missing. --base python:3.11-slim-bookworm (or MQ_BASE_IMAGE) uses an
#    image you have instead.
# 2. Wheelhouse (skipped when the dependencies did not change): the wheels of
#    pyproject.toml's core dependencies for CPython 3.11 on manylinux, downloaded on this host
#    with pip (inside a container HTTPS to the index may fail certificate checks).
# 3. Project image pyrocketmq-cluster:<hash of its sources, wheelhouse and base>, also tagged
#    pyrocketmq-cluster:latest; skipped when that tag exists. Built from compose/Dockerfile
#    (its build stage compiles common/_native.c; the image checks common._native imports).
#    Older project images beyond the newest MQ_KEEP_IMAGES (3) are removed.
#
# The last line on stdout is the project image's tag; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BUILD_DIR="${MQ_BUILD_DIR:-$HERE/.build}"
IMAGE_REPO="${MQ_IMAGE_REPO:-pyrocketmq-cluster}"
LOCAL_BASE="pyrocketmq-cluster-base:bookworm"
BASE_IMAGE="${MQ_BASE_IMAGE:-}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Any Python >= 3.11 with pip (only for reading pyproject.toml and downloading wheels).
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
QUIET=0

while [ $# -gt 0 ]; do
    case "$1" in
        --base) BASE_IMAGE="$2"; shift 2 ;;
        --quiet) QUIET=1; shift ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        *) echo "build-images.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

say() { echo "build-images: $*" >&2; }
step_start() { STEP_T0=$(date +%s%N); }
step_done() { say "$1 ($(awk "BEGIN { printf \"%.1f\", ($(date +%s%N) - $STEP_T0) / 1e9 }") s)"; }
stamp_lines() {
    local t0 now line
    t0=$(date +%s%N)
    while IFS= read -r line; do
        now=$(date +%s%N)
        printf '%6d.%d %s\n' $(( (now - t0) / 1000000000 )) $(( (now - t0) / 100000000 % 10 )) "$line"
    done
}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

mkdir -p "$BUILD_DIR"
# One build at a time per build directory (a test session and a person may both run it).
exec 9>"$BUILD_DIR/lock"
flock 9

# -- 1. base image -----------------------------------------------------------------------------
if [ -z "$BASE_IMAGE" ]; then
    BASE_IMAGE="$LOCAL_BASE"
    if docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        say "base image $LOCAL_BASE exists"
    else
        step_start
        if ! command -v debootstrap >/dev/null; then
            say "installing debootstrap"
            as_root apt-get install -y -q debootstrap >&2 \
                || { as_root apt-get update -q >&2 && as_root apt-get install -y -q debootstrap >&2; }
        fi
        rootfs="$(mktemp -d "$BUILD_DIR/rootfs.XXXXXX")"
        trap 'as_root rm -rf "$rootfs"' EXIT
        say "debootstrap bookworm into $rootfs (about a minute)"
        as_root debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
            bookworm "$rootfs" "$DEBIAN_MIRROR" >"$BUILD_DIR/debootstrap.log" 2>&1 \
            || { tail -20 "$BUILD_DIR/debootstrap.log" >&2; exit 1; }
        # Package caches: the image's build stage runs apt-get update itself.
        as_root sh -c "rm -rf '$rootfs'/var/cache/apt/*.bin '$rootfs'/var/cache/apt/archives/*.deb \
            '$rootfs'/var/lib/apt/lists/*"
        as_root tar -C "$rootfs" -c . | docker import \
            -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$LOCAL_BASE" >/dev/null
        as_root rm -rf "$rootfs"
        trap - EXIT
        step_done "base image $LOCAL_BASE made"
    fi
fi
base_id="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null)" || {
    echo "build-images.sh: base image $BASE_IMAGE not found (no registry is used: build or" \
         "load it first)" >&2
    exit 1
}

# -- 2. wheelhouse -----------------------------------------------------------------------------
context="$BUILD_DIR/context"
wheelhouse="$context/wheelhouse"
requirements="$("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
for requirement in project["project"]["dependencies"]:
    print(requirement)
# The build stage builds the project (setup.py, common/_native.c) without an index.
print("setuptools>=68")
print("wheel")
PY
)"
arch="$(uname -m)"
if [ "$(cat "$wheelhouse/requirements.txt" 2>/dev/null)" = "$requirements" ] \
        && [ -f "$wheelhouse/.complete" ]; then
    say "wheelhouse up to date"
else
    step_start
    rm -rf "$wheelhouse"
    mkdir -p "$wheelhouse"
    # CPython 3.11 on manylinux (glibc <= 2.36, bookworm's), whatever this host's Python is.
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download --quiet --only-binary=:all: --dest "$wheelhouse" \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" \
        --platform "manylinux2014_$arch" --platform "manylinux_2_5_$arch" \
        --platform "manylinux1_$arch" $requirements >&2
    printf '%s\n' "$requirements" >"$wheelhouse/requirements.txt"
    touch "$wheelhouse/.complete"
    step_done "wheelhouse downloaded ($(ls "$wheelhouse"/*.whl | wc -l) wheels)"
fi

# -- 3. project image --------------------------------------------------------------------------
# The packages pyproject.toml installs, staged without caches and host-built extensions.
packages="$("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
print(" ".join(p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]))
PY
)"
rm -rf "$context/src"
mkdir -p "$context/src"
# shellcheck disable=SC2086
tar -C "$ROOT" -c --exclude=__pycache__ --exclude='*.pyc' --exclude='*.so' \
    pyproject.toml setup.py README.md $packages | tar -C "$context/src" -x
cp "$HERE/Dockerfile" "$context/Dockerfile"
source_hash="$( (cd "$context" && find . -type f ! -name .complete -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum; echo "$base_id") | sha256sum | cut -c1-12)"
image="$IMAGE_REPO:$source_hash"
if docker image inspect "$image" >/dev/null 2>&1; then
    say "image $image is up to date"
else
    step_start
    say "building $image from $BASE_IMAGE"
    build_log="$BUILD_DIR/docker-build.log"
    # Each line of the log is prefixed with the seconds since the build began.
    if ! docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$image" "$context" 2>&1 \
            | stamp_lines >"$build_log"; then
        tail -30 "$build_log" >&2
        echo "build-images.sh: docker build failed (whole log: $build_log)" >&2
        exit 1
    fi
    [ "$QUIET" = 1 ] || grep -E '^ *[0-9.]+ Step ' "$build_log" >&2 || true
    step_done "image $image built"
fi
docker tag "$image" "$IMAGE_REPO:latest"
# Each source change makes a new image: keep the newest few (and this one). An image a
# container still uses is not removed (no -f).
docker image ls "$IMAGE_REPO" --format '{{.CreatedAt}}|{{.Tag}}' | sort -r | cut -d'|' -f2 \
    | grep -v -x -e latest -e "$source_hash" | tail -n +"${MQ_KEEP_IMAGES:-3}" \
    | while read -r old_tag; do
        docker image rm "$IMAGE_REPO:$old_tag" >/dev/null 2>&1 \
            && say "removed the older image $IMAGE_REPO:$old_tag"
    done || true
echo "$image"
