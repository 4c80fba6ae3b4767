"""PostgreSQL DSN helpers: redact passwords before a DSN reaches a log line or an error."""

from __future__ import annotations

import re

REDACTED = "***"

# URI form: postgresql://user:password@host/db. The userinfo ends at the LAST '@' before
# the query string, so an unencoded '@' or '/' in the password is still redacted
# (over-redaction of an odd database name is the safe failure).
_URI = re.compile(r"^(?P<scheme>postgres(?:ql)?://)(?P<rest>[^?#]*)(?P<tail>[?#].*)?$", re.IGNORECASE | re.DOTALL)
# password / sslpassword given as a URI query parameter.
_QUERY_PW = re.compile(r"(?P<key>[?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
# password / sslpassword in a key=value DSN: value is 'quoted (with \' escapes)' or bare.
_KV_PW = re.compile(r"(?P<key>(?<![\w])(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s']\S*|(?=\s|$))", re.IGNORECASE)


def redact_dsn(dsn: str) -> str:
    """Return `dsn` with every password replaced by `***` (URI and key=value forms).

    Handles `postgresql://user:pw@host/db`, `?password=pw` / `&sslpassword=pw` query
    parameters, and `password=pw` / `password='p w'` in key=value connection strings.
    """
    m = _URI.match(dsn)
    if m is None:
        return _KV_PW.sub(lambda k: k.group("key") + REDACTED, dsn)
    rest = m.group("rest")
    userinfo, at, hostpart = rest.rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        rest = f"{user}:{REDACTED}@{hostpart}"
    tail = _QUERY_PW.sub(lambda k: k.group("key") + REDACTED, m.group("tail") or "")
    return m.group("scheme") + rest + tail
