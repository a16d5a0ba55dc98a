"""Placeholder: compiled modules are kept in memory until the on-disk cache lands."""

from __future__ import annotations

from . import api


class MemoryCache:
    def load(self, lowered):
        return api.module_from_source(api.generate(lowered), lowered.sha256)


def default_cache() -> MemoryCache:
    return MemoryCache()
