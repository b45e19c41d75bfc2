"""The secret detector: every class is found, ordinary technical prose never is."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliResult, git, staged, store_files, write_req

from memstore.errors import SecretError
from memstore.git import hooks
from memstore.store.disk import slugify
from memstore.store.secrets import (
    Finding,
    assert_no_secrets,
    find_secrets,
    normalise,
    redact,
    shannon_entropy,
    without_secrets,
)

# Fake secrets are assembled from pieces so that repository secret scanners do not flag this file.
SECRETS: dict[str, tuple[str, str]] = {
    "aws": ("aws_access_key", "the old config had " + "AKIA" + "Q3EGRAV7PLM2XT5B in it"),
    "aws_sts": ("aws_access_key", "temporary key " + "ASIA" + "Y34FZKBOKMUTVV7A leaked in the CI log"),
    "github": ("github_token", "push with " + "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
    "github_oauth": ("github_token", "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a"),
    "github_app": ("github_token", "installation token " + "ghs_" + "Zx8Wv6Ut4Sr2Qp0On8Ml6Kj4Ih2Gf0Ed8Cb6A"),
    "github_pat": (
        "github_token",
        "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456",
    ),
    "slack": ("slack_token", "the bot uses " + "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    "stripe": ("stripe_key", "STRIPE_KEY was " + "sk_live_" + "51HqLyjWDarjtT1zdp7dcXYZabc123"),
    "stripe_restricted": ("stripe_key", "rk_live_" + "51HqLyjWDarjtT1zdp7dcXYZabc123"),
    "google": ("google_api_key", "maps key " + "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    "openai": ("openai_key", "OPENAI key " + "sk-" + "proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f"),
    "openai_legacy": ("openai_key", "sk-" + "T3BlbkFJx7Qm2Zp9Lk4Vb8Nc1Rd5Gh6Jw0Ys3Ea"),
    "anthropic": ("anthropic_key", "use " + "sk-ant-" + "api03-Xy9zAb3cDe6fGh9iJk2lMn5oPq8rSt1uVw4xYz7aBc0dEf"),
    "jwt": (
        "jwt",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
        + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
        + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ),
    "url_credentials": (
        "url_credentials",
        "clone via https://deploy:" + "s3cr3tP4ss" + "@git.example.com/org/repo.git",
    ),
    "url_credentials_db": (
        "url_credentials",
        "DATABASE_URL=postgres://app:" + "Xk9vQ2mZ7rT1" + "@db.prod.internal/app",
    ),
    "basic_header": ("basic_auth_header", 'curl -H "Authorization: Basic ' + "YWRtaW46czNjcjN0UEA1NQ==" + '"'),
    "bearer": ("bearer_token", "header was Bearer " + "q8Zf3Lk2Vx9Pw4Rt7Yb1Nm6Hc5Jd0Gs"),
    "pem": (
        "private_key",
        "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\n-----END RSA " + "PRIVATE KEY-----",
    ),
    "pkcs8": ("private_key", "-----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"),
    "ec": ("private_key", "-----BEGIN EC " + "PRIVATE KEY-----"),
    "openssh": (
        "private_key",
        "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH " + "PRIVATE KEY-----",
    ),
    "password": ("secret_assignment", 'db password = "' + "Tr0ub4dor&3xK9!mQz" + '"'),
    "password_yaml": ("secret_assignment", "DB_PASSWORD: " + "n7Kq2Wx9Lr4Tz8Vm"),
    "api_key_hex": ("secret_assignment", "api_key: " + "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    "token_b64": ("secret_assignment", "token=" + "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"),
    "json_secret": ("secret_assignment", '{"client_secret": "' + "p9S2x7Lq4Vz1Rk8Nw3Tj" + '"}'),
    "header_api_key": ("secret_assignment", "X-Api-Key: " + "7Hq2Lp9Zx4Wv1Rk8Tn3J"),
}

# Realistic memory text. Every one must pass: a false positive refuses the user's memory.
BENIGN = [
    "Running migration 0042 failed because column tracking_code already exists; use op.add_column with if_not_exists",
    "Fixed in commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 after bisecting from 9c1e8b7.",
    "git log --oneline shows a1b2c3d, then e4f5a6b reverted the faiss IndexFlatIP change.",
    "The solution for problem 01jd8x4k2m9q7r3t5v6w8y0z1a is in solutions/01jd8x4k2m9q7r3t5v6w8y0z1b-fix-migration.md",
    "The ULID 01HZX3K9Q2V7R4T6W8Y0A1B2C3 sorts after 01HZX3K9Q2V7R4T6W8Y0A1B2C2 by time.",
    "Request id 550e8400-e29b-41d4-a716-446655440000 shows the retry loop hitting the 30s timeout.",
    "The wheel sha256 is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 so the cache key matched.",
    "Docker image digest sha256:4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b was pinned.",
    "lock integrity 'sha512-Mc/7NbmtjkhAhwgKjfxAbr1jHTf1QPSg7JWsW+7YBdeHdbYA2UO2l7u06k3SbnhJzwPk9MtdjTiPpqNy1N0Ug=='"
    " changed after the registry rebuilt the tarball.",
    'Embed icons as data URIs, e.g. src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAA'
    'DUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==" in the email template.',
    "We tried base64-encoding the payload (dGhpcyBpcyBhIHRlc3Q=) but the gateway still rejected it.",
    'Etag header was W/"5e8f3c2a91b4d7e6" and the CDN kept serving the old bundle.',
    "Config lives in src/memstore/config/defaults.yaml; the loader is memstore.store.config.load_config(path).",
    "Use https://docs.python.org/3/library/importlib.resources.html#importlib.resources.files for package data.",
    "Connect with postgresql://localhost:5432/app_dev and run alembic upgrade head.",
    "docker-compose uses postgres://postgres:postgres@localhost:5432/test for the integration tests.",
    "Docs show the form postgresql://user:password@host/db; fill it from the secret manager.",
    "Set password = os.environ['DB_PASSWORD'] instead of hard-coding it in settings.py.",
    "Use token=${GITHUB_TOKEN} in the CI job; never paste the actual value.",
    "The README says api_key: <your-api-key> which users must replace before running.",
    "In the example config, password: changeme is a placeholder and the test suite overrides it.",
    "secret_key = 'xxxxxxxxxxxxxxxx' in the template; the real one comes from Vault.",
    "api_key = settings.OPENAI_API_KEY  # loaded from env",
    "auth_token = get_token_from_keyring(service_name) is the pattern we settled on.",
    'password: "{{ vault_db_password }}" in the ansible vars file.',
    "client_secret: ${{ secrets.CLIENT_SECRET }} in the GitHub Actions workflow.",
    "token_id: 01jd8x4k2m9q7r3t5v6w8y0z1a identifies the revoked credential, not the credential itself.",
    'password_hash = "$2b$12$KIXQJ3Rr8vHkLHq9dOe7N.cY2m1kUj4QOXhZKp6Z8e5Z0oJ9nG3aS" is how Django stores it.',
    "The password field must be at least 12 characters; validation happens in forms/auth.py line 88.",
    "Function signature: def authenticate(username: str, password: str) -> Session raises AuthError.",
    "Auth tokens expire after 3600 seconds; refresh via POST /oauth/token with grant_type=refresh_token.",
    "The token counter in tokenizer.py was off by one for multi-byte characters like é and 漢.",
    "max_tokens = 4096 is the ceiling; input_tokens: 1834 in the last run.",
    "The secret: PYTHONHASHSEED=0 makes the test ordering deterministic.",
    "The skeleton key concept: sk-learn is not a thing, it's sklearn (scikit-learn).",
    "Use the task-queue name 'sk-batch-ingest-nightly-rebuild' for the nightly job.",
    "AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key id.",
    "The IAM role id AROA3XFRBF535PLBIFPI30 shows up in CloudTrail for the deploy role.",
    "Basic usage: memstore read --json - < request.json; basic auth is not supported by the daemon.",
    "Set MEMSTORE_HOME=~/.memory-test to isolate the global store in tests.",
    "Python package faiss-cpu 1.15.1 segfaults on ARM; pin to 1.14.0 until the fix ships.",
    "Reviewers prefer small PRs; squash fixups before merging into main. Fixes #1234, closes JIRA-5678.",
    "ssh://git@github.com:22/org/repo.git needs the deploy key from ~/.ssh/id_ed25519, not a password.",
    "Hash of the embedding cache entry: 9b74c9897bac770ffc029102a200c5de (md5 of the text).",
]


@pytest.mark.parametrize("case", sorted(SECRETS))
def test_each_secret_class_is_found(case: str) -> None:
    kind, text = SECRETS[case]
    findings = find_secrets(text)
    assert [f.kind for f in findings] == [kind], findings


# Beyond the evaluation corpus above (whose numbers are quoted in memstore/secrets.py).
MORE_VENDORS = [
    ("gitlab_token", "glpat-" + "xR7kQ2mZ9vL4tW1nB8cY"),
    ("npm_token", "//registry.npmjs.org/:_authToken=" + "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("pypi_token", "pypi-" + "AgEIcHlwaS5vcmcCJGE4ZjY3ZDQ4LTk5YjEtNGQ5Yi04YjQ2LTJmNDk3ZjQyZDA0YgACJXsi"),
    ("huggingface_token", "HF_TOKEN " + "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"),
    ("sendgrid_key", "SG." + "a1B2c3D4e5F6g7H8i9J0kL" + "." + "m1N2o3P4q5R6s7T8u9V0w1X2y3Z4a5B6c7D8e9F0g1H"),
    ("slack_webhook", "https://hooks.slack.com/services/" + "T0ABCDEF1/B0GHIJKL2/" + "aBcDeFgHiJkLmNoPqRsTuVwX"),
]


@pytest.mark.parametrize(("kind", "text"), MORE_VENDORS)
def test_more_vendor_tokens_are_found(kind: str, text: str) -> None:
    assert [f.kind for f in find_secrets(text)] == [kind]


@pytest.mark.parametrize("text", BENIGN)
def test_benign_technical_prose_is_not_flagged(text: str) -> None:
    assert find_secrets(text) == []


def test_benign_corpus_is_large_enough() -> None:
    assert len(BENIGN) >= 15


def test_excerpt_is_redacted_and_never_the_secret() -> None:
    secret = "AKIA" + "Q3EGRAV7PLM2XYZ1"
    (finding,) = find_secrets(f"key {secret} here")
    assert finding.excerpt == "AKIA…XYZ1"
    for _kind, text in SECRETS.values():
        for found in find_secrets(text):
            if found.kind == "private_key":
                assert found.excerpt.startswith("-----BEGIN")  # the header only, never the key body
            elif found.kind == "url_credentials":
                assert found.excerpt.count("…") == 1
            else:
                head, _, tail = found.excerpt.rpartition("…")
                assert head and tail and len(tail) <= 4


def test_url_credentials_excerpt_keeps_the_host_but_hides_the_password() -> None:
    (finding,) = find_secrets("https://deploy:" + "s3cr3tP4ss" + "@git.example.com/x")
    assert finding.excerpt == "https://deploy:s3…ss@git.example.com"


def test_line_numbers_are_one_based_and_findings_in_order() -> None:
    text = "\n".join(
        [
            "first line is fine",
            "token " + "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
            "",
            "and a key: " + "AKIA" + "Q3EGRAV7PLM2XT5B",
        ]
    )
    assert [(f.kind, f.line) for f in find_secrets(text)] == [("github_token", 2), ("aws_access_key", 4)]


def test_a_token_inside_an_assignment_is_reported_once_by_its_specific_kind() -> None:
    findings = find_secrets("GITHUB_TOKEN=" + "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789")
    assert [f.kind for f in findings] == ["github_token"]


def test_finding_is_a_frozen_value() -> None:
    finding = Finding("jwt", 1, "eyJh…sw5c")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.kind = "other"  # type: ignore[misc]
    assert finding == Finding("jwt", 1, "eyJh…sw5c")


def test_empty_text() -> None:
    assert find_secrets("") == []


def test_entropy() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)


def test_assert_no_secrets_raises_secret_error_with_field_and_redacted_findings() -> None:
    assert_no_secrets(BENIGN[0])
    secret = "AKIA" + "Q3EGRAV7PLM2XT5B"
    with pytest.raises(SecretError) as info:
        assert_no_secrets(f"deploy with {secret}", field="memory.text")
    error = info.value
    assert error.field == "memory.text"
    assert error.exit_code == 2
    payload = error.to_json()
    assert payload["error"]["code"] == "secret"
    assert payload["error"]["findings"] == [{"kind": "aws_access_key", "line": 1, "excerpt": "AKIA…XT5B"}]
    assert secret not in str(payload)


@pytest.mark.parametrize(
    "text",
    [
        "a_" * 50_000,
        "QUJD" * 25_000,
        "a" * 100_000 + "1",
        "ab" * 50_000 + "://",
        "token=" * 20_000,
        "password = " + "x1" * 50_000,
        "mysql " * 20_000,
        "machine a " * 20_000,
        ("ab" * 20 + " ") * 2_500,
        "password: " * 20_000,
        "QUJD" * 1_000 + " ",
    ],
)
def test_pathological_input_stays_linear(text: str) -> None:
    start = time.perf_counter()
    find_secrets(text)
    assert time.perf_counter() - start < 1.0


def test_typical_memory_is_fast() -> None:
    text = " ".join(BENIGN[:10])
    find_secrets(text)
    start = time.perf_counter()
    for _ in range(100):
        find_secrets(text)
    assert (time.perf_counter() - start) / 100 < 0.005


CORPUS_FILE = Path(__file__).parent / "data" / "secrets_corpus.jsonl"


def load_corpus() -> list[dict]:
    """tests/data/secrets_corpus.jsonl: positives (stored in parts, joined) and their look-alikes."""
    rows = [json.loads(line) for line in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        row["text"] = "".join(row["parts"]) if "parts" in row else row["text"]
    return rows


CORPUS = load_corpus()


@pytest.mark.parametrize("row", [r for r in CORPUS if r["secret"]], ids=lambda r: r["id"])
def test_corpus_secret_is_found_by_its_kind_and_never_echoed(row: dict) -> None:
    findings = find_secrets(row["text"])
    assert row["kind"] in [f.kind for f in findings], findings
    for finding in findings:
        assert "…" in finding.excerpt or finding.kind == "private_key"
    redacted, _ = redact(row["text"])
    assert find_secrets(redacted) == [], redacted  # the whole secret is cut, not a piece of it


@pytest.mark.parametrize("row", [r for r in CORPUS if not r["secret"]], ids=lambda r: r["id"])
def test_corpus_look_alike_is_not_flagged(row: dict) -> None:
    assert find_secrets(row["text"]) == []


def test_corpus_has_as_many_look_alikes_as_secrets() -> None:
    positives = [r for r in CORPUS if r["secret"]]
    assert len(positives) == len(CORPUS) - len(positives) >= 50
    assert len({r["id"] for r in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("text", "excerpt"), [
    ("mysql -u app -p" + "Qz7xR2vL" + " shop", "Q…L"),  # under 10 characters: one at each end
    ("mysql -u app -p" + "Qz7xR2vLk9" + " shop", "Qz…k9"),  # 10 to 19: two
    ("mysql -u app -p" + "Qz7xR2vLk9Qz7xR2vLk9" + " shop", "Qz7x…vLk9"),  # 20 and more: four
])
def test_a_short_secret_keeps_fewer_characters_in_its_excerpt(text: str, excerpt: str) -> None:
    """An excerpt identifies a secret without handing it over: four characters at each end of an
    8-character password would leave nothing hidden."""
    assert [f.excerpt for f in find_secrets(text)] == [excerpt]


GH_TOKEN = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"


def test_redact_replaces_exactly_each_secret_and_keeps_the_rest() -> None:
    """What an episode log keeps: every character around a secret, none of the secret."""
    assert redact(f"{GH_TOKEN} pushed, then {GH_TOKEN[:10]}\u200b{GH_TOKEN[10:]} again.") == (
        "[REDACTED:github_token] pushed, then [REDACTED:github_token] again.",
        [Finding("github_token", 1, "ghp_…6789"), Finding("github_token", 1, "ghp_…6789")])
    assert redact("plain text") == ("plain text", [])


def test_redact_cuts_a_private_key_to_its_end_line_once() -> None:
    """A key's body goes with its header; a token inside the body is not cut twice (which would
    put part of the key back)."""
    pem = ("-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234 " + GH_TOKEN + "\nQUJD\n-----END RSA "
           + "PRIVATE KEY-----")
    text, found = redact(f"before\n{pem}\nafter {GH_TOKEN}")
    assert text == "before\n[REDACTED:private_key]\nafter [REDACTED:github_token]"
    assert [f.kind for f in found] == ["private_key", "github_token", "github_token"]


def test_line_numbers_count_a_leading_newline() -> None:
    assert [f.line for f in find_secrets(f"\n\nthe token {GH_TOKEN}")] == [3]


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzK9Qm2Lp8X"


@pytest.mark.parametrize(("text", "found"), [
    ("AWS " + AWS_SECRET, True),  # the context word opens the line
    ("aws secret " + "PId0EA0QOM00fJOJ3eAEKCTBR0ehfiIdGCI1NQhT", True),  # repeats, 4.36 bits/char: still random
    ("aws fixture " + "Aa1Bb2Cc3D" * 4, False),  # a pattern, not a key (3.3 bits/char)
    ("aws bucket " + AWS_SECRET.lower(), False),  # one case only
    ("aws bucket " + AWS_SECRET.replace("7", "x").replace("9", "y").replace("2", "z").replace("8", "w"), False),
    ("first line speaks of AWS\nsecond holds " + AWS_SECRET, False),  # context is the key's own line
    ("the key " + AWS_SECRET, False),  # no AWS context at all
])
def test_an_aws_secret_key_needs_its_line_to_speak_of_aws_and_to_look_random(text: str, found: bool) -> None:
    assert bool(find_secrets(text)) is found


@pytest.mark.parametrize(("text", "kind", "excerpt"), [
    ("sk-" + "Ab3dEf6hIj9kLm2nOp5q", "openai_key", "sk-A…Op5q"),  # the shortest OpenAI key: 20 after sk-
    ("Authorization: Bearer " + "q8Zf3Lk2Vx9Pw4Rt7Yb1", "bearer_token", "q8Zf…7Yb1"),  # the shortest: 20
    ("Set password: " + "Xk9vQ2mZ7rT1wL.", "secret_assignment", "password=Xk…wL"),  # the full stop is prose
    ("(token=" + "Xk9vQ2mZ7rT1wL)", "secret_assignment", "token=Xk…wL"),  # so is a closing bracket
    ('secret = "' + "Xk9vQ2mZ7rT1w)" + '"', "secret_assignment", "secret=Xk…w)"),  # inside quotes it is the value
])
def test_shortest_tokens_and_the_end_of_an_assigned_value(text: str, kind: str, excerpt: str) -> None:
    assert [(f.kind, f.excerpt) for f in find_secrets(text)] == [(kind, excerpt)]


@pytest.mark.parametrize(("text", "found"), [
    ("password: " + "Xk9vQ2mZ", True),  # eight characters mixing letters and digits: a chosen password
    ("password: " + "Xk9vQ2m", False),  # seven: too short to tell from a word or a version
    ("password: " + "Xk9vQ2mZ7r", True),  # ten: random enough on its own
    ("api_key: " + "3a9f0c7e3a1d9a4f", True),  # sixteen hex digits, 3.3 bits/char: a key
    ("api_key: " + "3a9f0c7e3a1d9a", False),  # fourteen: a short commit id, not a key
    ("auth_token: https://auth.example.com/" + "Xk9vQ2mZ7rTw", False),  # where a token comes from
    ("secret_key: /etc/app/keys/" + "Xk9vQ2mZ7rTw.pem", False),  # where it lives
    ("signing_key = ./keys/" + "Xk9vQ2mZ7rTw.pem", False),
    ("private_key: ~/keys/" + "Xk9vQ2mZ7rTw.pem", False),
    ("A secret: Build_2024_final", False),  # prose after a one-letter word
    ("secret: Build_2024_final", True),  # a YAML key, not a sentence: a person's password
])
def test_assigned_values_length_hex_paths_and_prose(text: str, found: bool) -> None:
    assert bool(find_secrets(text)) is found


@pytest.mark.parametrize(("text", "kinds"), [
    ("key.b64: " + "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==", ["base64_private_key"]),  # a PEM header
    ("sample: " + "QUtJQUlPU0ZPRE5ON0VYQU1QTEU=", []),  # AWS's documented example key, encoded
    ('curl -H "Authorization: Basic ' + "dXNlcm5hbWU=" + '"', []),  # "username": no user:password pair
    ('curl -H "Authorization: Basic ' + "YWRtaW46YWRtaW4=" + '"', []),  # admin:admin, a local default
    ("Authorization: Bearer " + "abcdefghijklmnopqrstuvwxyz", []),  # one character class: the alphabet
    ("Authorization: Bearer " + "3f2a9c1e8b7d6a5f4e3d2c1b", ["bearer_token"]),  # hex: digits and one case
    # A pattern (3.25 bits/char) is not random, but given to a password it is a literal one a person chose.
    ("password: " + "Ab1Ab2Cd1Cd2Ef3G", ["secret_assignment"]),
    ("api_key: " + "Ab1Ab2Cd1Cd2Ef3G", ["secret_assignment"]),
])
def test_encoded_headers_and_randomness_edges(text: str, kinds: list[str]) -> None:
    assert [f.kind for f in find_secrets(text)] == kinds


# The forms that reached git before the scanner normalised text and knew command-line passwords,
# split and encoded tokens: each is refused by a write and by the pre-commit hook, and redacted
# from an episode log.
E2E_FORMS = ["curl_u_password", "curl_user_long_flag", "sshpass_p", "pgpassword_export", "yaml_password_chosen",
             "aws_split_space", "aws_split_newline", "fullwidth_prefix", "combining_mark", "hex_github",
             "percent_github_query"]
BY_ID = {row["id"]: row for row in CORPUS}


def echoes_a_secret(*outputs: object) -> bool:
    return any(find_secrets(o if isinstance(o, str) else json.dumps(o, ensure_ascii=False)) for o in outputs)


@pytest.mark.parametrize("form", E2E_FORMS)
def test_a_write_holding_the_form_is_refused_with_the_secret_error_and_nothing_is_written(
        repo: Path, cli: Callable[..., CliResult], form: str) -> None:
    row = BY_ID[form]
    files, index = store_files(repo), staged(repo)
    code, out, err = cli("write", "--json", "-", cwd=repo, input=json.dumps(write_req("fact", row["text"])))
    assert code == 2, out
    assert out["ok"] is False and out["error"]["code"] == "secret" and out["error"]["field"] == "memory.text"
    assert store_files(repo) == files and staged(repo) == index
    assert not echoes_a_secret(out, err)


def commit(repo: Path, message: str) -> subprocess.CompletedProcess[str]:
    """`git commit` with memstore's hooks running."""
    return subprocess.run(["git", "commit", "-q", "-m", message], cwd=repo, capture_output=True, text=True,
                          check=False)


