"""Slack's side of reins-server's Slack test, with the official slack_sdk.

    slack_check.py sign SECRET TIMESTAMP < BODY
        prints the `X-Slack-Signature` of BODY sent at TIMESTAMP (SignatureVerifier),
        after checking that the verifier accepts it as Slack's.

    slack_check.py blocks < REQUESTS
        REQUESTS: the Web API requests reins made, as a JSON list of
        `{"method", "body"}`. Parses every message's blocks with slack_sdk's block
        models (unknown or malformed blocks fail), validates them against Block Kit's
        limits, and prints a summary: per request, the block types and the buttons'
        `action_id`s, styles and urls.
"""

import json
import sys

from slack_sdk.models.blocks import ActionsBlock, Block, ButtonElement
from slack_sdk.signature import SignatureVerifier


def sign(secret, timestamp):
    body = sys.stdin.read()
    verifier = SignatureVerifier(signing_secret=secret)
    signature = verifier.generate_signature(timestamp=timestamp, body=body)
    headers = {"x-slack-request-timestamp": timestamp, "x-slack-signature": signature}
    # Only a fresh timestamp passes the SDK's own 5-minute check.
    fresh = verifier.is_valid_request(body, headers)
    print(json.dumps({"signature": signature, "sdk_accepts": fresh}))


def blocks():
    requests = json.load(sys.stdin)
    summary = []
    for r in requests:
        body = r["body"]
        parsed = Block.parse_all(body.get("blocks", []))
        if len(parsed) != len(body.get("blocks", [])):
            raise SystemExit(f"{r['method']}: some blocks did not parse")
        buttons = []
        for b in parsed:
            if b is None:
                raise SystemExit(f"{r['method']}: an unknown block")
            b.validate_json()
            if isinstance(b, ActionsBlock):
                for e in b.elements:
                    if not isinstance(e, ButtonElement):
                        raise SystemExit(f"{r['method']}: a non-button element")
                    e.validate_json()
                    buttons.append(
                        {"action_id": e.action_id, "style": e.style, "url": e.url, "value": e.value}
                    )
        summary.append(
            {
                "method": r["method"],
                "channel": body.get("channel"),
                "text": body.get("text"),
                "types": [b.type for b in parsed],
                "buttons": buttons,
            }
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    if sys.argv[1:2] == ["sign"]:
        sign(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["blocks"]:
        blocks()
    else:
        raise SystemExit(__doc__)
