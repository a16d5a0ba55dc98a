"""Example counts for the properties that need more examples than the active profile's default."""

from hypothesis import settings

# max_examples of the ci profile, which the full tier runs (tests/conftest.py).
FULL_TIER_EXAMPLES = 300


def scaled(count: int) -> int:
    """`count` examples in the full tier; in proportion under a smaller profile (the quick tier draws
    a twentieth), never fewer than the active profile's own count, which a long run
    (RTCOMPILE_EXAMPLES) raises."""
    active = settings.default.max_examples
    return max(active, min(count, count * active // FULL_TIER_EXAMPLES))
