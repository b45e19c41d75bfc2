"""Likely-secret detection for memory text (SPEC §3 semantic gate, and the pre-commit check).

Decision: a focused regex + entropy detector, not detect-secrets. On tests/data/secrets_corpus.jsonl
(78 fake secrets of 29 kinds, 78 look-alikes), `python bench/faults.py --only secrets
--detect-secrets-python ...` measured:
  * this module: recall 1.0, false-positive rate 0.0, 0.22 ms to read and scan a file (before
    it normalised text and knew command-line passwords, split and hex/percent-encoded tokens:
    recall 0.73 on the same corpus, `python bench/secrets_speed.py`);
  * detect-secrets 1.5.0 (every plugin, default filters, `scan_file`): recall 0.42 (it misses
    github_pat_, Google AIza, OpenAI and Anthropic keys, Basic/Bearer headers, mysql -p, .netrc,
    sk_test_, `curl -u user:pass`, `sshpass -p`, chosen passwords like hunter2hunter2!, tokens
    split by whitespace or zero-width characters, fullwidth or with a combining mark, hex- or
    percent-encoded), false-positive rate 0.18 (hashes, an ETag, AWS's and Azurite's published
    keys, placeholders such as `password: changeme`, PASSWORD_MIN_LENGTH=12, "The secret:
    Build_2024_final"), 2.6 ms per file, ~0.3 s to import (a loaded 2-core machine);
  * both together: recall 1.0 at detect-secrets' false-positive rate: nothing to gain from
    combining, a false positive per six look-alikes to lose. Its settings also live in
    process-global mutable state (a hazard in the threaded daemon).
The corpus was written alongside this module, so its recall is an upper bound; the look-alikes
are what a memory about code routinely holds. Over texts written by no one here (2,503 GitBugs
reports, 2,629 requests commit messages, 2,760 LoCoMo turns, .memory-example) it flags three
reports: two carry real-looking credentials (MinIO keys in an s3:// URL, generated passwords in
`docker run -e`), one a Jira link's atl_token (a session's anti-forgery token in a URL query,
which the rule for `token=` cannot tell from an access token). Per text (p50, same run, beside
the scanner before those rules): 309 against 285 µs on .memory-example's files, 196 against 187
on GitBugs reports, 54 against 47 on LoCoMo turns (`python bench/secrets_speed.py --eval DIR`).

What is scanned is the text a terminal or a tool would hand on (see `normalise`): NFKC, without
combining marks or format characters. False positives refuse a user's memory, so everything
here leans towards precision: tokens are recognised by their vendor prefixes (re-joined when
whitespace splits one, decoded when one is pasted as base64, hex or percent-encoded), and
free-form values only count when a flag or a secret-sounding name says what they are *and*
they look like one: random, or a password a person chose (letters mixed with digits, or with
digits and a symbol). Variables, placeholders (`<redacted>`, `changeme`, `xxxx`), plain words,
versions (python3.11), charsets (utf8mb4) and ports pass. Git SHAs, ULIDs, UUIDs, hashes and
data URIs in prose are never flagged on their own.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

__all__ = [
    "Finding", "assert_no_secrets", "find_secrets", "normalise", "redact", "shannon_entropy", "without_secrets",
]


@dataclass(frozen=True)
class Finding:
    """One likely secret: what it looks like, its 1-based line, and a redacted excerpt."""

    kind: str
    line: int
    excerpt: str


# (kind, pattern). Group "s", when present, is the secret itself; otherwise the whole match.
_TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        # PEM (RSA, EC, DSA, PKCS#8, ENCRYPTED), OpenSSH and PGP private keys: the header alone is enough.
        ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("private_key", r"PuTTY-User-Key-File-\d+:"),
        # Access key ids only: AIDA/AROA/... are IAM user and role ids, which are not credentials.
        ("aws_access_key", r"(?<![A-Za-z0-9])(?P<s>(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})(?![A-Za-z0-9])"),
        ("github_token", r"(?<![A-Za-z0-9_])(?P<s>gh[pousr]_[A-Za-z0-9]{36,255})(?![A-Za-z0-9_])"),
        ("github_token", r"(?<![A-Za-z0-9_])(?P<s>github_pat_[A-Za-z0-9_]{40,255})(?![A-Za-z0-9_])"),
        ("gitlab_token", r"(?<![A-Za-z0-9_])(?P<s>glpat-[A-Za-z0-9_-]{20,})"),
        ("slack_token", r"(?<![A-Za-z0-9])(?P<s>xox[abposre]-[A-Za-z0-9-]{10,})"),
        ("slack_webhook", r"(?P<s>hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]{16,})"),
        # Test-mode keys too: they read and write a real account's test data.
        ("stripe_key", r"(?<![A-Za-z0-9_])(?P<s>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,})"),
        ("google_api_key", r"(?<![A-Za-z0-9_-])(?P<s>AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])"),
        ("anthropic_key", r"(?<![A-Za-z0-9_-])(?P<s>sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{20,})"),
        ("npm_token", r"(?<![A-Za-z0-9_])(?P<s>npm_[A-Za-z0-9]{36})(?![A-Za-z0-9_])"),
        ("pypi_token", r"(?<![A-Za-z0-9_-])(?P<s>pypi-AgE[A-Za-z0-9_-]{50,})"),
        (
            "huggingface_token",
            # Mixed case required: a lower-case hf_ run is far more likely a long identifier.
            r"(?<![A-Za-z0-9_])(?P<s>hf_(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{34,40})"
            r"(?![A-Za-z0-9_])",
        ),
        ("sendgrid_key", r"(?<![A-Za-z0-9_-])(?P<s>SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})"),
        # Header and payload both start with base64 of '{"'; the signature may be empty (alg none).
        ("jwt", r"(?<![A-Za-z0-9_-])(?P<s>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),
        # Azure storage and Service Bus connection strings carry the account key itself.
        ("azure_key", r"(?i:AccountKey|SharedAccessKey)=(?P<s>[A-Za-z0-9+/]{30,}={0,2})"),
        # A Twilio account SID (AC + 32 hex) then its auth token (32 hex), as curl -u takes them.
        ("twilio_credentials", r"(?<![A-Za-z0-9])AC[0-9a-f]{32}:(?P<s>[0-9a-f]{32})(?![0-9A-Za-z])"),
    )
)
# Keys published as examples by their vendors (documentation, local emulators): not secrets.
_PUBLISHED_KEYS = frozenset({
    # Azurite / the Azure storage emulator's well-known account key.
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
})
# Six of one character in a row: a placeholder (sk_test_xxxxxxxx..., 000000...), not a random token.
_FILLER_RE = re.compile(r"(.)\1{5}")
# An AWS secret access key is 40 base64 characters with no prefix of its own; only where the
# line speaks of AWS or a secret access key is such a run taken for one (hashes are hex, and
# stand-alone base64 runs are too common to refuse).
# A dot before the run makes it a piece of a host and path (docs.aws.amazon.com/AmazonS3/...).
_AWS_SECRET_RE = re.compile(r"(?<![A-Za-z0-9/+=.])(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
_AWS_CONTEXT_RE = re.compile(r"aws|amazon|secret[ _-]?access|access[ _-]?secret", re.IGNORECASE)
# Passwords on a command line: mysql -pSECRET (no space: with one, mysql prompts), and .netrc.
_CLI_PASSWORD_RE = re.compile(
    r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb)\b[^\n]{0,200}?[ \t]-p['\"]?(?P<s>[^\s'\"]{4,})"
)
_NETRC_RE = re.compile(
    r"\b(?:machine[ \t]+\S+|default)\s+(?:login[ \t]+\S+\s+)?password[ \t]+(?P<s>\S+)"
)
# A value given to a command-line flag. The flag says what the value is, so the value only has
# to be a literal that looks like a password (see _password_like), not a random token:
#   --password VALUE, --db-password=VALUE, --token, --api-key, --client-secret, --pass;
_LONG_FLAG_RE = re.compile(
    r"(?<![\w-])--(?P<name>[A-Za-z0-9-]{0,32}?(?:passw(?:or)?d|passwd|pwd|token|secret|api-?key|access-?key)"
    r"[A-Za-z0-9-]{0,32}|pass)(?:=|[ \t]+)(?P<q>['\"]?)(?P<s>[^\s'\"]{1,256})(?P=q)(?![^\s'\"])",
    re.IGNORECASE,
)
#   -u USER:PASSWORD and --user USER:PASSWORD (curl, wget, httpie's -a too), -uUSER:PASSWORD;
_USER_PASSWORD_RE = re.compile(
    r"(?<![\w-])(?:-[ua][ \t]*|--user(?:=|[ \t]+)|--auth(?:=|[ \t]+))(?P<q>['\"]?)"
    r"(?P<user>[^\s:'\"]{1,128}):(?P<s>[^\s'\"]{1,256})(?P=q)(?![^\s'\"])"
)
#   -p VALUE where the command is sshpass or a user was named first (mongo -u app -p ..., docker
#   login -u me -p ...): elsewhere -p is a port (ssh, docker run), a parent (mkdir) or a plugin.
_SHORT_P_RE = re.compile(r"(?<![\w-])-p(?:[ \t]+|(?=[^\s-]))(?P<q>['\"]?)(?P<s>[^\s'\"]{1,256})(?P=q)(?![^\s'\"])")
_P_CONTEXT_RE = re.compile(r"\bsshpass\b|(?<![\w-])(?:-u|-U|-l|--user(?:name)?)(?:[ \t=]|(?=\w))")
# A vendor token broken over a space or a line (a wrapped log, a pasted terminal): its known
# prefix, with at most a few pieces of the rest after whitespace; the pieces are re-joined and
# tried against the vendor's pattern.
# One named group per vendor kind, so a head is tried against its own patterns only.
_SPLIT_PREFIXES = (
    ("aws_access_key", r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{0,15}"),
    ("github_token", r"(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{0,80}"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_-]{0,80}"),
    ("slack_token", r"xox[abposre]-[A-Za-z0-9-]{0,80}"),
    ("stripe_key", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{0,80}"),
    ("google_api_key", r"AIza[0-9A-Za-z_-]{0,34}"),
    ("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{0,80}"),
    ("npm_token", r"npm_[A-Za-z0-9]{0,35}"),
    ("huggingface_token", r"hf_[A-Za-z0-9]{0,39}"),
)
_SPLIT_HEAD_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:" + "|".join(f"(?P<{kind}>{prefix})" for kind, prefix in _SPLIT_PREFIXES) + r")"
    r"(?=[ \t]{0,4}(?:\r?\n)?[ \t]{0,8}[A-Za-z0-9])"
)
_SPLIT_PIECE_RE = re.compile(r"[ \t]{0,4}(?:\r?\n)?[ \t]{0,8}(?P<piece>[A-Za-z0-9_-]{1,255})")
_SPLIT_MAX_PIECES = 4
# Tokens pasted encoded: as hex (one byte, two digits; \xNN escapes too) or percent-encoded.
# Both are decoded and the result searched for a vendor token, so hashes and ids, which decode to
# no text, are never flagged.
_HEX_RUN_RE = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{40,4096}(?![0-9A-Za-z])")
_HEX_ESCAPES_RE = re.compile(r"(?:\\x[0-9A-Fa-f]{2}){20,2048}")
_PERCENT_RUN_RE = re.compile(r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9_.~+-]){20,4096}")
# What the scanner reads is the text as a terminal or a tool would hand it on: NFKC folds
# fullwidth and other compatibility forms back to ASCII (ｇｈｐ＿... is a working ghp_ token once a
# shell or an API normalises it), and combining marks and format characters (zero-width space and
# joiners, soft hyphen, BOM, bidi controls) are dropped: each splits a token for the eye and for a
# regex alike, and no token holds one.
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")
_DROPPED_CATEGORIES = frozenset({"Mn", "Mc", "Me", "Cf"})
# A base64 run long enough to hide a vendor token (ghp_ + 36 is 56 characters encoded).
_BASE64_RUN_RE = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=_-])")
_BASE64_MAX = 4096
# OpenAI keys (sk-..., sk-proj-...) share their prefix with ordinary hyphenated words
# ("sk-learn", "sk-batch-ingest"), so a candidate must also look random (see _random_enough).
_OPENAI_RE = re.compile(r"(?<![A-Za-z0-9_-])(?P<s>sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})")
_URL_CREDENTIALS_RE = re.compile(
    # The lookbehind and the bounded scheme keep this linear on a long run of letters (a base64 blob).
    r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31})://"
    r"(?P<user>[^\s:/?#@'\"<>]*):(?P<s>[^\s/?#@'\"<>]+)@(?P<host>[^\s/?#@'\"<>]+)"
)
_BEARER_RE = re.compile(r"\b[Bb]earer\s+(?P<s>[A-Za-z0-9._~+/-]{20,}=*)")
_BASIC_RE = re.compile(r"\b[Bb]asic\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
# Local development defaults are in every README and docker-compose file; refusing them helps no one.
_DEV_PASSWORDS = frozenset(
    {"pass", "pw", "pwd", "passwd", "postgres", "root", "admin", "guest", "test", "dev", "mysql"}
)
_LOCAL_HOST_RE = re.compile(r"^(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\]|host\.docker\.internal)(?::\d+)?$")

_KEYWORD = (
    r"passw(?:or)?d|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key"
    r"|client[_-]?secret|auth[_-]?key|credentials?|session[_-]?key|signing[_-]?key|encryption[_-]?key"
)
# name: value, name = value, "name": "value", NAME := value, name => value, and `db password = ...`.
# Found from the keyword out: the keyword first (a plain search), then the name around it, which
# may glue the keyword to other words (PGPASSWORD, dbPassword, authToken, max_tokens), then the
# separator and the value. One regex that tried every name start was three times slower.
# Searched in the lower-cased text: case-sensitive, the regex engine skips ahead by first
# character, which an IGNORECASE alternation cannot (ten times slower on a long memory).
_KEYWORD_RE = re.compile(_KEYWORD)
_KEYWORD_ANY_CASE_RE = re.compile(_KEYWORD, re.IGNORECASE)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_MAX = 64
_ASSIGNMENT_TAIL_RE = re.compile(
    # Bounded repetitions: unbounded ones go quadratic on a long a_b_c_... chain.
    r"(?P<tail>[A-Za-z0-9]{0,32}(?:[_-][A-Za-z0-9]{1,32}){0,4})"
    r"[\"']?[ \t]*(?P<sep>:=|=>|==|=|:)[ \t]*"
    # Bounded values: a rejected value is scanned again for an assignment inside it.
    r"(?:\"(?P<dq>[^\"\n]{0,512})\"|'(?P<sq>[^'\n]{0,512})'|`(?P<bq>[^`\n]{0,512})`|(?P<bare>[^\s\"'`,;]{1,512}))",
)
# Names that describe a secret rather than hold one: token_id, password_file, secret_name, ...
_METADATA_SUFFIX_RE = re.compile(
    r"[_-](?:ids?|names?|types?|counts?|len|length|url|uri|endpoint|file|path|dir|env|var|field|header"
    r"|prefix|format|expiry|expires|ttl|limit|max|min|size|policy|hint|label|version|provider|source)$",
    re.IGNORECASE,
)
_PLACEHOLDER_RE = re.compile(
    r"^[$<{%\[(*#]|\$\{|\{\{|%\(|environ|getenv|process\.env|\bENV\[|secrets\.|vault|keyring"
    r"|example|placeholder|changeme|change[_-]me|your[_-]|redacted|dummy|sample|replace|xxxx|\.\.\.|…"
    r"|todo|fixme|password|secret|^none$|^null$|^nil$|^true$|^false$|^undefined$",
    re.IGNORECASE,
)
_IDENTIFIER_RE = re.compile(
    r"[a-z]+(?:[_.-][a-z0-9]+)*"  # snake_case / dotted / kebab words
    r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*"  # ENV_VAR_NAME
    r"|(?:[A-Z][a-z]+|[a-z]+)(?:[A-Z][a-z]+)*"  # CamelCase words; one parse per string, no backtracking blowup
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"  # settings.OPENAI_API_KEY
)
_HEX_RE = re.compile(r"[0-9a-f]+|[0-9A-F]+")


def find_secrets(text: str) -> list[Finding]:
    """Likely secrets in ``text``, in order of appearance. An empty list means none were found."""
    return [finding for _, _, finding in _scan(text)]


REDACTED = "[REDACTED:{kind}]"
_PEM_END_RE = re.compile(r"-----END [A-Z0-9 ]*-----|\Z")


def redact(text: str) -> tuple[str, list[Finding]]:
    """``text`` with every likely secret replaced by ``[REDACTED:<kind>]``, and what was found.

    For logs that must not fail (an episode event): refusing would lose the rest of the line,
    keeping it would carry the secret into git. A private key loses everything up to its END
    line, not only the header the detector recognises."""
    spans = _scan(text)
    return _cut(text, spans, lambda finding: REDACTED.format(kind=finding.kind)), [f for _, _, f in spans]


def without_secrets(text: str) -> str:
    """``text`` with every likely secret cut out (a space in its place), for what is made from a
    memory's text and travels with it: its file name."""
    return _cut(text, _scan(text), lambda _finding: " ")


