"""
gardend service manifests in the tests: C{MANIFEST}, the project's own
(C{services/vehicle/service.json}), and L{writeManifest}, which writes one
under a folder, as gardend finds them, with fields of the test's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support._localrun import REPO


MANIFEST = REPO / "services" / "vehicle" / "service.json"


def writeManifest(tmp: Path, **fields: Any) -> Path:
    """
    A manifest at C{tmp/services/vehicle/service.json}: a valid one, with
    C{fields} in place of its own (L{None} leaves a field out).
    """
    data = {
        "serviceId": "vehicle",
        "command": "bin/run",
        "args": ["-x"],
        "workingDir": "..",
        "healthPath": "/health",
        "proxyMount": "/services/vehicle",
        "env": [{"name": "A", "value": "1"}],
    }
    data.update(fields)
    folder = tmp / "services" / "vehicle"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "service.json"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return path
