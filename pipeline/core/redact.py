"""Redaction of secrets and dates before a string reaches a log line, an error, or the tracking store.

``redact_dsn`` hides DSN passwords (URI and key=value forms); ``redact_value`` also hides
``password=...`` pairs and masks calendar dates; ``redact_params`` flattens nested settings for
MLflow params with secret-looking keys replaced by ``***``; ``redact_json`` redacts every string
of a JSON-able object (the features manifest logged with a run).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

# Digits, not word boundaries, delimit a date: "2150-03-04T10:00" and "run_2150-03-04" hold one too.
DATE = re.compile(r"(?<!\d)(1[89]|2[0-3])\d{2}[-/](0[1-9]|1[0-2])[-/](0[1-9]|[12]\d|3[01])(?!\d)")

REDACTED = "***"

# URI form: postgresql://user:password@host/db. The userinfo ends at the LAST '@' before
# the query string, so an unencoded '@' or '/' in the password is still redacted
# (over-redaction of an odd database name is the safe failure).
_URI = re.compile(r"^(?P<scheme>postgres(?:ql)?://)(?P<rest>[^?#]*)(?P<tail>[?#].*)?$", re.IGNORECASE | re.DOTALL)
# password / sslpassword given as a URI query parameter.
_QUERY_PW = re.compile(r"(?P<key>[?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
# password / sslpassword in a key=value DSN: value is 'quoted (with \' escapes)' or bare.
_KV_PW = re.compile(r"(?P<key>(?<![\w])(?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s']\S*|(?=\s|$))",
                    re.IGNORECASE)


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


SECRET_PARTS = {"password", "passwd", "pwd", "secret", "secrets", "token", "credential", "credentials",
                "apikey", "auth", "key", "dsn"}  # key fragments (split on . _ -) that mark a secret
_KV_PASSWORD = re.compile(r"(?i)((?:ssl)?password\s*[=:]\s*)\S+")


# "token" followed by one of these is a vocabulary token, not a credential (train.token_oov_rate, model.token_vocab)
VOCABULARY_TOKEN = {"oov", "vocab"}


def is_secret_key(key: str) -> bool:
    """True when any fragment of ``key`` (split on ``.``, ``_``, ``-``) names a secret; ``token`` does
    unless the next fragment says it is a vocabulary token (``VOCABULARY_TOKEN``)."""
    parts = [p for p in re.split(r"[._\-\s]+", key.lower()) if p]
    secret = any(p in SECRET_PARTS and not (p == "token" and i + 1 < len(parts) and parts[i + 1] in VOCABULARY_TOKEN)
                 for i, p in enumerate(parts))
    return secret or "apikey" in key.lower().replace("_", "")


def redact_value(value: str, dates: bool = True) -> str:
    """Redact DSN / key=value passwords and mask calendar dates (``dates``) in one string."""
    text = redact_dsn(value) if "://" in value else value
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return DATE.sub("<date>", text) if dates else text


def redact_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten nested mappings to ``a.b`` keys and redact them for logging."""
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(redact_params(value, f"{name}."))
        elif is_secret_key(str(key)):
            out[name] = REDACTED
        else:
            text = getattr(value, "value", value)  # str enums -> their value
            out[name] = redact_value(str(text))[:6000]
    return out


def redact_json(obj: Any) -> Any:
    """``obj`` with every string value passed through ``redact_value`` (keys kept)."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if is_secret_key(str(k)) and isinstance(v, str) else redact_json(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_json(v) for v in obj]
    return redact_value(obj) if isinstance(obj, str) else obj
