"""Regenerating the checked-in parsers in generated/: one module per bundled template in templates/.

`regenerate()` rewrites them from the current compiler; `regenerate(write=False)` only reports the
ones that differ, which is what CI and the golden test check, so they can never go stale silently.
"""

from __future__ import annotations

from pathlib import Path

from . import api
from .library import list_templates, template_for


def generated_dir() -> Path:
    import rtcompile.generated

    return Path(rtcompile.generated.__file__).parent


def expected_sources() -> dict[str, str]:
    """Module name -> the source the compiler emits now, for every bundled template."""
    out = {}
    for entry in list_templates():
        name = entry["name"]
        if not name.isidentifier():
            raise ValueError(f"bundled template name {name!r} is not a valid module name")
        out[name] = api.compile_template(template_for(name), origin=f"templates/{entry['file']}")
    return out


def regenerate(write: bool = True) -> list[str]:
    """Names of the modules that differed (and were rewritten, if `write`)."""
    from .cache import FileSystem, user_file_mode

    directory = generated_dir()
    stale = []
    for name, source in expected_sources().items():
        path = directory / f"{name}.py"
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != source:
            stale.append(name)
            if write:
                FileSystem().write_atomic(path, source, mode=user_file_mode())
    return stale
