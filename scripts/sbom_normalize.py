#!/usr/bin/env python3
"""Makes a cargo-cyclonedx SBOM reproducible: the timestamp becomes the commit's time
(SOURCE_DATE_EPOCH) and the serial number a UUID derived from the rest of the document,
so the same lock file and commit give the same bytes. Refuses a file that is not a
CycloneDX JSON BOM with components.

Usage: sbom_normalize.py IN OUT --epoch SECONDS
"""

import argparse
import datetime
import hashlib
import json
import sys
import uuid


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--epoch", type=int, required=True)
    args = ap.parse_args()
    with open(args.src, encoding="utf-8") as f:
        bom = json.load(f)
    if bom.get("bomFormat") != "CycloneDX" or not bom.get("components"):
        print(f"sbom_normalize: {args.src} is not a CycloneDX BOM with components", file=sys.stderr)
        return 1
    bom.setdefault("metadata", {})["timestamp"] = datetime.datetime.fromtimestamp(
        args.epoch, tz=datetime.timezone.utc
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    bom.pop("serialNumber", None)
    body = json.dumps(bom, sort_keys=True, separators=(",", ":")).encode()
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "sha256:" + hashlib.sha256(body).hexdigest())
    bom["serialNumber"] = f"urn:uuid:{serial}"
    with open(args.dst, "w", encoding="utf-8") as f:
        json.dump(bom, f, indent=2, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
