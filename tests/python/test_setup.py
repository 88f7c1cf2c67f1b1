"""scripts/setup and the system's Python: pip never installs into a Python that the system's
package manager manages (PEP 668) without being asked to and saying so. Run against Debian's own
python3 with pip replaced by a recorder, so nothing is installed."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup"
SYSTEM_PYTHON = pathlib.Path("/usr/bin/python3")


def _system_python_is_managed() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    probe = (
        "import os, sys, sysconfig; print(sys.prefix == sys.base_prefix and os.path.isfile("
        "os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"
    )
    run = subprocess.run([str(SYSTEM_PYTHON), "-c", probe], capture_output=True, text=True)
    return run.stdout.strip() == "True"


def _debian_packages_installed() -> bool:
    """scripts/setup installs missing Debian packages first: with all of them there, it goes
    straight to the Python part."""
    text = SETUP.read_text()
    listed = re.search(r"^packages=\((.*?)^\)", text, re.M | re.S).group(1).split()
    for package in listed:
        run = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
        )
        if "install ok installed" not in run.stdout:
            return False
    return True


pytestmark = pytest.mark.skipif(
    not shutil.which("dpkg-query")
    or not _system_python_is_managed()
    or not _debian_packages_installed(),
    reason="needs Debian's own python3 (PEP 668: externally managed) and scripts/setup's packages",
)


def _setup(tmp_path, python: pathlib.Path, **env_vars):
    """scripts/setup with `python` as the python3 on PATH, pip recorded instead of run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "pip.log"
    (bin_dir / "python3").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> "{log}"; exit 0; fi\n'
        f'exec "{python}" "$@"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    unset = ("CI", "PTDP_PIP_BREAK_SYSTEM_PACKAGES", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(env_vars, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    run = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
        timeout=120,
    )
    pip = log.read_text().splitlines() if log.exists() else []
    return run, pip


def test_the_systems_python_is_left_alone_and_told_why(tmp_path):
    run, pip = _setup(tmp_path, SYSTEM_PYTHON)
    assert run.returncode == 0, run.stderr  # build/ptdp does not need the Python modules
    assert pip == []
    assert "NOT installing" in run.stderr and "nanobind" in run.stderr
    assert "PEP 668" in run.stderr
    assert "python3 -m venv" in run.stderr  # what to do instead
    assert "PTDP_PIP_BREAK_SYSTEM_PACKAGES=1" in run.stderr


@pytest.mark.parametrize("asked", [{"CI": "true"}, {"PTDP_PIP_BREAK_SYSTEM_PACKAGES": "1"}])
def test_break_system_packages_only_when_asked_and_said(tmp_path, asked):
    run, pip = _setup(tmp_path, SYSTEM_PYTHON, **asked)
    assert run.returncode == 0, run.stderr
    assert len(pip) == 1 and "--break-system-packages" in pip[0].split()
    assert "nanobind" in pip[0].split()
    (name, value), = asked.items()
    assert "--break-system-packages" in run.stderr and f"{name}={value}" in run.stderr
    assert "virtual environment" in run.stderr


def test_a_virtual_environment_takes_the_modules_as_is(tmp_path):
    venv = tmp_path / "venv"
    make = [str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)]
    subprocess.run(make, check=True, timeout=120)
    run, pip = _setup(tmp_path, venv / "bin" / "python3", CI="true")
    assert run.returncode == 0, run.stderr
    assert len(pip) == 1 and "--break-system-packages" not in pip[0].split()
    assert pip[0].split()[:3] == ["-m", "pip", "install"] and "nanobind" in pip[0].split()
    assert "NOT installing" not in run.stderr and "--break-system-packages" not in run.stderr
