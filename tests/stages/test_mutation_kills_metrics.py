"""Tests that kill the mutants the metrics tests let survive (scripts/mutation.sh, docs/testing.md)."""
