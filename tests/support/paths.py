"""Where the tests find the repository and the real traces beside it.

Real traces from public projects live in ../shared/traces beside the checkout (never copied into
the project); tests that read them skip cleanly where that folder is absent."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(os.environ.get("TRACEDOCTOR_SHARED_TRACES", REPO_ROOT.parent / "shared" / "traces"))
