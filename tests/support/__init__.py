"""Helpers and fixture plug-ins shared by the tests (one copy each; fixtures in conftest.py)."""
