"""What MLX Lab's native extensions share: building one once per change of what it depends
on, recording why it is or is not usable, and importing it.

Each extension's `build.py` (run by `make setup`) says how to build and check it; a failed
build or check never fails setup, and `build/status.json` says why.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def version(package: str) -> str:
    """The installed version of `package`, or "absent"."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def fingerprint(source: Path, build_script: Path, packages: tuple[str, ...], *extra: str) -> str:
    """What a build depends on: its script, CMakeLists and sources under `source`, the
    packages' versions, this Python, and `extra`; a change to any means building again."""
    digest = hashlib.sha256()
    files = [build_script, source / "CMakeLists.txt", *(source / "src").rglob("*.*")]
    for path in sorted(files):
        digest.update(path.name.encode() + path.read_bytes())
    for package in packages:
        digest.update(version(package).encode())
    digest.update(sys.version.encode())
    for item in extra:
        digest.update(item.encode())
    return digest.hexdigest()


def read_status(status: Path) -> dict:
    try:
        return json.loads(status.read_text())
    except (OSError, ValueError):
        return {}


def build_once(
    description: str,
    build_dir: Path,
    library_glob: str,
    stamp: str,
    build: Callable[[], str | None],
    check: Callable[[Path], tuple[str | None, str]],
    not_used: str,
) -> int:
    """make setup's step for one extension: build and check it unless nothing changed since
    (`stamp`) or --force. `build` returns why it failed or None; `check` returns (why it
    failed or None, what the status says it is); `not_used` names it in setup's warning, and
    a failure that says it was skipped (`why` starting "skipped: ") is not warned about."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--force", action="store_true", help="build even if nothing changed")
    args = parser.parse_args()
    status_path = build_dir / "status.json"
    if read_status(status_path).get("fingerprint") == stamp and not args.force:
        return 0
    build_dir.mkdir(exist_ok=True)
    for old in build_dir.glob(library_glob):
        old.unlink()
    started = time.monotonic()
    why, what = build(), ""
    if why is None:
        library = next(build_dir.glob(library_glob), None)
        why = "the build made no library" if library is None else None
        if library is not None:
            why, what = check(library)
    skipped = why is not None and why.startswith("skipped: ")
    status = {"ok": why is None, "reason": (why or f"built and checked{what}").removeprefix("skipped: "),
              "fingerprint": stamp, "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    status_path.write_text(json.dumps(status, indent=1) + "\n")
    if why is not None and not skipped:
        print(f"setup: {not_used} is not used: {why}", file=sys.stderr)
    return 0


def cmake(source: Path, build_dir: Path, log: Path, root: Path, *defines: str) -> str | None:
    """Configure `source` with CMake (this Python, the library into `build_dir`, `defines`)
    and build it, the output into `log`; why a step failed, or None."""
    steps = [
        ["cmake", "-S", str(source), "-B", str(build_dir / "cmake"),
         f"-DPython_EXECUTABLE={sys.executable}", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build_dir}",
         *defines],
        # Every core: the CUDA step's instances are files of their own, one a core.
        ["cmake", "--build", str(build_dir / "cmake"), f"-j{os.cpu_count() or 2}"],
    ]  # fmt: skip
    with log.open("w") as out:
        for step in steps:
            done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                return f"`{' '.join(step[:2])}` failed (see {log.relative_to(root)})"
    return None


def self_test(code: str, args: list[str], timeout: int) -> tuple[str | None, str]:
    """Run a check in a child Python; (why it failed or None, what it printed)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"the self-test did not finish in {timeout} s", ""
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return f"the self-test failed: {lines[-1]}", ""
    return None, done.stdout.strip()


def locate(
    explicit: str | None, variable: str, build_dir: Path, library_glob: str, what: str,
    unavailable: type[Exception],
) -> Path:  # fmt: skip
    """The library to load: `explicit` (a path, or "", 0 or off for none: named by
    `variable`), else the build's own while its status says it built and passed its check;
    raises `unavailable` saying why there is none. `what` names the extension."""
    if explicit is not None and explicit.strip().lower() in ("", "0", "off"):
        raise unavailable(f"{what} is turned off ({variable})")
    if explicit is not None:
        if not Path(explicit).is_file():
            raise unavailable(f"no {what.removeprefix('the ')} at {explicit}")
        return Path(explicit)
    status = read_status(build_dir / "status.json")
    if not status.get("ok"):
        why = status.get("reason") or "it was never built (make setup builds it)"
        raise unavailable(f"{what} is not built: {why}")
    found = sorted(build_dir.glob(library_glob))
    if not found:
        raise unavailable(f"{what} is missing from its build folder")
    return found[0]


def import_extension(
    name: str,
    library: Path,
    unavailable: type[Exception],
    configure: Callable[[ModuleType], None] | None = None,
) -> ModuleType:
    """Import the compiled module `name` from `library`; raises `unavailable` saying why not.
    `configure` gets the module once, when it is first imported: the libraries read no
    environment variable, so their settings' values come from there.

    `mlx.core` is imported first: the module takes its arrays (nanobind's "mlx" domain)
    and links its library.
    """
    import mlx.core  # noqa: F401

    # Once a process, as `import` would: executed again, a nanobind module registers its
    # classes again, which nanobind refuses, and the second copy comes back without them (a
    # second model loaded in one worker found no `Model` in the CUDA step).
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise unavailable(f"{library} is not a Python extension")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise unavailable(f"{library} does not load: {error}") from error
    sys.modules[name] = module
    if configure is not None:
        configure(module)
    return module
