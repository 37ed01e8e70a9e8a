"""An SMTP server on loopback (aiosmtpd) that captures what reins mails.

Prints `{"port": N}` once it listens, then one JSON line per message received:
`{"from", "to", "subject", "body"}` (the body decoded from its transfer encoding).
Stops when its standard input closes (the test that started it ended).
"""

import email
import email.policy
import json
import socket
import sys

from aiosmtpd.controller import Controller


class Capture:
    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        part = msg.get_body(preferencelist=("plain",))
        body = part.get_content() if part is not None else ""
        print(
            json.dumps(
                {
                    "from": envelope.mail_from,
                    "to": list(envelope.rcpt_tos),
                    "subject": str(msg["subject"]),
                    "body": body,
                }
            ),
            flush=True,
        )
        return "250 Message accepted for delivery"


def main():
    # A free loopback port (aiosmtpd checks its server by connecting to the port given).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(Capture(), hostname="127.0.0.1", port=port)
    controller.start()
    print(json.dumps({"port": port}), flush=True)
    try:
        sys.stdin.read()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
