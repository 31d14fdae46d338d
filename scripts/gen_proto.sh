#!/usr/bin/env bash
# Regenerate the Python modules of proto/mqcluster/v1/*.proto into mqproto/, and of the
# vendored RocketMQ 5 protocol proto/apache/rocketmq/v2/*.proto into mqproto/v2/.
#
#   scripts/gen_proto.sh            # writes mqproto/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py
#                                   # and mqproto/v2/*_pb2*.py*
#   scripts/gen_proto.sh OUT_DIR    # writes them into OUT_DIR (and OUT_DIR/v2) instead
#
# Uses $PYTHON, else the repository's .venv/bin/python, else python3; that
# interpreter needs grpcio-tools. protoc writes `from mqcluster.v1 import x_pb2`
# (`from apache.rocketmq.v2 import x_pb2`);
# those lines become `from . import x_pb2` so that `from mqproto import x_pb2`
# works without putting mqproto/ itself on sys.path. The .pyi stubs get a
# `# ruff: noqa` first line: pyproject excludes only the generated .py files.
set -euo pipefail
export LC_ALL=C  # stable file order

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-$repo/mqproto}"
mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then
        PYTHON="$repo/.venv/bin/python"
    else
        PYTHON=python3
    fi
elif [[ "$PYTHON" == */* ]]; then
    # A relative interpreter path must survive the cd below.
    PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
fi

proto_root="$repo/proto"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

# generate PROTO_PACKAGE_DIR PYTHON_PACKAGE TARGET_DIR
generate() {
    local proto_package="$1" py_package="$2" target_dir="$3"
    mkdir -p "$target_dir" "$work_dir/$proto_package"
    local proto_files=("$proto_package"/*.proto)
    (cd "$proto_root" && "$PYTHON" -m grpc_tools.protoc \
        --proto_path=. \
        --python_out="$work_dir" \
        --pyi_out="$work_dir" \
        --grpc_python_out="$work_dir" \
        "${proto_files[@]}")
    rm -f "$target_dir"/*_pb2.py "$target_dir"/*_pb2.pyi "$target_dir"/*_pb2_grpc.py
    local generated target
    for generated in "$work_dir/$proto_package"/*_pb2*.py*; do
        target="$target_dir/$(basename "$generated")"
        if [[ "$generated" == *.pyi ]]; then
            echo "# ruff: noqa" > "$target"
        else
            : > "$target"
        fi
        sed -e "s/^from ${py_package//./\\.} import /from . import /" "$generated" >> "$target"
    done
}

cd "$proto_root"
generate mqcluster/v1 mqcluster.v1 "$out_dir"
generate apache/rocketmq/v2 apache.rocketmq.v2 "$out_dir/v2"