def _cut(text: str, spans: list[tuple[int, int, Finding]], replacement: Callable[[Finding], str]) -> str:
    if not spans:
        return text
    out: list[str] = []
    pos = 0
    for start, end, finding in spans:
        if start < pos:
            continue  # inside a private key block already cut
        if finding.kind == "private_key":
            end = _PEM_END_RE.search(text, end).end()  # type: ignore[union-attr]  # \Z always matches
        out.append(text[pos:start])
        out.append(replacement(finding))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _scan(text: str) -> list[tuple[int, int, Finding]]:
    """(start, end, finding) of each likely secret, in order of appearance; spans index ``text``
    as given, though the scan reads its normalised form."""
    if not text:
        return []
    normal, origin = normalise(text)
    if origin is None:
        return _scan_visible(text)
    # Each normalised character knows the one it came from; no newline is dropped or made, so lines hold.
    return [(origin[start], origin[end - 1] + 1, finding) for start, end, finding in _scan_visible(normal)]


def normalise(text: str) -> tuple[str, list[int] | None]:
    """``text`` NFKC-folded, with combining marks and format characters dropped, and the index in
    ``text`` of each character of the result (None when nothing changed: ASCII, most prose).

    Folded one character at a time, so that every character of the result points back to one of
    the original: a redaction cuts the original span, whatever width its characters had."""
    if text.isascii():
        return text, None
    out: list[str] = []
    origin: list[int] = []
    pos = 0
    changed = False
    for m in _NON_ASCII_RE.finditer(text):
        out.append(text[pos:m.start()])
        origin.extend(range(pos, m.start()))
        for i in range(m.start(), m.end()):
            char = text[i]
            if unicodedata.category(char) in _DROPPED_CATEGORIES:
                changed = True
                continue
            folded = unicodedata.normalize("NFKC", char)
            if folded != char:
                changed = True
                folded = "".join(c for c in folded if unicodedata.category(c) not in _DROPPED_CATEGORIES)
            out.append(folded)
            origin.extend([i] * len(folded))
        pos = m.end()
    if not changed:
        return text, None
    out.append(text[pos:])
    origin.extend(range(pos, len(text)))
    return "".join(out), origin


