"""The installed distribution: one import name, typed, and a good neighbour.

These tests build the real wheel and install it into a private directory, as a
user's ``pip install`` would, then look at it from a fresh interpreter whose
working directory is not the checkout -- so nothing here can pass by importing
the source tree by accident.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it
    # builds, and the tests running beside this one (another worker) read the
    # checkout's metadata (``fore --version`` in a child started there).
    source = tmp_path_factory.mktemp("source") / "fore-runtime"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".*_cache",
            ".hypothesis",
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        timeout=TIMEOUT,
        capture_output=True,
    )
    (built,) = out.glob("fore_runtime-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel installed (without its dependencies, which this venv has) into a dir."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=TIMEOUT,
        capture_output=True,
    )
    yield target


def run_python(code: str, path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_the_wheel_has_one_top_level_name_and_ships_its_types_and_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"fore"}
    assert "fore/py.typed" in names
    assert "fore/actors/core/pooled.py" in names
    assert any(n.startswith("fore/bench/data/shell_corpus/") for n in names)
    assert not any(n.startswith(("tests/", "fore/tests/")) for n in names)


def test_fore_installs_next_to_packages_named_like_its_folders(
    installed: Path, tmp_path: Path
) -> None:
    # Roboflow's ``supervision`` (import supervision as sv), and distributions
    # called actors, messages and bench, all exist on PyPI: installed next to
    # Fore, each keeps its own name and Fore keeps working.
    for name in ("supervision", "actors", "messages", "bench"):
        package = installed / name
        package.mkdir()
        (package / "__init__.py").write_text(f"OWNER = 'not fore: {name}'\n")
    code = (
        "import supervision, actors, messages, bench\n"
        "assert {m.OWNER for m in (supervision, actors, messages, bench)} == "
        "{'not fore: supervision', 'not fore: actors', 'not fore: messages', 'not fore: bench'}\n"
        "import fore, fore.testing, fore.lowlevel\n"
        "from fore import Runtime, Session, SpeculationConfig\n"
        "import fore.supervision.cli\n"
        f"assert fore.__file__.startswith({str(installed)!r}), fore.__file__\n"
        "print(fore.__version__)\n"
    )
    done = run_python(code, installed, tmp_path)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(installed)}
    cli = subprocess.run(
        [sys.executable, "-m", "fore", "--version"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("fore ")


USER_SCRIPT = """
from pathlib import Path

from fore import Runtime, SpeculationConfig, TurnResult
from fore.testing import ScriptedModel


def ask(workspace: Path) -> str:
    model = ScriptedModel(replies=[{"text": "hello"}])
    with Runtime() as rt:
        session = rt.open_session(
            workspace=workspace, model=model, speculation=SpeculationConfig(enabled=False)
        )
        turn: TurnResult = session.submit("hi", timeout=30)
        return turn.status
"""

WRONG_SCRIPT = """
from fore import TurnResult


def status(turn: TurnResult) -> int:
    return turn.status
"""


def mypy_against(installed: Path, script: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``script``, seeing Fore only as the installed wheel."""
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    site = Path(
        subprocess.run(
            [
                str(env_dir / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=TIMEOUT,
        ).stdout.strip()
    )
    # The wheel first; then this venv's site-packages for Fore's dependencies
    # (its .pth files, among them the editable checkout's, are not processed
    # from there, so the only ``fore`` that can be found is the wheel's).
    (site / "fore_under_test.pth").write_text(f"{installed}\n{sysconfig.get_path('purelib')}\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(env_dir / "bin" / "python"),
            str(script),
        ],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_a_user_script_type_checks_under_mypy_strict_against_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    good = tmp_path / "good.py"
    good.write_text(USER_SCRIPT)
    done = mypy_against(installed, good, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "import-untyped" not in done.stdout

    # And the types are real, not Any: a wrong use is caught.
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG_SCRIPT)
    done = mypy_against(installed, wrong, tmp_path / "again")
    assert done.returncode == 1
    assert 'Incompatible return value type (got "Literal[' in done.stdout
