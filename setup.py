"""Build hook: ship the repository's top-level ``templates/`` and ``static/`` inside the
``headgate_django`` package of the wheel, where Django's app-directories loaders find them.
All metadata lives in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        super().run()
        for name in ("templates", "static"):
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(
                    source, Path(self.build_lib) / "headgate_django" / name, dirs_exist_ok=True
                )


setup(cmdclass={"build_py": BuildPyWithAssets})
