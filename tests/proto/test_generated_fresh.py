"""The checked-in mqproto/ modules are exactly what scripts/gen_proto.sh makes now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GEN_SCRIPT = REPO_ROOT / "scripts" / "gen_proto.sh"
CHECKED_IN = REPO_ROOT / "mqproto"
GENERATED_PATTERNS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")


def generated_files(directory: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for pattern in GENERATED_PATTERNS
        for path in directory.glob(pattern)
    }


def test_checked_in_generated_modules_are_fresh(tmp_path: Path) -> None:
    out_dir = tmp_path / "mqproto"
    subprocess.run(
        ["bash", str(GEN_SCRIPT), str(out_dir)],
        check=True, capture_output=True, timeout=60,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    for fresh_dir, checked_dir in ((out_dir, CHECKED_IN), (out_dir / "v2", CHECKED_IN / "v2")):
        fresh = generated_files(fresh_dir)
        checked_in = generated_files(checked_dir)
        assert fresh, f"gen_proto.sh generated nothing in {fresh_dir.name}"
        assert sorted(checked_in) == sorted(fresh), (
            f"{checked_dir} has missing or extra generated files: run scripts/gen_proto.sh"
        )
        stale = sorted(name for name in fresh if fresh[name] != checked_in[name])
        assert not stale, f"stale generated modules {stale}: run scripts/gen_proto.sh"


def test_imports_are_package_relative() -> None:
    for name, content in [*generated_files(CHECKED_IN).items(),
                          *generated_files(CHECKED_IN / "v2").items()]:
        text = content.decode()
        assert "from mqcluster" not in text, name
        assert "from apache" not in text, name
        assert "\nimport common_pb2" not in text, name
