"""kernel/ is pure: it imports nothing from Django, the store or any I/O module."""

import ast
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parents[2] / "headgate_django" / "kernel"
ALLOWED_PROJECT_IMPORTS = {"headgate_django.exceptions", "headgate_django.kernel"}
FORBIDDEN_STDLIB = {"socket", "sqlite3", "subprocess", "urllib", "http", "os", "shutil"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(KERNEL.glob("*.py")), ids=lambda p: p.name)
def test_kernel_module_is_pure(path: Path):
    for name in _imports(path):
        root = name.split(".")[0]
        assert root != "django", f"{path.name} imports {name}"
        assert root not in FORBIDDEN_STDLIB, f"{path.name} imports {name}"
        if root == "headgate_django":
            assert any(name == a or name.startswith(a + ".") for a in ALLOWED_PROJECT_IMPORTS), (
                f"{path.name} imports {name}"
            )
