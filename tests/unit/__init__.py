"""Tests that start no process beyond Python: plans, parsers, records, the code's layout (`./dev test unit`)."""
