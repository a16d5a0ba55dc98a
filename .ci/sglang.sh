#!/usr/bin/env bash
# CI for rtcompile.sglang: run tests/test_sglang.py against the real sglang package, in an
# environment of its own (sglang pins a transformers that is not the one the main suite tests
# against). The environment is cached under /var/cache/rtcompile-ci/, keyed by the exact pins below,
# and built from scratch in this run when absent (about 11 GB with torch, most of it downloads).
# rtcompile itself is installed fresh from this checkout every run. In CI the tests never skip:
# RTCOMPILE_REQUIRE_SGLANG=1 turns a missing sglang into an error.
set -euo pipefail
cd "$(dirname "$0")/.."

SGLANG_PINS="sglang==0.5.23"
TEST_PINS="pytest>=8 hypothesis>=6.100 openai>=1.40"
cache_root="${RTCOMPILE_CI_CACHE:-/var/cache/rtcompile-ci}"
venv="$cache_root/sglang-0.5.23"
# The cache key: the pins and the Python they were installed for, stored inside the environment.
pins="$SGLANG_PINS $TEST_PINS python$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
mkdir -p "$cache_root"

if [ "$(cat "$venv/.rtcompile-ci-pins" 2>/dev/null)" != "$pins" ]; then
    # Built beside its final place and renamed when complete: an interrupted build is never reused
    # (everything below runs `python -m`, so the environment works from its final path).
    rm -rf "$venv.building"
    python3 -m venv "$venv.building"
    "$venv.building/bin/python" -m pip install --quiet --upgrade pip
    # shellcheck disable=SC2086
    "$venv.building/bin/python" -m pip install --quiet $SGLANG_PINS $TEST_PINS
    printf '%s' "$pins" >"$venv.building/.rtcompile-ci-pins"
    rm -rf "$venv"
    mv "$venv.building" "$venv"
fi

# The project into the cached environment, without touching its pins (sglang's transformers stays).
"$venv/bin/python" -m pip install --quiet --no-deps -e .
"$venv/bin/python" -m pip install --quiet "regex>=2024.4.16" "jinja2>=3.1" "black>=24.1"
"$venv/bin/python" -c "import sglang.srt.function_call.function_call_parser, rtcompile.sglang"

CI=true RTCOMPILE_REQUIRE_SGLANG=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_sglang.py
