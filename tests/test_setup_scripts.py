"""What `make setup` installs (scripts/requirements.py), the NVIDIA links a venv over a GPU
machine's Python gets (scripts/link-nvidia.py), and the wheelhouse's parts joined again on
the far side (scripts/gpu-wheelhouse.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listed(backend: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "requirements.py"), backend],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.splitlines()


def test_the_cpu_build_installs_the_dependencies_and_the_test_extra_as_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["test"]
    assert _listed("cpu") == declared


def test_the_cuda_build_swaps_the_cpu_wheel_and_the_cpu_torch_pin_for_the_cuda_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cuda = _listed("cuda")
    dropped = [line for line in _listed("cpu") if line not in cuda]
    assert [line.split(">")[0].split("=")[0] for line in dropped] == ["mlx[cpu]", "torch"]
    assert (
        cuda[-len(project["optional-dependencies"]["cuda"]) :]
        == (project["optional-dependencies"]["cuda"])
    )
    assert "xgrammar" in " ".join(cuda)  # it still needs a torch: the machine's own


def test_a_venv_over_another_python_links_its_nvidia_libraries_beside_mlx(tmp_path):
    outer = tmp_path / "outer"
    for library in ("cu13", "cudnn", "nccl"):
        (outer / "nvidia" / library / "lib").mkdir(parents=True)
    env = tmp_path / "venv"
    venv.create(env, system_site_packages=True, with_pip=False)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "outer.pth").write_text(f"{outer}\n")
    (site / "mlx").mkdir()  # the CUDA wheel's package
    (site / "nvidia" / "nccl").mkdir(parents=True)  # one of the venv's own stays its own
    run = [python, str(SCRIPTS / "link-nvidia.py")]
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout == ""
    assert (site / "nvidia" / "cu13").resolve() == (outer / "nvidia" / "cu13").resolve()
    assert (site / "nvidia" / "cudnn").is_symlink()
    assert not (site / "nvidia" / "nccl").is_symlink()
    subprocess.run(run, check=True)  # again: nothing to do, no error


def test_the_wheelhouse_parts_fit_and_join_into_the_same_wheels(tmp_path):
    wheelhouse = _module("gpu-wheelhouse")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sizes = {"big-1.0-py3-none-any.whl": 700_000, "a-1.0-py3-none-any.whl": 90_000}
    sizes |= {f"w{i}-1.0-py3-none-any.whl": 30_000 + 1000 * i for i in range(8)}
    files = {}
    for name, size in sizes.items():
        (wheels / name).write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        files[name] = {"size": size, "sha256": wheelhouse._sha256(wheels / name)}
    limit = 300 * 1024
    parts = wheelhouse._pack(tmp_path / "out", wheels, files, limit, redis=False)
    assert len(parts) >= 4  # the big wheel alone takes three
    into = tmp_path / "there"
    for part in parts:
        folder = tmp_path / "out" / part
        assert sum(f.stat().st_size for f in folder.iterdir()) <= limit
        wheelhouse.unpack_part(folder, into)
    assert sorted(p.name for p in (into / "wheels").iterdir()) == sorted(sizes)
    for name in sizes:
        assert (into / "wheels" / name).read_bytes() == (wheels / name).read_bytes()
