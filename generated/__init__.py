"""Parsers generated from the bundled templates (templates/), checked in, ready to import:

    from rtcompile.generated import qwen3
    message = qwen3.parse_response(text, prefix=prompt)

Each module needs only rtcompile.runtime (and regex). Do not edit them: `python -m rtcompile
regenerate` rewrites them from the compiler, and the tests fail when one is stale.
"""
