"""The dashboard tests' fixtures: hand_built, a store of two hand-built runs (tests.support.app_pages)."""
from tests.support.app_pages import hand_built  # noqa: F401 - a fixture