HAND_WRITTEN = ".memory/facts/01m7dddddddddddddddddddddd-deploy.md"
HAND_HEAD = ("---\nid: 01m7dddddddddddddddddddddd\nkind: fact\ncreated: 2026-11-20T12:00:00Z\n"
             "evidence: ['user:ops']\n---\n")


@pytest.mark.parametrize("form", E2E_FORMS)
def test_the_pre_commit_hook_refuses_a_hand_written_memory_holding_the_form(repo: Path, form: str) -> None:
    hooks.install(repo)
    assert commit(repo, "memstore layout").returncode == 0
    path = repo / HAND_WRITTEN
    path.write_text(HAND_HEAD + "Deploys run from the release branch.\n", encoding="utf-8")
    git(repo, "add", HAND_WRITTEN)
    checked = subprocess.run(["git", "commit", "--dry-run", "-q"], cwd=repo, capture_output=True, check=False)
    assert checked.returncode == 0  # the file is otherwise valid: only the secret can refuse it
    head = git(repo, "rev-parse", "HEAD")

    path.write_text(HAND_HEAD + BY_ID[form]["text"] + "\n", encoding="utf-8")
    git(repo, "add", HAND_WRITTEN)
    res = commit(repo, "a hand-written memory")
    assert res.returncode != 0, res.stderr
    assert "secret" in res.stderr and "facts/01m7dddddddddddddddddddddd-deploy.md" in res.stderr, res.stderr
    assert not echoes_a_secret(res.stderr, res.stdout)
    assert git(repo, "rev-parse", "HEAD") == head


