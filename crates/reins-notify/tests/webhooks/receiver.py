"""A webhook receiver for reins-notify's and reins-server's webhook tests.

Verifies every request with the Standard Webhooks reference verifier (the PyPI package
`standardwebhooks`), answers 500 to the first N attempts of each message id
(`--fail-first N`), then 200, and writes one JSON line per request to the log file:
{"id", "type", "verified", "status", "signatures", "data"} (`data`: the verified
payload's notice; null when the request did not verify). Prints its port on stdout once
listening (loopback only), and with `--echo` each request's line on stdout too (a test
waits on them); stops when stdin closes.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--echo", action="store_true")
    args = p.parse_args()
    verifier = Webhook(args.secret)
    seen: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            msg_id = headers.get("webhook-id", "")
            try:
                payload = verifier.verify(body, headers)
                verified = True
            except WebhookVerificationError:
                payload, verified = {}, False
            with lock:
                seen[msg_id] = seen.get(msg_id, 0) + 1
                n = seen[msg_id]
                status = 401 if not verified else (500 if n <= args.fail_first else 200)
                line = json.dumps({
                    "id": msg_id,
                    "type": payload.get("type"),
                    "verified": verified,
                    "status": status,
                    "signatures": len(headers.get("webhook-signature", "").split()),
                    "data": payload.get("data"),
                })
                with open(args.log, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
                if args.echo:
                    print(line, flush=True)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
