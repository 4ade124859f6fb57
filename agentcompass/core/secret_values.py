"""Secret values known to this process, scrubbed by VALUE wherever text leaves it.

Redacting by key name (`api_key: ***`) misses a key that sits under an innocent name: an
`Authorization` header in `model.params.extra_headers`, the password in a base URL, `?key=`
in its query, the echo of a key in a server's error message. So every secret the process
learns (API keys from any source, auth-like header values, URL userinfo and query values,
env credentials, secret-looking environment variables) is registered here, and the writers
(agentcompass.core.durable, TrialContext.append), the log handlers (agentcompass.core.logs)
and the console (`ScrubbedStream`, installed by the CLI) replace each occurrence with `***`.

A leaf: it imports nothing of agentcompass, so every writer can use it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit, urlunsplit

MASK = "***"
MIN_LENGTH = 6  # shorter values are masked where their place is known (a URL, a header), not everywhere by value
SECRET_KEY = re.compile(r"(^|_)(api_?key|token|secret|password|credentials?)(_|$)", re.IGNORECASE)
# Request headers whose values carry no credential: everything else in extra_headers is treated as one
# (Authorization, x-api-key, api-key, Cookie, x-goog-api-key, a proxy's own token header, ...).
HARMLESS_HEADERS = frozenset({
    "accept", "accept-encoding", "accept-language", "content-type", "user-agent", "http-referer", "referer",
    "x-title", "anthropic-version", "anthropic-beta", "openai-beta", "openai-organization", "openai-project",
    "x-request-id", "cache-control",
})
# Query parameters of a base URL that are no credential (Azure's api-version); any other value is one (`?key=`).
HARMLESS_QUERY = frozenset({"api-version", "api_version", "version", "alt", "format"})
AUTH_SCHEMES = ("bearer ", "basic ", "token ")
HEADER_KEYS = ("extra_headers", "headers")  # config keys whose mapping is request headers

_lock = threading.Lock()
_replacements: dict[str, str] = {}  # secret text -> what stands in its place
_pattern: re.Pattern[str] | None = None
_bytes_pattern: re.Pattern[bytes] | None = None


def is_secret_key(name: str) -> bool:
    """`api_key`, `token_secret`, ...; not `api_key_env`, which names a variable and holds no secret."""
    return bool(SECRET_KEY.search(name)) and not name.lower().endswith("_env")


def is_secret_header(name: str) -> bool:
    return str(name).lower() not in HARMLESS_HEADERS


def register(value: Any, replacement: str = MASK) -> None:
    """Scrub `value` from everything written from now on (too short a value is ignored: it would mask
    ordinary text; its known places are masked by structure instead)."""
    if not isinstance(value, str) or len(value.strip()) < MIN_LENGTH or value == replacement:
        return
    global _pattern, _bytes_pattern
    with _lock:
        if _replacements.get(value) == replacement:
            return
        _replacements[value] = replacement
        ordered = sorted(_replacements, key=len, reverse=True)  # a whole URL before the password inside it
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))
        _bytes_pattern = re.compile(b"|".join(re.escape(s.encode("utf-8")) for s in ordered))


def known() -> list[str]:
    with _lock:
        return list(_replacements)


def forget_all() -> None:
    """For tests that run several commands in one process."""
    global _pattern, _bytes_pattern
    with _lock:
        _replacements.clear()
        _pattern = _bytes_pattern = None


def scrub(text: str) -> str:
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(lambda m: _replacements.get(m.group(0), MASK), text)


def scrub_bytes(data: bytes) -> bytes:
    pattern = _bytes_pattern
    if pattern is None or not data:
        return data
    return pattern.sub(lambda m: _replacements.get(m.group(0).decode("utf-8"), MASK).encode("utf-8"), data)


def scrub_data(value: Any) -> Any:
    """A copy of JSON-like data with every registered value scrubbed from its strings (keys too)."""
    if _pattern is None:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {scrub(k) if isinstance(k, str) else k: scrub_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_data(v) for v in value]
    return value


# -- what counts as a secret, by place ---------------------------------------------------------------

def redact_url(url: str) -> str:
    """The URL with its userinfo and every query value but the harmless ones (api-version) masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(f"{k}={v if k.lower() in HARMLESS_QUERY else MASK}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query if parts.query else "", parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that are credentials: its userinfo (user, password) and non-harmless query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [p for p in (parts.username, parts.password) if p]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() not in HARMLESS_QUERY and v]
    if "@" in parts.netloc:
        found.append(parts.netloc.rpartition("@")[0])
    return found


def carries_secret(url: str) -> bool:
    return bool(url_secrets(url))


def register_url(url: Any) -> None:
    if not isinstance(url, str) or not carries_secret(url):
        return
    register(url, redact_url(url))  # the whole URL, as error messages echo it, first
    for part in url_secrets(url):
        register(part)


def register_header(name: str, value: Any) -> None:
    if not is_secret_header(name) or not isinstance(value, str):
        return
    register(value)
    lowered = value.lower()
    for scheme in AUTH_SCHEMES:  # a server may echo just the token after `Bearer `
        if lowered.startswith(scheme):
            register(value[len(scheme):].strip())


def register_tree(data: Any, under_secret: bool = False) -> None:
    """Every secret in a config tree: values under secret-looking keys, auth-like `extra_headers` /
    `headers` values, credentials in URLs anywhere in it."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            name = str(key)
            if name.lower() in HEADER_KEYS and isinstance(value, Mapping):
                for header, text in value.items():
                    register_header(str(header), text)
                continue
            register_tree(value, under_secret or is_secret_key(name))
    elif isinstance(data, (list, tuple)):
        for item in data:
            register_tree(item, under_secret)
    elif isinstance(data, str):
        if under_secret:
            register(data)
        elif "://" in data:
            register_url(data)
    elif hasattr(data, "get_secret_value"):  # pydantic's SecretStr
        register(data.get_secret_value())


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """Values of secret-looking environment variables (OPENAI_API_KEY, HF_TOKEN, MODAL_TOKEN_SECRET, ...):
    a key read from the environment is scrubbed before anything says which variable was used."""
    for name, value in (os.environ if environ is None else environ).items():
        if is_secret_key(name):
            register(value)


def public_tree(data: Any) -> Any:
    """A copy with secrets masked by place (secret keys, auth-like headers, URL credentials) and by value."""
    if isinstance(data, Mapping):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            name = str(key)
            if is_secret_key(name) and value not in (None, ""):
                out[key] = MASK
            elif name.lower() in HEADER_KEYS and isinstance(value, Mapping):
                out[key] = {h: (MASK if is_secret_header(str(h)) else scrub_data(v)) for h, v in value.items()}
            else:
                out[key] = public_tree(value)
        return out
    if isinstance(data, list):
        return [public_tree(v) for v in data]
    if isinstance(data, str):
        return scrub(redact_url(data)) if "://" in data and carries_secret(data) else scrub(data)
    return data


def holds_secret(dotted: str, value: Any) -> bool:
    """Whether an override's value (`model.params.extra_headers.Authorization=...`, `model.base_url=...`,
    `model.params.extra_headers={...}`) is or holds a secret."""
    parts = dotted.lstrip("+~").split(".")
    if is_secret_key(parts[-1]) and value not in (None, ""):
        return True
    if len(parts) >= 2 and parts[-2].lower() in HEADER_KEYS and is_secret_header(parts[-1]):
        return True
    wrapped = {parts[-1]: value}
    return bool(public_tree(wrapped) != wrapped)


# -- the command line -------------------------------------------------------------------------------

SECRET_FLAGS = ("--model-api-key",)


def public_argv(argv: list[str]) -> list[str]:
    """The command line with each secret it holds masked: --model-api-key's value, `KEY=VALUE` words whose value
    is or holds a secret, a flag's URL or JSON value holding a credential."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
        elif arg in SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif arg.startswith(tuple(f"{flag}=" for flag in SECRET_FLAGS)):
            out.append(f"{arg.partition('=')[0]}={MASK}")
        elif "=" in arg and not arg.startswith("-") and holds_secret(arg.partition("=")[0], arg.partition("=")[2]):
            out.append(f"{arg.partition('=')[0]}={MASK}")
        else:
            out.append(masked_value(arg))
    return out


def masked_value(arg: str) -> str:
    """A flag's value (a URL, a JSON object) with its credentials masked; else the value as it was."""
    text = arg.partition("=")[2] if arg.startswith("--") and "=" in arg else arg
    if "://" in text and carries_secret(text):
        return arg.replace(text, redact_url(text))
    if text.lstrip().startswith("{"):
        import json

        try:
            data = json.loads(text)
        except ValueError:
            return arg
        public = public_tree(data)
        return arg.replace(text, json.dumps(public)) if public != data else arg
    return arg


# -- the console -------------------------------------------------------------------------------------

class ScrubbedStream:
    """sys.stdout / sys.stderr with every registered value scrubbed from what is written."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
