"""Generate the Python protocol package from proto/tamto/v1/*.proto.

Run `python scripts/generate_protos.py` to regenerate, or with `--check` to fail
when the committed code differs from what the contracts generate (CI runs this).
Generated code lands in libs/protocol/src/tamto_protocol/v1/ and is never
edited by hand: imports are rewritten from `tamto.v1` to `tamto_protocol.v1`
so the package is importable without a top-level `tamto` namespace. Besides the
messages' `.pyi` stubs (protoc's own), mypy-protobuf's plugin (a dev dependency)
writes typed `*_pb2_grpc.pyi` stubs, so mypy checks servicers and stub calls.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "libs" / "protocol" / "src" / "tamto_protocol" / "v1"
_IMPORT = re.compile(r"^from tamto\.v1 import", re.MULTILINE)


def generate(into: Path) -> None:
    """Run protoc for every contract into `into` (a package directory)."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.glob("tamto/v1/*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    beside = Path(sys.executable).parent / "protoc-gen-mypy_grpc"
    grpc_stubs = str(beside) if beside.exists() else shutil.which("protoc-gen-mypy_grpc")
    if grpc_stubs is None:
        raise SystemExit("protoc-gen-mypy_grpc is missing: install mypy-protobuf (dev)")
    with tempfile.TemporaryDirectory() as raw:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            f"--plugin=protoc-gen-mypy_grpc={grpc_stubs}",
            f"--mypy_grpc_out={raw}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        into.mkdir(parents=True, exist_ok=True)
        for src in sorted((Path(raw) / "tamto" / "v1").iterdir()):
            text = _IMPORT.sub("from tamto_protocol.v1 import", src.read_text())
            (into / src.name).write_text(text)
    (into / "__init__.py").write_text('"""Generated from proto/tamto/v1. Do not edit."""\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args()
    if not args.check:
        if OUT.exists():
            shutil.rmtree(OUT)
        generate(OUT)
        print(f"generated {OUT.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as fresh:
        generate(Path(fresh))
        cmp = filecmp.dircmp(fresh, OUT) if OUT.exists() else None
        stale = cmp is None or cmp.left_only or cmp.right_only or cmp.diff_files
        if stale:
            detail = (
                "missing"
                if cmp is None
                else sorted(cmp.left_only + cmp.right_only + cmp.diff_files)
            )
            print(f"generated protocol code is stale ({detail}); run scripts/generate_protos.py")
            return 1
    print("generated protocol code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
