"""Helpers the tests share that are not fixtures (fixtures live in conftest.py files): import them
from here, never from a test module or a conftest."""
