"""Hypothesis profiles for the whole test suite.

    ci   at least 300 examples per property (CI=true selects it); failures print a reproduction blob
    dev  a quick local run (the default)

HYPOTHESIS_PROFILE picks a profile by name and wins over CI. RTCOMPILE_EXAMPLES overrides
max_examples of whichever profile is active, for long local runs:

    RTCOMPILE_EXAMPLES=100000 python -m pytest tests/test_differential.py
"""

import os

from hypothesis import HealthCheck, settings

# Compiling a template (code generation, black, import) takes a variable, sometimes long, time per
# example, so per-example deadlines and the "too slow" check would only report machine load.
# The strategies draw whole templates, outputs and chunkings per example, which is large by design.
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=_SUPPRESSED,
)
settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SUPPRESSED,
)

_profile = os.environ.get("HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
)
_examples = os.environ.get("RTCOMPILE_EXAMPLES")
if _examples:
    settings.register_profile(
        f"{_profile}-examples", settings.get_profile(_profile), max_examples=int(_examples)
    )
    _profile = f"{_profile}-examples"
settings.load_profile(_profile)

# Compiled parsers go to a cache directory of this test session, not the user's: the suite compiles
# thousands of generated templates. (Tests of the cache itself point it elsewhere again.)
if "RTCOMPILE_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["RTCOMPILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="rtcompile-test-cache-")
    atexit.register(shutil.rmtree, os.environ["RTCOMPILE_CACHE_DIR"], True)

# Long differential runs (RTCOMPILE_EXAMPLES=100000) spend most of their time in black, which only
# lays out the generated code (black guarantees the same AST). RTCOMPILE_FUZZ_UNFORMATTED=1 skips it
# in this test process: the parsers compared are the generated code itself, unformatted. (The golden
# tests of generated/ fail in that mode, by design: run it for tests/test_differential*.py only.)
if os.environ.get("RTCOMPILE_FUZZ_UNFORMATTED") == "1":
    import black

    black.format_str = lambda source, *, mode: source
