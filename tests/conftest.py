"""The two tiers of the suite, and hypothesis profiles.

    python -m pytest -q            the quick tier: every test not marked `full`, properties at the
                                   `quick` profile (a few minutes on two cores)
    python -m pytest -q --full     the full tier, which CI runs: every test, properties at the `ci`
                                   profile (at least 300 examples each)

Profiles: `ci` (300 examples; failures print a reproduction blob), `dev` (60), `quick` (the quick
tier's). HYPOTHESIS_PROFILE picks a profile by name and wins over the tier. RTCOMPILE_EXAMPLES
overrides max_examples of whichever profile is active, for long local runs:

    RTCOMPILE_EXAMPLES=100000 python -m pytest --full tests/differential/test_differential.py

A test is marked `full` (`@pytest.mark.full`, or `pytestmark` for a whole module) when it adds time
rather than coverage the quick tier lacks: long property runs, every chat template rendered many
times, heavy engines started. Without `--full` those tests are deselected (reported as such), never
skipped.
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

settings.register_profile(
    "quick",
    max_examples=15,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SUPPRESSED,
)


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="rtcompile: run the full tier (every test, properties at the ci profile), as CI does",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "full: part of the full tier only (python -m pytest --full)")
    profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if config.getoption("--full") else "quick")
    examples = os.environ.get("RTCOMPILE_EXAMPLES")
    if examples:
        settings.register_profile(f"{profile}-examples", settings.get_profile(profile), max_examples=int(examples))
        profile = f"{profile}-examples"
    settings.load_profile(profile)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    kept, deselected = [], []
    for item in items:
        (deselected if item.get_closest_marker("full") else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


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
# tests of generated/ fail in that mode, by design: run it for tests/differential/ only.)
if os.environ.get("RTCOMPILE_FUZZ_UNFORMATTED") == "1":
    import black

    black.format_str = lambda source, *, mode: source
