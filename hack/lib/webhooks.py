"""A controller's webhook configurations, pointed at the local process by URL (hack/lib/jobset.sh,
hack/lib/kueue.sh).

Upstream's manifests (``config/components/webhook`` of the controller's module) reach the webhooks
through a Service; the local cluster runs the controller as a process, so each webhook gets the
process's URL and the cluster CA that signed its serving certificate. Upstream's own JSON patches
(JobSet's, which limit its pod webhooks to JobSet's pods) are applied first, as its kustomization
does. With API groups given, only the webhooks for those groups are kept: a webhook for a kind the
controller does not serve (an integration left off) would refuse every such object.

    python hack/lib/webhooks.py WEBHOOK_DIR BASE_URL CA_FILE PREFIX [API_GROUP ...] > webhooks.yaml
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
    """Apply upstream's JSON patches, if it has any (only ``replace`` of one webhook is used)."""
    patch = patches / PATCHES[doc["kind"]]
    if not patch.exists():
        return doc
    for op in yaml.safe_load(patch.read_text()):
        if op["op"] != "replace" or not op["path"].startswith("/webhooks/"):
            raise SystemExit(f"unexpected patch in {patches}: {op['op']} {op['path']}")
        doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
    return doc


def wanted(hook: dict[str, Any], groups: set[str]) -> bool:
    return not groups or all(set(rule["apiGroups"]) <= groups for rule in hook["rules"])


def main(webhook_dir: str, base_url: str, ca_file: str, prefix: str, *groups: str) -> None:
    root = Path(webhook_dir)
    ca = base64.b64encode(Path(ca_file).read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all((root / "manifests.yaml").read_text()):
        if not doc:
            continue
        doc = patched(doc, root / "patches")
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        doc["webhooks"] = [hook for hook in doc["webhooks"] if wanted(hook, set(groups))]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
        out.append(doc)
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