def _scan_visible(text: str) -> list[tuple[int, int, Finding]]:
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, int, Finding]] = []

    def add(kind: str, start: int, end: int, excerpt: str) -> None:
        if any(start < t_end and t_start < end for t_start, t_end in taken):
            return  # a more specific pattern already reported this span
        taken.append((start, end))
        found.append((start, end, Finding(kind, text.count("\n", 0, start) + 1, excerpt)))

    for kind, pattern in _TOKEN_PATTERNS:
        for m in pattern.finditer(text):
            if "s" in pattern.groupindex:
                if _published_or_filler(m.group("s")):
                    continue
                add(kind, m.start("s"), m.end("s"), _redact(m.group("s")))
            else:
                add(kind, m.start(), m.end(), m.group(0))
    for m in _SPLIT_HEAD_RE.finditer(text):
        split = _split_token(text, m)
        if split is not None:
            kind, end, joined = split
            add(kind, m.start(), end, _redact(joined))
    aws_lines: dict[int, bool] = {}  # line start -> whether that line speaks of AWS (once per line)
    for m in _AWS_SECRET_RE.finditer(text):
        secret = m.group("s")
        if not (any(c.islower() for c in secret) and any(c.isupper() for c in secret)
                and any(c.isdigit() for c in secret) and shannon_entropy(secret) >= 4.2
                and not _published_or_filler(secret)):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        if line_start not in aws_lines:
            line_end = text.find("\n", m.end())
            aws_lines[line_start] = bool(_AWS_CONTEXT_RE.search(text, line_start, len(text) if line_end < 0
                                                                else line_end))
        if aws_lines[line_start]:
            add("aws_secret_key", m.start("s"), m.end("s"), _redact(secret))
    p_lines: dict[int, int] = {}  # line start -> where its first sshpass or user flag ends (-1: none)
    for regex in (_LONG_FLAG_RE, _USER_PASSWORD_RE, _SHORT_P_RE):
        for m in regex.finditer(text):
            value = m.group("s")
            if regex is _LONG_FLAG_RE and (_METADATA_SUFFIX_RE.search(m.group("name"))
                                           or m.group("name").lower().startswith("no-")):
                continue  # --token-file PATH, --password-stdin, --no-password
            if regex is _USER_PASSWORD_RE and value == m.group("user"):
                continue  # -u app:app is a user and its group (docker run), not a password
            if regex is _SHORT_P_RE and not _names_a_user_before(text, m.start(), p_lines):
                continue
            if _password_like(value, min_length=6):
                add("cli_password", m.start("s"), m.end("s"), _redact(value))
    for kind, regex in (("cli_password", _CLI_PASSWORD_RE), ("netrc_password", _NETRC_RE)):
        for m in regex.finditer(text):
            password = m.group("s")
            if not (_PLACEHOLDER_RE.search(password) or password.lower() in _DEV_PASSWORDS
                    or _published_or_filler(password)):
                add(kind, m.start("s"), m.end("s"), _redact(password))
    for m in _BASE64_RUN_RE.finditer(text):
        hidden = _token_in(_decode_base64(m.group(0)))
        if hidden is not None:
            add(f"base64_{hidden}", m.start(), m.end(), _redact(m.group(0)))
    for m in _HEX_RUN_RE.finditer(text):
        hidden = _token_in(_decode_hex(m.group(0)))
        if hidden is not None:
            add(f"hex_{hidden}", m.start(), m.end(), _redact(m.group(0)))
    if "\\x" in text:
        for m in _HEX_ESCAPES_RE.finditer(text):
            hidden = _token_in(_decode_hex(m.group(0).replace("\\x", "")))
            if hidden is not None:
                add(f"hex_{hidden}", m.start(), m.end(), _redact(m.group(0)))
    if "%" in text:
        for m in _PERCENT_RUN_RE.finditer(text):
            if "%" in m.group(0):
                hidden = _token_in(_decode_percent(m.group(0)))
                if hidden is not None:
                    add(f"urlencoded_{hidden}", m.start(), m.end(), _redact(m.group(0)))
    for m in _OPENAI_RE.finditer(text):
        if _random_enough(m.group("s")[3:], min_length=20):
            add("openai_key", m.start("s"), m.end("s"), _redact(m.group("s")))
    for m in _URL_CREDENTIALS_RE.finditer(text):
        password, host = m.group("s"), m.group("host")
        if not (
            _PLACEHOLDER_RE.search(password)
            or password.lower() in _DEV_PASSWORDS
            or password == m.group("user")
            or _LOCAL_HOST_RE.match(host)
        ):
            excerpt = f"{m.group('scheme')}://{m.group('user')}:{_redact(password)}@{m.group('host')}"
            add("url_credentials", m.start("s"), m.end("s"), excerpt)
    for m in _BEARER_RE.finditer(text):
        if _random_enough(m.group("s"), min_length=20):
            add("bearer_token", m.start("s"), m.end("s"), _redact(m.group("s")))
    for m in _BASIC_RE.finditer(text):
        if _is_basic_credentials(m.group("s")):
            add("basic_auth_header", m.start("s"), m.end("s"), _redact(m.group("s")))
    pos = 0  # keywords before this were read as part of a name, or of a value taken for a secret
    lowered = text.lower()
    keywords = (_KEYWORD_RE.finditer(lowered) if len(lowered) == len(text)  # lower() may lengthen: İ
                else _KEYWORD_ANY_CASE_RE.finditer(text))
    for keyword in keywords:
        if keyword.start() < pos:
            continue
        m = _ASSIGNMENT_TAIL_RE.match(text, keyword.end())
        if m is None:
            continue
        name_start = keyword.start()
        while name_start > 0 and keyword.start() - name_start < _NAME_MAX and text[name_start - 1] in _NAME_CHARS:
            name_start -= 1
        while text[name_start] in "_.-":
            name_start += 1
        name = text[name_start:keyword.end()] + m.group("tail")
        group = next(g for g in ("dq", "sq", "bq", "bare") if m.group(g) is not None)
        value = m.group(group)
        start, end = m.start(group), m.end(group)
        if group == "bare":
            stripped = value.rstrip(".)]}>:")  # sentence or bracket punctuation after a bare value
            end -= len(value) - len(stripped)
            value = stripped
        if (not _METADATA_SUFFIX_RE.search(name) and _secret_value(value)
                and not _prose_label(text, name_start, name, m.group("sep"), value)):
            add("secret_assignment", start, end, f"{name}={_redact(value)}")
            pos = m.end()
        else:
            # "Credentials: DB_PASSWORD=..." : the label's value holds the real assignment.
            pos = m.start(group)
    found.sort(key=lambda item: item[0])
    return found


