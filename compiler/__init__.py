"""rtcompile."""
