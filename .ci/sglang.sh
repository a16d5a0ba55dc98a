#!/usr/bin/env bash
# CI for rtcompile.integrations.sglang (run by .ci/run after the main suite, or on its own): tests/integrations/test_sglang.py
# against the real sglang package, in an environment of its own (sglang pins a transformers that is
# not the one the main suite tests against). That environment (about 11 GB, most of it torch) is
# cached under $RTCOMPILE_CI_CACHE (default /var/cache/rtcompile-ci), keyed by the exact pins,
# rtcompile's dependencies and the Python version, and built from scratch in this run where it is
# absent. rtcompile itself is installed fresh from this checkout every run, into a temporary
# directory, never into the cached environment. In CI the tests never skip:
# RTCOMPILE_REQUIRE_SGLANG=1 turns a missing sglang into an error.
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
building=""
cleanup() {
    rm -rf "$work"
    if [ -n "$building" ]; then rm -rf "$building"; fi
}
trap cleanup EXIT

SGLANG_PINS="sglang==0.5.23 pytest==9.2.0 hypothesis==6.170.17 openai==2.8.0"
# rtcompile's own dependencies are part of the environment (and of its key), so the per-run install
# of this checkout adds nothing but rtcompile.
deps="$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')"
python_version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# shellcheck disable=SC2086
pins="$(printf '%s\n' "python$python_version" $SGLANG_PINS "$deps")"
cache="${RTCOMPILE_CI_CACHE:-/var/cache/rtcompile-ci}"
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache="$work/cache"  # no shared cache here: build in this run's directory, removed on exit
    mkdir -p "$cache"
fi
# The key is stored inside the environment; any other content means another set of pins.
sglang_venv="$cache/sglang-0.5.23"
if [ "$(cat "$sglang_venv/.rtcompile-ci-pins" 2>/dev/null)" != "$pins" ]; then
    # Built beside its final place and renamed when complete, so an interrupted build is never
    # reused (everything below runs `python -m`, so the environment works from its final path).
    started=$SECONDS
    building="$sglang_venv.building.$$"
    python3 -m venv "$building"
    "$building/bin/python" -m pip install --quiet --upgrade pip
    # shellcheck disable=SC2086
    "$building/bin/python" -m pip install --quiet --no-cache-dir $SGLANG_PINS $deps
    printf '%s' "$pins" >"$building/.rtcompile-ci-pins"
    rm -rf "$sglang_venv"
    mv "$building" "$sglang_venv"
    building=""
    echo "built $sglang_venv in $((SECONDS - started)) s"
fi
# rtcompile from this checkout, as a plain (non-editable) install: its entry point is what makes
# SGLang's plugin loader find the detectors, exactly as after `pip install rtcompile`.
site="$work/rtcompile-site"
"$sglang_venv/bin/python" -m pip install --quiet --no-deps --no-cache-dir --target "$site" .
CI=true RTCOMPILE_REQUIRE_SGLANG=1 PYTHONPATH="$site" \
    "$sglang_venv/bin/python" -m pytest -q -p no:cacheprovider tests/integrations/test_sglang.py