def assert_no_secrets(text: str, *, field: str = "memory.text") -> None:
    """Raise SecretError naming every likely secret in ``text`` (redacted), or return quietly."""
    findings = find_secrets(text)
    if not findings:
        return
    from memstore.errors import SecretError

    listed = "; ".join(f"{f.kind} on line {f.line} ({f.excerpt})" for f in findings)
    raise SecretError(
        f"{field} looks like it contains a secret: {listed}",
        field=field,
        hint="remove the secret or replace it with a placeholder such as <token> or ${ENV_VAR}",
        details={"findings": [{"kind": f.kind, "line": f.line, "excerpt": f.excerpt} for f in findings]},
    )


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` under its own character distribution."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _secret_value(value: str) -> bool:
    """Whether a value assigned to a secret-sounding name is a real secret, not code or a placeholder:
    a password a person chose (_password_like) or a random token."""
    if "(" in value or re.search(r"=[^=]", value):
        return False  # code: a call, a nested assignment (cheap tests first: a rejected value is rescanned)
    if _password_like(value, min_length=8):
        return True
    if len(value) < 10 or "://" in value or value.startswith(("/", "./", "~/")):
        return False
    if _PLACEHOLDER_RE.search(value) or len(set(value)) <= 3:
        return False
    if _IDENTIFIER_RE.fullmatch(value):
        return False  # code: an attribute, an env var name, plain words
    if _HEX_RE.fullmatch(value):
        return len(value) >= 16 and shannon_entropy(value) >= 3.0
    return _random_enough(value, min_length=10)


def _password_like(value: str, *, min_length: int) -> bool:
    """Whether a literal given where a password goes (a flag, a secret-named key) is one a person
    chose: no variable, path or placeholder, and not a word or a name from code, but letters mixed
    with digits the way passwords are (s3cr3tp4ss, Xk9vQ2mZ, hunter2hunter2!). A version
    (python3.11), a charset (utf8mb4) or a port (8080:80) is none of these."""
    if not min_length <= len(value) <= 256 or value[0] in "$<{%[(*#-\\":
        return False
    if "://" in value or value.startswith(("/", "./", "~/")) or "=" in value:
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False  # cheap tests first: most values are words or numbers
    if _PLACEHOLDER_RE.search(value) or value.lower() in _DEV_PASSWORDS or _published_or_filler(value):
        return False
    if _IDENTIFIER_RE.fullmatch(value) or _HEX_RE.fullmatch(value) or _WORDY_RE.fullmatch(value):
        return False
    if any(not c.isalnum() and c not in "_-.:" for c in value):
        return True  # letters, digits and a symbol: hunter2hunter2!
    # Letters and digits interleaved: s3cr3tp4ss switches 6 times, python3 or utf8mb4 fewer.
    switches = sum(a.isdigit() != b.isdigit() for a, b in pairwise(value) if a.isalnum() and b.isalnum())
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return switches >= 5 or (mixed_case and (switches >= 3 or _random_enough(value, min_length=12)))


# Words and numbers joined by _ - or . ("Build_2024_final"): a name a person chose, not a random value.
_WORDY_RE = re.compile(r"(?:[A-Za-z][a-z]+|[0-9]+)(?:[_.-](?:[A-Za-z][a-z]+|[0-9]+))+")
_PROSE_BEFORE_RE = re.compile(r"[A-Za-z]+[ \t]+$")


def _prose_label(text: str, name_start: int, name: str, sep: str, value: str) -> bool:
    """A secret-sounding word used in a sentence ("The secret: Build_2024_final"): a plain word
    after another word, a colon, and a value made of words and numbers."""
    line_start = text.rfind("\n", 0, name_start) + 1
    return (
        sep == ":"
        and name.isalpha()
        and _PROSE_BEFORE_RE.search(text, line_start, name_start) is not None
        and _WORDY_RE.fullmatch(value) is not None
    )


def _published_or_filler(secret: str) -> bool:
    """A vendor's documented example (AKIAIOSFODNN7EXAMPLE, Azurite's key) or a filled-in placeholder."""
    return "EXAMPLE" in secret or secret in _PUBLISHED_KEYS or _FILLER_RE.search(secret) is not None


def _decode_base64(run: str) -> str | None:
    import base64
    import binascii

    if len(run) > _BASE64_MAX:
        return None
    try:
        return base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None  # not base64, or bytes that are no text (an image, a hash): no token to find


def _decode_hex(run: str) -> str | None:
    try:
        return bytes.fromhex(run).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None  # an odd length, or a hash or an id: bytes that are no text


def _decode_percent(run: str) -> str | None:
    from urllib.parse import unquote

    return unquote(run, errors="strict") if "%" in run else None


def _token_in(decoded: str | None) -> str | None:
    """The kind of vendor token in a decoded run (a token pasted encoded), if any."""
    if not decoded:
        return None
    for kind, pattern in _TOKEN_PATTERNS:
        for inner in pattern.finditer(decoded):
            if "s" not in pattern.groupindex or not _published_or_filler(inner.group("s")):
                return kind
    return None


def _names_a_user_before(text: str, pos: int, lines: dict[int, int]) -> bool:
    """Whether the line holding ``pos`` names sshpass or a user flag before it (looked up once per
    line: a line of a thousand ``-p`` is not scanned a thousand times)."""
    line_start = text.rfind("\n", 0, pos) + 1
    if line_start not in lines:
        line_end = text.find("\n", pos)
        first = _P_CONTEXT_RE.search(text, line_start, len(text) if line_end < 0 else line_end)
        lines[line_start] = -1 if first is None else first.end()
    return 0 <= lines[line_start] <= pos


def _split_token(text: str, head: re.Match[str]) -> tuple[str, int, str] | None:
    """(kind, end, token) of a vendor token whose prefix ``head`` found, re-joined over the
    whitespace that splits it: the fewest pieces that make a whole token under a vendor pattern,
    so a word after a complete token is never taken into it."""
    joined = head.group(0)
    pos = head.end()
    for _ in range(_SPLIT_MAX_PIECES):
        piece = _SPLIT_PIECE_RE.match(text, pos)
        if piece is None or piece.start("piece") == pos:
            return None  # no whitespace before it: the token simply goes on (the vendor rules judge it)
        if _SPLIT_HEAD_RE.match(text, piece.start("piece")) is not None:
            return None  # the piece opens a token of its own
        joined += piece.group("piece")
        pos = piece.end()
        for kind, pattern in _TOKEN_PATTERNS:
            if kind != head.lastgroup:
                continue
            whole = pattern.fullmatch(joined)
            if whole is not None and "s" in pattern.groupindex:
                secret = whole.group("s")
                if not _published_or_filler(secret) and _split_body_random(secret):
                    return kind, pos, secret
    return None


def _split_body_random(token: str) -> bool:
    """Pieces of a real token hold digits and look random; words of prose after a prefix
    ("ghp_ tokens are ...") hold no digit."""
    return any(c.isdigit() for c in token) and shannon_entropy(token) >= 3.5


def _is_basic_credentials(encoded: str) -> bool:
    """Whether an HTTP Basic value decodes to a printable ``user:password``; prose after "basic" rarely does."""
    import base64
    import binascii

    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    _user, sep, password = decoded.partition(":")
    return bool(sep and password and decoded.isprintable() and password.lower() not in _DEV_PASSWORDS)


def _random_enough(value: str, *, min_length: int) -> bool:
    """Base64-ish randomness: long enough, mixed character classes, ≥ 3.5 bits/char (3.0 when short)."""
    if len(value) < min_length:
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    has_digit = any(c.isdigit() for c in value)
    if classes < 3 and not (has_digit and classes == 2):
        return False
    return shannon_entropy(value) >= (3.5 if len(value) >= 16 else 3.0)


def _redact(secret: str) -> str:
    """Keep a few characters at each end (enough to recognise, never enough to use): AKIA…XYZ1."""
    keep = 4 if len(secret) >= 20 else 2 if len(secret) >= 10 else 1
    return f"{secret[:keep]}…{secret[-keep:]}"
