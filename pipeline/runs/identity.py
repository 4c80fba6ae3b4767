"""What a feature set is: its content, never the name of its folder.

Every README path ends in ``features``, so a folder's name tells two extractions apart no better than chance.
A feature set's identity is a digest of what its ``manifest.json`` records of it: the SHA-256 of each file
the extraction wrote (the splits, the vocabulary, the quarantine) and the source it read (kind and place,
redacted as the tracking store keeps it). Every run trained on features records it (tag ``FEATURES_ID_TAG``,
beside ``FEATURES_SOURCE_TAG`` and the release), every evaluation records the identity of the features it
read, and ``compare`` groups by it. The identity is computed from the redacted manifest, so a run's own copy of
the manifest (``features/manifest.json``, logged by runs written before the tag) gives the same identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.contracts import MANIFEST_FILE
from pipeline.core.redact import redact_value

FEATURES_ID_TAG = "features_id"  # the content identity of the training features (features_identity)
FEATURES_SOURCE_TAG = "features_source"  # the source the training features were extracted from (redacted)
ID_HEX = 12  # hex digits of an identity shown and recorded (48 bits: no two extractions of a store meet)


def features_identity(manifest: dict | None) -> str | None:
    """The identity of the feature set a manifest describes (see the module docstring); None when the manifest
    records no file digests (no manifest, or features written by hand)."""
    digests = (manifest or {}).get("sha256")
    if not digests:
        return None
    source = manifest.get("source") or {}
    payload = {"files": {str(k): str(v) for k, v in sorted(digests.items())},
               "source": {"kind": str(source.get("kind", "")), "location": redact_value(str(source.get("location",
                                                                                                       "")))}}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:ID_HEX]


def read_manifest(features_dir: Path | str) -> dict | None:
    """A features directory's ``manifest.json`` (None without one)."""
    path = Path(features_dir) / MANIFEST_FILE
    return fileio.read_json(path) if path.is_file() else None


def features_id(features_dir: Path | str) -> str | None:
    """The identity of the features in ``features_dir`` (None without a manifest that records file digests)."""
    return features_identity(read_manifest(features_dir))


def source_of(manifest: dict | None) -> str:
    """Where a manifest's features were extracted from, redacted (``csv:/data/mimic``, ``stage:...``, a DSN
    without its password); ``unknown`` when it does not say."""
    location = ((manifest or {}).get("source") or {}).get("location")
    return redact_value(str(location)) if location else "unknown"


def label(release: str | None, source: str | None, identity: str | None) -> str:
    """A feature set in words: its release, its source and its identity (``MIMIC-III from csv:/x (3fa2c1d94e0b)``)."""
    titles = {"mimic-iii": "MIMIC-III", "mimic-iv": "MIMIC-IV"}
    said = titles.get(str(release), str(release or "release unknown"))
    return f"{said} from {source or 'an unknown source'}" + (f" ({identity})" if identity else "")