@pytest.mark.parametrize("form", E2E_FORMS)
def test_an_episode_log_line_holding_the_form_is_redacted_on_disk(
        repo: Path, cli: Callable[..., CliResult], form: str) -> None:
    row = BY_ID[form]
    code, started, _ = cli("episode", "start", "--task", "deploy", cwd=repo)
    assert code == 0
    code, logged, _ = cli("episode", "log", "--source", "tool", "--content", f"ran: {row['text']}\nexit 0",
                          cwd=repo)
    assert code == 0 and logged["ref"].endswith(":1")  # the line is kept: a log never fails a session
    assert row["kind"] in [r["kind"] for r in logged["redacted"]]
    raw = (repo / started["path"]).read_text(encoding="utf-8")
    content = [json.loads(line) for line in raw.splitlines()][-1]["content"]
    assert f"[REDACTED:{row['kind']}]" in content and content.startswith("ran: ") and content.endswith("\nexit 0")
    assert find_secrets(content) == [] and find_secrets(raw) == []


def plain_words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()))


@pytest.mark.parametrize("row", [r for r in CORPUS if r["secret"]], ids=lambda r: r["id"])
def test_a_slug_is_made_only_of_words_that_survive_redaction(row: dict) -> None:
    """The file name is committed with the text: a secret the write gates missed must not ride in it."""
    redacted, _ = redact(row["text"])
    kept = plain_words(re.sub(r"\[REDACTED:\w+\]", " ", redacted))
    slug = slugify(row["text"], max_len=10_000)
    assert set(slug.split("-")) <= kept or (slug == "memory" and not kept)  # nothing left: the fallback name


