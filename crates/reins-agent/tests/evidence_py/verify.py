"""An independent verifier of reins evidence bundles, written from docs/evidence.md.

usage: verify.py BUNDLE [--jwks FILE]

Prints one line. Exit status 0 when the bundle verifies, 1 when it is refused (the line
names the first failing entry as `entry N`), 2 on a usage error.
"""

import base64
import hashlib
import json
import sys

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "reins-evidence/1"
GENESIS = "0" * 64
ENTRY_MEMBERS = {"session", "seq", "kind", "at", "body", "prev", "hash"}
KINDS = {"decision", "claim", "finish", "receipt"}
SIGNED_MEMBERS = {"receipt", "kid", "alg", "sig"}
RECEIPT_MEMBERS = {
    "kind", "session", "call_id", "tool", "args_shown", "args_executed", "decision",
    "actor", "issuer", "subject", "door", "policy_hash", "at", "chain_head",
}


class Refused(Exception):
    def __init__(self, entry, line, reason):
        super().__init__(reason)
        self.entry, self.line, self.reason = entry, line, reason

    def __str__(self):
        where = f"entry {self.entry} (line {self.line})" if self.entry else f"line {self.line}"
        return f"{where}: {self.reason}"


def h(value):
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_keys(jwks_members, line_of=lambda i: 0):
    keys = {}
    for i, jwk in enumerate(jwks_members):
        if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            raise Refused(None, line_of(i), "a key that is not an OKP Ed25519 key")
        try:
            raw = b64url(jwk["x"])
        except Exception:
            raise Refused(None, line_of(i), "a key whose `x` is not base64url")
        if len(raw) != 32 or not isinstance(jwk.get("kid"), str):
            raise Refused(None, line_of(i), "a key without a 32-byte `x` or a `kid`")
        keys[jwk["kid"]] = (Ed25519PublicKey.from_public_bytes(raw), jwk.get("revoked") is True)
    return keys


def verify(text, trusted=None):
    lines = [(n, l) for n, l in enumerate(text.split("\n"), start=1) if l.strip()]
    if not lines:
        raise Refused(None, 1, "empty bundle")
    n, first = lines[0]
    try:
        header = json.loads(first)
    except ValueError as e:
        raise Refused(None, n, f"not JSON: {e}")
    if not isinstance(header, dict) or set(header) != {"type", "format", "session"} \
            or header["type"] != "header":
        raise Refused(None, n, "the first line is not a header")
    if header["format"] != FORMAT:
        raise Refused(None, n, f"unknown format {header['format']!r}")
    session = header["session"]

    key_members, key_lines, entries = [], [], []
    for n, raw in lines[1:]:
        position = len(entries) + 1
        try:
            line = json.loads(raw)
        except ValueError as e:
            raise Refused(position, n, f"not JSON: {e}")
        kind = line.get("type") if isinstance(line, dict) else None
        if kind == "key" and set(line) == {"type", "jwk"}:
            key_members.append(line["jwk"])
            key_lines.append(n)
        elif kind == "entry" and set(line) == {"type", "entry"}:
            entries.append((n, line["entry"]))
        elif kind == "header":
            raise Refused(None, n, "a second header")
        else:
            raise Refused(position, n, "not a key or an entry line")
    keys = trusted if trusted is not None else load_keys(key_members, lambda i: key_lines[i])

    prev, receipts = GENESIS, 0
    for position, (n, entry) in enumerate(entries, start=1):
        def fail(reason):
            return Refused(position, n, reason)

        if not isinstance(entry, dict) or set(entry) != ENTRY_MEMBERS or entry["kind"] not in KINDS:
            raise fail("not a chain entry")
        if entry["session"] != session:
            raise fail(f"belongs to session {entry['session']!r}")
        if entry["seq"] != position or isinstance(entry["seq"], bool):
            raise fail(f"seq {entry['seq']} where {position} was expected")
        if entry["prev"] != prev:
            raise fail("prev is not the hash of the entry before")
        unsealed = {k: v for k, v in entry.items() if k != "hash"}
        if h(unsealed) != entry["hash"]:
            raise fail("hash does not match the content")
        if entry["kind"] == "receipt":
            body = entry["body"]
            if not isinstance(body, dict) or set(body) != SIGNED_MEMBERS \
                    or not isinstance(body["receipt"], dict) \
                    or set(body["receipt"]) != RECEIPT_MEMBERS:
                raise fail("not a signed receipt")
            receipt = body["receipt"]
            if receipt["session"] != session:
                raise fail("receipt for another session")
            if receipt["chain_head"] != entry["prev"]:
                raise fail("receipt chain_head is not the entry before")
            if body["alg"] != "EdDSA":
                raise fail("alg is not EdDSA")
            if body["kid"] not in keys:
                raise fail(f"unknown key {body['kid']!r}")
            key, revoked = keys[body["kid"]]
            if revoked:
                raise fail(f"revoked key {body['kid']!r}")
            try:
                sig = b64url(body["sig"])
            except Exception:
                raise fail("sig is not base64url")
            if len(sig) != 64:
                raise fail("sig is not 64 bytes")
            try:
                key.verify(sig, rfc8785.dumps(receipt))
            except InvalidSignature:
                raise fail("bad signature")
            receipts += 1
        prev = entry["hash"]
    return session, len(entries), receipts, prev


def main(argv):
    if len(argv) == 2:
        path, jwks = argv[1], None
    elif len(argv) == 4 and argv[2] == "--jwks":
        path, jwks = argv[1], argv[3]
    else:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        trusted = None
        if jwks is not None:
            with open(jwks, encoding="utf-8") as f:
                trusted = load_keys(json.load(f)["keys"])
        session, entries, receipts, head = verify(text, trusted)
    except Refused as e:
        print(f"REFUSED {e}")
        return 1
    print(f"OK session={session} entries={entries} receipts={receipts} head={head}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
