#!/usr/bin/env bash
# CI for rtcompile.integrations.vllm (run by .ci/run after the main suite, or on its own):
# tests/integrations/test_vllm.py against the real vllm package, in an environment of its own (vllm
# pins a transformers that is not the one the main suite tests against).
#
# vllm 0.34.0 cannot be installed by plain `pip install vllm==0.34.0`: it pins
# flashinfer-python==0.7.3, which the registry lacks, and which only GPU serving imports. So vllm is
# installed with --no-deps, then its requirements from .ci/vllm-0.34.0-requirements.txt (every
# requirement of its wheel but that one). Once built, the environment must import vLLM's parser
# modules and register rtcompile's plugin before it is kept.
#
# That environment (about 13 GB, most of it torch and its CUDA libraries) is cached under
# $RTCOMPILE_CI_CACHE (default /var/cache/rtcompile-ci), keyed by the exact pins, the requirements
# file's content, rtcompile's dependencies and the Python version, and built from scratch in this
# run where it is absent. rtcompile itself is installed fresh from this checkout every run, into a
# temporary directory, never into the cached environment. In CI the tests never skip:
# RTCOMPILE_REQUIRE_VLLM=1 turns a missing vllm into an error.
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
building=""
cleanup() {
    rm -rf "$work"
    if [ -n "$building" ]; then rm -rf "$building"; fi
}
trap cleanup EXIT

VLLM_VERSION="0.34.0"
REQUIREMENTS=".ci/vllm-$VLLM_VERSION-requirements.txt"
# What the tests need beside vllm's own requirements (exact pins).
TEST_PINS="openai==3.57.0 pytest==9.2.0 hypothesis==6.170.17"
# rtcompile's own dependencies are part of the environment (and of its key), so the per-run install
# of this checkout adds nothing but rtcompile.
deps="$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')"
python_version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
requirements_hash="$(sha256sum "$REQUIREMENTS" | cut -c1-64)"
# shellcheck disable=SC2086
key="$(printf '%s\n' "python$python_version" "vllm==$VLLM_VERSION" "$requirements_hash" $TEST_PINS "$deps" \
    | sha256sum | cut -c1-12)"
cache="${RTCOMPILE_CI_CACHE:-/var/cache/rtcompile-ci}"
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    cache="$work/cache"  # no shared cache here: build in this run's directory, removed on exit
    mkdir -p "$cache"
fi
vllm_venv="$cache/vllm-$VLLM_VERSION-$key"
if [ ! -f "$vllm_venv/.rtcompile-ci-complete" ]; then
    # Built beside its final place and renamed when complete, so an interrupted build is never
    # reused (everything below runs `python -m`, so the environment works from its final path).
    started=$SECONDS
    building="$vllm_venv.building.$$"
    python3 -m venv "$building"
    "$building/bin/python" -m pip install --quiet --upgrade pip
    "$building/bin/python" -m pip install --quiet --no-cache-dir --no-deps "vllm==$VLLM_VERSION"
    # shellcheck disable=SC2086
    "$building/bin/python" -m pip install --quiet --no-cache-dir -r "$REQUIREMENTS" $TEST_PINS $deps
    # What the plugin and its tests load, so that a broken environment is never kept.
    "$building/bin/python" -c '
import vllm.parser.response_template, vllm.parser.parser_manager, vllm.reasoning, vllm.tool_parsers
import vllm.entrypoints.openai.chat_completion.protocol, vllm.plugins
print("vllm", vllm.__version__, "parser modules import")'
    touch "$building/.rtcompile-ci-complete"
    rm -rf "$vllm_venv"
    mv "$building" "$vllm_venv"
    building=""
    echo "built $vllm_venv in $((SECONDS - started)) s"
fi
# rtcompile from this checkout, as a plain (non-editable) install: its entry point is what makes
# vLLM find the plugin, exactly as after `pip install rtcompile`.
site="$work/rtcompile-site"
"$vllm_venv/bin/python" -m pip install --quiet --no-deps --no-cache-dir --target "$site" .
CI=true RTCOMPILE_REQUIRE_VLLM=1 PYTHONPATH="$site" \
    "$vllm_venv/bin/python" -m pytest -q -p no:cacheprovider tests/integrations/test_vllm.py