def test_a_slug_keeps_the_words_around_a_secret() -> None:
    assert slugify(BY_ID["curl_u_password"]["text"]) == "curl-u-admin-https-api-example-com-v1"
    assert slugify(BY_ID["pgpassword_export"]["text"]) == "export-pgpassword-psql-h-db-u-app"
    assert slugify("Deploys run from the release branch") == "deploys-run-from-the-release-branch"


@pytest.mark.parametrize(("text", "normal"), [
    ("ｇｈｐ＿ab", "ghp_ab"),  # fullwidth forms fold to ASCII
    ("to\u200bk\u00aden\ufeff", "token"),  # zero-width space, soft hyphen, BOM
    ("cafe\u0301", "cafe"),  # a combining mark is dropped
    ("café ﬁle", "café file"),  # a precomposed letter stays; a ligature unfolds
])
def test_normalise_folds_compatibility_forms_and_drops_marks_and_invisibles(text: str, normal: str) -> None:
    folded, origin = normalise(text)
    assert folded == normal
    assert origin is not None and len(origin) == len(folded)
    assert all(text[i] != "\u200b" for i in origin)


def test_normalise_leaves_ascii_and_plain_unicode_alone() -> None:
    assert normalise("plain ascii") == ("plain ascii", None)
    assert normalise("naïve café — 漢字") == ("naïve café — 漢字", None)


