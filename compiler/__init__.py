"""rtcompile: compile response templates into specialized Python parser modules.

The pipeline, one module per stage: `frontend` (validate, lower to the IR in `ir`), `codegen`
(render the module from the jinja2 templates in `codegen/`), `cache` (compiled modules on disk),
`api` (public entry points). Generated modules run on `rtcompile.runtime` alone.
"""

from .api import ResponseParser, compile_template, load, parse_response
from .frontend import TemplateError
from .version import __version__

__all__ = [
    "ResponseParser",
    "TemplateError",
    "__version__",
    "compile_template",
    "load",
    "parse_response",
]
