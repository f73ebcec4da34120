"""The dashboard's API types come from frontend/openapi.json: it must be the live schema.

When this fails, regenerate both files (the second step rewrites frontend/src/api/schema.d.ts):

    .venv/bin/python -c "import json; from backend.app import create_app; \
from backend.config import Settings; \
print(json.dumps(create_app(Settings()).openapi(), indent=2, sort_keys=True))" \
> frontend/openapi.json
    cd frontend && npm run gen:api
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.app import create_app
from backend.config import Settings

COMMITTED = Path(__file__).resolve().parents[3] / "frontend" / "openapi.json"


def test_the_committed_openapi_file_is_the_live_schema(tmp_path: Path) -> None:
    # Building the schema starts nothing (no lifespan): the data dir stays untouched.
    app = create_app(Settings(data_dir=tmp_path / "data"))
    live = json.loads(json.dumps(app.openapi(), sort_keys=True))
    committed = json.loads(COMMITTED.read_text())
    assert committed == live, (
        "frontend/openapi.json is stale: regenerate it and frontend/src/api/schema.d.ts "
        "(see this module's docstring)"
    )
    assert not (tmp_path / "data").exists()


def test_the_committed_file_is_formatted_as_generated() -> None:
    # Byte-for-byte as the documented command writes it, so regenerating gives no noise.
    text = COMMITTED.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
