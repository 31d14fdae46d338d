#!/usr/bin/env bash
# Regenerate the Python modules of proto/mqcluster/v1/*.proto into mqproto/.
#
#   scripts/gen_proto.sh            # writes mqproto/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py
#   scripts/gen_proto.sh OUT_DIR    # writes them into OUT_DIR instead
#
# Uses $PYTHON, else the repository's .venv/bin/python, else python3; that
# interpreter needs grpcio-tools. protoc writes `from mqcluster.v1 import x_pb2`;
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
proto_package="mqcluster/v1"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

cd "$proto_root"
proto_files=("$proto_package"/*.proto)
"$PYTHON" -m grpc_tools.protoc \
    --proto_path=. \
    --python_out="$work_dir" \
    --pyi_out="$work_dir" \
    --grpc_python_out="$work_dir" \
    "${proto_files[@]}"

rm -f "$out_dir"/*_pb2.py "$out_dir"/*_pb2.pyi "$out_dir"/*_pb2_grpc.py
for generated in "$work_dir/$proto_package"/*_pb2*.py*; do
    target="$out_dir/$(basename "$generated")"
    if [[ "$generated" == *.pyi ]]; then
        echo "# ruff: noqa" > "$target"
    else
        : > "$target"
    fi
    sed -e 's/^from mqcluster\.v1 import /from . import /' "$generated" >> "$target"
done
