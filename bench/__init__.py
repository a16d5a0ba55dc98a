"""rtcompile's benchmark suite: generated parsers side by side with the transformers interpreter.

Run `python -m bench` (full) or `python -m bench --quick` from the repository root; see
bench/README.md. Not part of the installed package.
"""
