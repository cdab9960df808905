"""JobSet's webhook configurations, pointed at the local controller by URL (hack/lib/jobset.sh).

Upstream's manifests (config/components/webhook of the JobSet module) reach the webhooks through a
Service; the local cluster runs the controller as a process, so each webhook gets the process's URL
and the cluster CA that signed its serving certificate. Upstream's own patches (which limit the pod
webhooks to JobSet's pods) are applied first, as its kustomization does.

    python hack/lib/jobset_webhooks.py WEBHOOK_DIR BASE_URL CA_FILE > webhooks.yaml
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import yaml

PATCHES = {"MutatingWebhookConfiguration": "mutating-patch.yaml",
           "ValidatingWebhookConfiguration": "validating-patch.yaml"}


def patched(doc: dict[str, Any], patches: Path) -> dict[str, Any]:
    """Apply upstream's JSON patches (only ``replace`` of one webhook is used there)."""
    for op in yaml.safe_load((patches / PATCHES[doc["kind"]]).read_text()):
        if op["op"] != "replace" or not op["path"].startswith("/webhooks/"):
            raise SystemExit(f"unexpected patch in {patches}: {op['op']} {op['path']}")
        doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
    return doc


def main(webhook_dir: str, base_url: str, ca_file: str) -> None:
    root = Path(webhook_dir)
    ca = base64.b64encode(Path(ca_file).read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all((root / "manifests.yaml").read_text()):
        if not doc:
            continue
        doc = patched(doc, root / "patches")
        doc["metadata"] = {"name": f"jobset-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
        out.append(doc)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