def test_a_redaction_cuts_the_original_characters_of_a_folded_secret() -> None:
    """The span found in the folded text is cut from the text as given: no fullwidth half-token
    and no stray combining mark inside it is left behind."""
    fullwidth = BY_ID["fullwidth_prefix"]["text"].removeprefix("push with ")
    combining = BY_ID["combining_mark"]["text"].removeprefix("push with ")
    text = f"push {fullwidth} and {combining} done"
    assert redact(text)[0] == "push [REDACTED:github_token] and [REDACTED:github_token] done"
    assert without_secrets(text) == "push   and   done"


@pytest.mark.parametrize(("form", "redacted"), [
    ("aws_split_space", "the key [REDACTED:aws_access_key] was in the log"),
    ("aws_split_newline", "aws_access_key_id = [REDACTED:aws_access_key]\n"),
    ("github_split_newline", "token: [REDACTED:github_token]\n"),
])
def test_a_split_token_is_cut_whole_and_not_a_word_further(form: str, redacted: str) -> None:
    assert redact(BY_ID[form]["text"])[0] == redacted


PASSWORD = "Qm8v" + "T3xZ7kL2"


@pytest.mark.parametrize(("text", "found"), [
    (f"docker login -u me -p {PASSWORD} registry.example.com", True),
    (f"sshpass -p {PASSWORD} ssh deploy@host", True),
    (f"mongosh --username=app -p{PASSWORD}", True),  # attached to the flag
    (f"docker run -p {PASSWORD}", False),  # no user named: -p is a port or a plugin elsewhere
    (f"mysql -p {PASSWORD} -u app", False),  # the user comes after: not read as its password
    (f"login -u me\nthen -p {PASSWORD}", False),  # the user is on another line
    ("docker login -u me -p $REGISTRY_PASSWORD", False),
])
def test_a_short_p_is_a_password_only_after_sshpass_or_a_user_flag_on_its_line(text: str, found: bool) -> None:
    assert bool(find_secrets(text)) is found


@pytest.mark.parametrize(("text", "found"), [
    (f"--password {PASSWORD}", True),
    (f"--client-secret={PASSWORD}", True),
    (f"--token-file {PASSWORD}", False),  # describes where a token is
    (f"--no-password {PASSWORD}", False),
    (f"curl -u admin:{PASSWORD}", True),
    ("curl -u admin:admin", False),  # a local default
    (f"curl -u {PASSWORD}:{PASSWORD}", False),  # user and group, as docker run -u takes them
    ("uv venv --python-token python3.11", False),  # a version, not a chosen password
])
def test_long_flags_and_user_password_pairs(text: str, found: bool) -> None:
    assert bool(find_secrets(text)) is found


def test_a_windows_path_after_a_user_flag_is_not_a_password() -> None:
    assert find_secrets(r"runas -u C:\Users\dev1\build2.cmd") == []
