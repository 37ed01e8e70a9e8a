"""An SMTP server on loopback (aiosmtpd) that captures what reins mails.

Prints `{"port": N}` once it listens, then one JSON line per message received:
`{"from", "to", "subject", "body", "login"}` (the body decoded from its transfer
encoding; `login`: the user name the client logged in with, or null). With
`--login USER:PASSWORD` it requires that login (AUTH PLAIN or LOGIN, on the plain
connection) before it takes any mail, and refuses every other. Stops when its
standard input closes (the test that started it ended).
"""

import argparse
import email
import email.policy
import json
import logging
import socket
import sys
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


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
                    "login": login_of(session),
                }
            ),
            flush=True,
        )
        return "250 Message accepted for delivery"


def login_of(session):
    data = session.auth_data
    if isinstance(data, LoginPassword):
        return data.login.decode("utf-8", "replace")
    return None


class Login:
    """Accepts exactly one user name and password."""

    def __init__(self, user, password):
        self.user = user.encode()
        self.password = password.encode()

    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == self.user
            and auth_data.password == self.password
        )
        return AuthResult(success=ok, auth_data=auth_data if ok else None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--login", help="USER:PASSWORD the client must log in with")
    args = p.parse_args()
    auth = {}
    if args.login:
        user, _, password = args.login.partition(":")
        # Plain-text AUTH is what the test wants (loopback); not worth a warning.
        warnings.simplefilter("ignore")
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        auth = {
            "authenticator": Login(user, password),
            "auth_required": True,
            "auth_require_tls": False,
        }
    # A free loopback port (aiosmtpd checks its server by connecting to the port given).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(Capture(), hostname="127.0.0.1", port=port, **auth)
    controller.start()
    print(json.dumps({"port": port}), flush=True)
    try:
        sys.stdin.read()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
