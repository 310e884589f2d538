"""The redactor judged on a corpus: realistic text that must stay as it is, and realistic secrets that must go.

Zero false positives and zero misses: a new rule in core/redaction.py that trips on ordinary prose,
code or identifiers fails here, and so does a provider key shape it lets through. Secrets are built
from a seeded generator at import time (secret scanners do not flag this file; runs are repeatable).
"""

from __future__ import annotations

import hashlib
import random
import string
import uuid

import pytest

from handraise.core.redaction import REDACTED, is_secret_shaped, redact

_RNG = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
LOWER_DIGITS = string.ascii_lowercase + string.digits


def _rand(alphabet: str, n: int) -> str:
    # At least one digit, one lower and one upper where the alphabet has them: real keys do.
    while True:
        value = "".join(_RNG.choice(alphabet) for _ in range(n))
        kinds = [any(c.isdigit() for c in value), any(c.islower() for c in value), any(c.isupper() for c in value)]
        wanted = [any(c.isdigit() for c in alphabet), any(c.islower() for c in alphabet),
                  any(c.isupper() for c in alphabet)]
        if all(k or not w for k, w in zip(kinds, wanted, strict=True)):
            return value


def _sha1() -> str:
    return hashlib.sha1(_rand(ALNUM, 20).encode()).hexdigest()


def _uuid() -> str:
    return str(uuid.UUID(int=_RNG.getrandbits(128), version=4))


def _luhn_complete(partial: str) -> str:
    """``partial`` and the check digit that makes it pass the Luhn check."""
    total = 0
    for i, c in enumerate(reversed(partial)):
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return partial + str((10 - total % 10) % 10)


def _card(prefix: str, length: int) -> str:
    return _luhn_complete(prefix + "".join(_RNG.choice(string.digits) for _ in range(length - len(prefix) - 1)))


def _grouped(number: str, sizes: tuple[int, ...], sep: str) -> str:
    parts, at = [], 0
    for size in sizes:
        parts.append(number[at:at + size])
        at += size
    return sep.join(parts)


# -- what must stay (ordinary text of every kind lives here, not in test_redaction.py) -------------

_PROSE = [
    "sk-learn is a library",
    "sk-learn-is-a-library",
    "We switched from statsmodels to sk-learn for the regression baseline.",
    "Install scikit-learn==1.5.2 and numpy>=2.0 before running the notebook.",
    "The task-force meets on Tuesdays; the disk-usage report is attached.",
    "Please deploy version 1.2.3 of billing-service to the canary cluster tomorrow morning.",
    "The canary deployment looked healthy for 30 minutes, so I promoted it.",
    "Can you approve the refund of 42.50 EUR for order 10045?",
    "The customer says the PIN pad at register 3 is broken.",
    "Reset your PIN in the app under Settings > Security.",
    "Connect the LED to GPIO pin: 13 and the button to pin: 7.",
    "pin: see the wiring diagram",
    "The OTP arrived late again; the SMS provider had an outage.",
    "otp_length: 6",
    "otp_ttl_seconds=300",
    "otp_enabled: true",
    "spin: 3000",
    "pinned: 4821 messages",
    "zip code: 90210",
    "error code: 4821",
    "Order number: 123456 shipped today.",
    "The passcode screen appears after 5 minutes of inactivity.",
    "password_hint: your first pet",
    "passwords are hard to remember, use a manager",
    "the secret santa draw is on Friday",
    "token_type: bearer",
    "max_tokens=500",
    "tokens: 5",
    "The bearer of this letter is authorised to collect the parcel.",
    "Basic understanding of SQL is required.",
    "Meeting moved to 2026-01-02T14:30:00Z; see https://example.com/calendar?week=2026-W01.",
    "The meeting moved to 2026-01-02T14:30:00Z; see https://example.com/calendar?week=2026-W01.",
    "https://github.com/owner/repo/commit/3f2a9c1b7e4d5a6f8091a2b3c4d5e6f708192a3b",
    "request 123e4567-e89b-12d3-a456-426614174000 was answered",
    "req_123e4567-e89b-12d3-a456-426614174000",
    "Totals: 1,234,567.89 EUR; ratio 0.333333333333333333333",
    "Call me at +49 30 1234567 or +1 (555) 010-9999.",
    "IBAN-like reference DE00 0000 0000 0000 0000 00 from the test fixtures.",
    "Ünïcödé têxt wïth àccents, 日本語のテキスト, and emoji 🎉🎉🎉",
    "Das Passwort-Feld ist leer; bitte neu eingeben.",
    "La contraseña debe tener al menos 12 caracteres.",
    "Looks good to me. Ship it!",
    "This answer is wrong: the capital of Australia is Canberra, not Sydney.",
    "The model hallucinated a citation (Smith et al., 2019) that does not exist.",
    "Rating 4/5: correct but too verbose.",
    "Use the staging database, not production.",
    "The API returned 429 Too Many Requests after 100 calls per minute.",
    "The build failed on arm64 but passed on x86_64.",
    "AKIA is the prefix of AWS access key ids; never paste one here.",
    "GitHub tokens start with ghp_ and GitLab ones with glpat-.",
    "SendGrid keys look like SG.<id>.<secret>; ours is in the vault.",
    "Stripe uses sk_live_ for secret keys and pk_live_ for publishable ones.",
    "Google API keys begin with AIza.",
    "npm tokens begin with npm_ and PyPI tokens with pypi-.",
    "The package pypi-simple-index-mirror-configuration is deprecated.",
    "pip install pypi-attestations",
    "The run id is run-2026-12-01-nightly.",
    "Label: off-brand",
    "Flag for review: the tone is too casual for a legal notice.",
    "Correction: the invoice total should be 1,250.00, not 1,520.00.",
    "Note: I checked the logs from 03:00 to 04:00 UTC.",
    "Ticket JIRA-4821 is blocked by JIRA-4790.",
    "See RFC 0056 section E for the redaction invariant.",
    "The version string is v2.14.0-rc.3+build.4821.",
    "We need 16 GB of RAM and 4 vCPUs for this job.",
    "The conference code of conduct applies to all attendees.",
    "My favourite colour is blue and my dog is called Rex.",
    "internationalizationcharacteristicsss",
    "thequickbrownfoxjumpsoverthelazydogagain",
    "the-quick-brown-fox-jumps-over-the-lazy-dog-again",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "",
    "   ",
    "ok",
    "👍",
    "approve",
    "reject: the amount is above the limit",
    "decision: approve\nreason: within budget",
    "name: Ada Lovelace\nemail: ada@example.com\nrole: admin",
    "date: 2026-12-24\ntime: 18:30",
    "amount: 4821\ncurrency: EUR",
    "quantity=12&colour=red&size=M",
    "https://docs.example.org/guide/getting-started/installation#step-2",
    "https://github.com/owner/repo/pull/4821/files",
    "https://example.com:8443/path/to/resource?page=2&sort=desc",
    "mailto:support@example.com?subject=Refund%20request",
    "ssh deploy@10.0.0.12 -p 2222",
    "postgres://db.internal:5432/app",
    "redis://cache:6379/0",
    "The summary misses the second paragraph of the contract.",
    "Wrong language: the customer wrote in Portuguese, the reply is in Spanish.",
    "Translate 'Kennwort vergessen?' as 'Forgot password?'.",
    "The agent should have asked before deleting the branch feature/login-2fa.",
    "I rotated the keys yesterday; nothing to do here.",
    "The secret is to preheat the oven to 220 degrees.",
    "Token economy: each user gets 5 tokens per day.",
    "Pin the dependency to 2.31.0 until the regression is fixed.",
    "Pin this message so the team sees it.",
    "OTP delivery took 45 seconds on average last week.",
    "CVV checks failed for 3% of payments in November.",
    "Two-factor (2FA) is mandatory for admins since March.",
    "Answer within 120 seconds or the request expires.",
    "The approval expired; nothing was deployed.",
    "Escalate to group:oncall after 300 seconds.",
    "Room 4821 on the fourth floor.",
    "The flight LH 4821 departs at 07:35 from gate B22.",
    "Invoice INV-2026-004821 is overdue by 14 days.",
    "Temperature: 21.5 C, humidity: 40 %",
    "Batch 7 of 12 finished in 4m 21s.",
    "The user agent was Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36.",
    "Checksum mismatch: expected 3f2a9c1b, got 9e1d22aa.",
    "The CSV has columns id, name, email, created_at.",
    "ValueError: invalid literal for int() with base 10: 'abc'",
    "HTTP/1.1 502 Bad Gateway from upstream payments-api",
    "Node n3 (summarise) produced an empty output.",
    "The label 'hallucinated' fits better than 'off-topic'.",
    "Agreed with the first reviewer; 3 stars.",
    "Deploy window: Saturday 02:00-04:00 CET.",
    "Keys are rotated every 90 days by the platform team.",
    "The token bucket refills at 10 per second.",
    "mfa: required",
    "pin: optional",
]

_CODE = [
    "def get_user_account_information(user_id: int) -> dict: ...",
    "const maxTokens = 500;",
    "for (let i = 0; i < 4821; i++) { total += i; }",
    "SELECT id, name FROM users WHERE created_at > '2026-01-01' LIMIT 100;",
    "getUserAccountInformationFromDatabase2024",
    "ThisIsAVeryLongCamelCaseIdentifierNameV2",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    "billing-service-deployment-7d9f8c6b5-x2x9z",
    "/home/user/projects/handraise/tests/core/test_schema2.py",
    "python3.11/site-packages/jsonschema_specifications/schemas/draft202012",
    "import numpy as np\nimport sklearn.linear_model as lm",
    "from sklearn.model_selection import train_test_split",
    "kubectl rollout status deployment/billing-service -n payments",
    "docker run --rm -p 8080:8080 ghcr.io/example/handraise:1.4.0",
    "git rebase main && git push --force-with-lease",
    "export PATH=\"$HOME/.local/bin:$PATH\"",
    "HANDRAISE_CONFIG=/etc/handraise/config.toml handraise serve",
    "password = os.environ[\"DB_PASSWORD\"]",
    "token = request.headers.get(\"Authorization\")",
    "api_key = settings.api_key.get_secret_value()",
    "if pin is None: raise ValueError(\"pin required\")",
    "otp = totp.now()",
    "assert len(otp_code) == 6",
    "private_key = load_pem_private_key(data, password=None)",
    "DB_PASSWORD=${DB_PASSWORD}",
    "password: $PGPASSWORD",
    "token: {{ secrets.DEPLOY_TOKEN }}",
    "password: <your password here>",
    "const token = await getToken(scope);",
    "x = {\"max_tokens\": 500, \"temperature\": 0.2}",
    "{\"token_type\": \"bearer\", \"expires_in\": 3600}",
    "{\"kind\": \"rating\", \"rating\": 5}",
    "<input type=\"password\" name=\"pin\" autocomplete=\"one-time-code\">",
    "CREATE INDEX ix_requests_tenant_run ON requests (tenant_id, run_id);",
    "ERROR: duplicate key value violates unique constraint \"uq_requests_tenant_unique_id\"",
    "Traceback (most recent call last):\n  File \"core/service.py\", line 612, in submit",
    "npm install --save-dev vitest@2.1.8",
    "pypi-upload: needs: build",
    "uses: actions/checkout@v4",
    "sha256sum handraise-1.4.0.tar.gz",
    "chmod 600 ~/.ssh/id_ed25519",
    "ssh-keygen -t ed25519 -C \"ada@example.com\"",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "12345678901234567890123456789012345678901234567890",
    "0.1 + 0.2 == 0.30000000000000004",
    "base64.urlsafe_b64encode(os.urandom(32))",
    "secrets.token_urlsafe(32)",
    "sk = SigningKey.generate()",
    "task_id = f\"sk-{index}\"",
    "sk-SK",
    "locale: sk-SK",
    "en-US, de-DE, sk-SK, fr-FR",
]

# Sentences next to the password and card rules (core/redaction.py): the same words, not a password; digits
# of the same length, not a card. Each number here that passes the Luhn check is named so in its comment.
_NEAR_PASSWORDS = [
    "I passed the exam on the second try.",
    "Could you pass the salt, please?",
    "The password policy changed last month: 14 characters minimum.",
    "My passport expires in March 2027.",
    "The compass points north-east.",
    "The password is incorrect.",
    "The password is too short; use at least 12 characters.",
    "My password is not working since the update.",
    "Your password is case-sensitive.",
    "The password was changed yesterday by the admin.",
    "The password is 8-12 characters long.",
    "The password is required.",
    "My password is in the vault, ask Ada.",
    "The password is the same as before",
    "What is the password?",
    "Password reset",
    "Password expired? Use the reset link.",
    "Passwords must be rotated every 90 days.",
    "pass the ball to the left wing",
    "All 120 tests pass on arm64.",
    "pass: 120, fail: 0, skipped: 3",
    "PASS: 1200 FAIL: 3",
    "pass: 12ms",
    "first_pass: done",
    "bypass: enabled",
    "compass=north",
    "The boarding pass is valid until Friday.",
    "The pass is free for students.",
    "The mountain pass is closed for the winter.",
    "We pass 2 arguments to the function.",
    "You shall not pass!",
    "She took a pass on the offer.",
    "Run pwd to see which folder you are in.",
    "pwd\n/home/ada/projects",
    "pwd /home/ada",
    "pass show email/work",
    "pass -c github.com",
    "The pw field is empty.",
    "The password is \"\" when the account is new, we fixed that.",
    "pass: \"yes\"",
]
_L = _luhn_complete  # the numbers built with it pass the Luhn check, so only another rule keeps them
_NOT_CARDS = [
    "Order 4532015112830367 shipped today.",  # 16 digits, Luhn fails
    "Order number 4532 0151 1283 0367, please check.",  # grouped, Luhn fails
    f"created_at: {_L('173332123456')}",  # epoch ms
    f"ts={_L('173332123456789')} us",  # epoch µs
    f"The event happened at {_L('173332123456712345')} ns.",  # epoch ns
    f"build {_L('2026120114300012')} finished",  # a date-time stamp
    "ISBN 978-3-16-148410-0",
    f"ISBN-13: {_L('978316148410')}",  # an ISBN-13 prefix
    f"EAN {_L('979030640615')}",
    "Call +49 30 1234567 or +1 (555) 010-9999.",
    f"Call +{_L('491511234567')} tomorrow.",  # E.164, after "+"
    f"phone: 00{_L('4915112345')}",  # international prefix 00
    "0049 151 12345678",
    "Amazon order 112-1234567-1234567",
    f"order id ORD-{_L('453201511283036')}",  # glued to an id's prefix
    f"req_{_L('453201511283036')}",  # glued to an identifier
    "UPS 1Z999AA10123456784",
    "USPS 9400111899223344556677",  # 22 digits: no card is that long
    "FedEx 771234567890",  # 12 digits: no card is that short
    f"Please pay to DE89 {_grouped(_L('37040044053201300'), (4, 4, 4, 4, 2), ' ')} by Friday.",  # an IBAN
    "IBAN GB29NWBK60161331926819",
    "FR76 3000 6000 0112 3456 7890 189",
    "1234 5678 9012 3456 7890",  # 20 digits in groups
    "Amount: 1,234,567,890,123.45 EUR",
    "pi is 3.1415926535897932384626",
    f"0.{_L('411111111111111')}",  # a decimal fraction
    "Room 4111, floor 11, desk 1111.",
    "Reference 0000 0000 0000 0000",  # starts with 0
    "The largest safe integer is 9007199254740991.",
]
# Each of the numbers above built with _L would go if it stood alone in the text.
_KEPT_THOUGH_LUHN_VALID = [_L("173332123456"), _L("978316148410"), _L("491511234567"), _L("453201511283036"),
                           _L("411111111111111"), "0000000000000000"]

_NON_SECRETS = _PROSE + _CODE + _NEAR_PASSWORDS + _NOT_CARDS
# Identifiers: UUIDs, git commit hashes in commit messages, digests Handraise writes itself.
_NON_SECRETS += [f"request {_uuid()} was answered" for _ in range(12)]
_NON_SECRETS += [f"req_{_uuid()}" for _ in range(4)]
_NON_SECRETS += [f"Revert \"Fix the sweeper race\"\n\nThis reverts commit {_sha1()}." for _ in range(8)]
_NON_SECRETS += [f"Merge {_sha1()[:12]} into main (fast-forward)" for _ in range(6)]
_NON_SECRETS += [f"cherry-picked from commit {_sha1()}" for _ in range(6)]
_NON_SECRETS += [f"https://github.com/owner/repo/commit/{_sha1()}" for _ in range(6)]
_NON_SECRETS += [f"sha256: {hashlib.sha256(_rand(ALNUM, 12).encode()).hexdigest()}" for _ in range(6)]
_NON_SECRETS += [f"sha512={hashlib.sha512(_rand(ALNUM, 12).encode()).hexdigest()}" for _ in range(3)]
_NON_SECRETS += [f"etag W/\"{_sha1()[:16]}\"" for _ in range(3)]


# -- what must go ---------------------------------------------------------------------------------

CANARY = "sk-canary-rfc0056-do-not-leak-abc123"

_KEYS: list[str] = [
    CANARY,
    "sk-abcdefghijklmnop",
    "sk-" + "proj-" + _rand(URLSAFE, 48),
    "sk-" + "proj-" + _rand(ALNUM, 56),
    "sk-" + "svcacct-" + _rand(URLSAFE, 48),
    "sk-" + _rand(ALNUM, 48),
    "sk-" + _rand(ALNUM, 32),
    "sk-" + _rand(string.ascii_lowercase, 20),
    "sk-" + "ant-" + "api03-" + _rand(URLSAFE, 93) + "AA",
    "sk-" + "ant-" + "admin01-" + _rand(URLSAFE, 80),
    "sk-" + "test-" + "rfc0056-" + _rand(LOWER_DIGITS, 8),
]
_KEYS += ["glpat-" + _rand(URLSAFE, 20) for _ in range(4)]
_KEYS += ["gldt-" + _rand(URLSAFE, 20), "glptt-" + _rand(LOWER_DIGITS, 40), "glrt-" + _rand(URLSAFE, 20)]
_KEYS += ["SG." + _rand(URLSAFE, 22) + "." + _rand(URLSAFE, 43) for _ in range(4)]
_KEYS += ["sk_" + "live_" + _rand(ALNUM, 24) for _ in range(3)]
_KEYS += ["sk_" + "live_" + _rand(ALNUM, 99)]
_KEYS += ["rk_" + "live_" + _rand(ALNUM, 24) for _ in range(3)]
_KEYS += ["sk_" + "test_" + _rand(ALNUM, 24), "rk_" + "test_" + _rand(ALNUM, 24)]
_KEYS += ["whsec_" + _rand(ALNUM, 32)]
_KEYS += ["AIza" + _rand(URLSAFE, 35) for _ in range(4)]
_KEYS += ["npm_" + _rand(ALNUM, 36) for _ in range(4)]
_KEYS += ["pypi-AgEIcHlwaS5vcmc" + _rand(URLSAFE, 150) for _ in range(3)]
_KEYS += ["pypi-AgENdGVzdC5weXBpLm9yZw" + _rand(URLSAFE, 100)]
_KEYS += ["hf_" + _rand(ALNUM, 34) for _ in range(2)]
_KEYS += ["ghp_" + _rand(ALNUM, 36), "gho_" + _rand(ALNUM, 36), "ghs_" + _rand(ALNUM, 36),
          "github_pat_" + _rand(ALNUM, 22) + "_" + _rand(ALNUM, 59)]
_KEYS += ["xoxb-" + "1234567890-1234567890123-" + _rand(ALNUM, 24), "xapp-1-A0123456789-" + _rand(LOWER_DIGITS, 40)]
_KEYS += ["AKIA" + _rand(string.ascii_uppercase + string.digits, 16),
          "ASIA" + _rand(string.ascii_uppercase + string.digits, 16)]
_KEYS += [str(_RNG.randint(10**8, 10**10)) + ":AA" + _rand(URLSAFE, 33) for _ in range(2)]
_KEYS += ["eyJ" + _rand(URLSAFE, 30) + "." + _rand(URLSAFE, 60) + "." + _rand(URLSAFE, 43)]

# Each key in a few of the places people paste them.
_KEY_CONTEXTS = [
    "{}",
    "Use this key: {}",
    "The old key {} was leaked in the logs, please rotate it.",
    "OPENAI_API_KEY={}",
    "export KEY=\"{}\"",
    "Authorization: Bearer {}",
    "curl -H 'x-api-key: {}' https://api.example.com",
    "config:\n  provider_key: {}\n  region: eu",
    "{{\"key\": \"{}\"}}",
    "see https://api.example.com/v1/things?key={}&page=2",
]

_SECRETS = [_KEY_CONTEXTS[i % len(_KEY_CONTEXTS)].format(key) for i, key in enumerate(_KEYS)]
_SECRETS += [f"please use {CANARY}", f"note: {CANARY}", f"{CANARY}."]
_SECRETS += ["GET https://api.telegram.org/bot" + str(_RNG.randint(10**8, 10**10)) + ":AA" + _rand(URLSAFE, 33)
             + "/getUpdates failed"]

# Values after sensitive words, in the forms people type: name: value, name=value, JSON, YAML, env.
_PAIRS = [
    ("pin: 4821", "4821"),
    ("PIN: 0000", "0000"),
    ("My pin is below.\npin: 7319", "7319"),
    ("card_pin=5521", "5521"),
    ("pin = 123456", "123456"),
    ("{\"pin\": \"4821\"}", "4821"),
    ("'pin': '9087'", "9087"),
    ("otp: 482913", "482913"),
    ("OTP=123456", "123456"),
    ("otp code: 771 204", "771 204"),
    ("otp_code=551098", "551098"),
    ("TOTP: 004821", "004821"),
    ("2fa code: 661903", "661903"),
    ("mfa_code = 918273", "918273"),
    ("Your verification code: 482-913", "482-913"),
    ("security code: 123", "123"),
    ("one-time code: 90817263", "90817263"),
    ("login code: 3381", "3381"),
    ("sms code=784512", "784512"),
    ("cvv: 737", "737"),
    ("CVC=4242", "4242"),
    ("passcode: 2468", "2468"),
    ("passcode=opensesame", "opensesame"),
    ("Passcode: blue-falcon-42", "blue-falcon-42"),
    ("password: hunter2", "hunter2"),
    ("PASSWORD=correcthorsebatterystaple", "correcthorsebatterystaple"),
    ("db.password = s3cr3t!", "s3cr3t!"),
    ("\"password\": \"with spaces inside\"", "with spaces inside"),
    ("passwd: qwerty123", "qwerty123"),
    ("passphrase: correct-horse", "correct-horse"),
    ("secret: xyzzy", "xyzzy"),
    ("client_secret=Zm9vYmFy", "Zm9vYmFy"),
    ("token: tok_live_abcdef", "tok_live_abcdef"),
    ("X-Auth-Token: 1a2b3c", "1a2b3c"),
    ("api_key=hello-world", "hello-world"),
    ("API-KEY: k-4821", "k-4821"),
    ("access_key: AKIDEXAMPLE", "AKIDEXAMPLE"),
    ("private_key = mykey", "mykey"),
    ("credentials: admin:admin", "admin:admin"),
    ("Passwort: Sommer2024", "Sommer2024"),
    ("contraseña=Verano2024", "Verano2024"),
    ("senha: inverno99", "inverno99"),
    ("wachtwoord=geheim123", "geheim123"),
    ("postgres://app:s3cret@db.internal:5432/app", "s3cret"),
    ("https://admin:letmein@example.com/admin", "letmein"),
]
# Passwords and codes said in words, as people write them in a chat reply or a note.
_PAIRS += [
    ("my password is hunter2", "hunter2"),
    ("My password is swordfish", "swordfish"),
    ("my password is swordfish.", "swordfish"),
    ("my password is hunter2, and the user is ada", "hunter2"),
    ("The wifi password is \"correct horse\"", "correct horse"),
    ("the password is: Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("the password is now Summer2025!", "Summer2025!"),
    ("my password's Kettle-77", "Kettle-77"),
    ("Password is 90817263", "90817263"),
    ("passwd is qwerty123", "qwerty123"),
    ("passwd=Sommer2024", "Sommer2024"),
    ("my pw is s3cret-pw", "s3cret-pw"),
    ("my pw is letmein", "letmein"),
    ("pw: letmein", "letmein"),
    ("PW=Blue-Falcon-42", "Blue-Falcon-42"),
    ("the pass is Winter2026!", "Winter2026!"),
    ("The pass was `Hx7!kq2`", "Hx7!kq2"),
    ("pass Winter2026!", "Winter2026!"),
    ("PASS: Winter2026!", "Winter2026!"),
    ("db_pass=Winter2026!", "Winter2026!"),
    ("login details:\nuser ada\npass Winter2026!\n", "Winter2026!"),
    ("my pass Sn0wdrop#1", "Sn0wdrop#1"),
    ("pwd x7k9m2q", "x7k9m2q"),
    ("pwd: hunter2", "hunter2"),
    ("password: xq", "xq"),
    ("password Winter2026!", "Winter2026!"),
    ("hi, my pin is 4821", "4821"),
    ("the otp is 551098", "551098"),
    ("The verification code was 90 81 72", "90 81 72"),
]


# Card numbers as issued (Visa, Mastercard old and new ranges, Amex, Diners, Discover, JCB, UnionPay, Mir) and
# as printed: whole, in fours with spaces or dashes, Amex 4-6-5, Diners 4-6-4.
CARDS = [
    "4111111111111111", "5555555555554444", "4012888888881881",
    _card("4", 16), _card("4", 13), _card("4", 19), _card("51", 16), _card("55", 16), _card("2221", 16),
    _card("2720", 16), _card("6011", 16), _card("65", 16), _card("3528", 16), _card("62", 19), _card("2200", 16),
    _card("1", 16),  # a card number need not start as a timestamp's does: in groups it is judged as a card
]
_AMEX = [_card("34", 15), _card("37", 15), "378282246310005"]
_DINERS = [_card("36", 14), "30569309025904"]
_CARD_TEXTS = [number for number in CARDS if not number.startswith("1")]
_CARD_TEXTS += [_grouped(number, (4, 4, 4, 4, 3)[:len(number) // 4 + (len(number) % 4 > 0)], sep)
                for number in CARDS for sep in (" ", "-")]
_CARD_TEXTS += [_grouped(number, (4, 6, 5), sep) for number in _AMEX for sep in (" ", "-")] + _AMEX
_CARD_TEXTS += [_grouped(number, (4, 6, 4), sep) for number in _DINERS for sep in (" ", "-")] + _DINERS
_CARD_CONTEXTS = ["{}", "card: {}", "My card number is {} exp 12/28", "Pay with {}.", "Use {} for the refund, thanks",
                  "{{\"card\": \"{}\"}}"]
_CARDS_IN_CONTEXT = [(_CARD_CONTEXTS[i % len(_CARD_CONTEXTS)].format(card), card) for i, card in enumerate(_CARD_TEXTS)]
_PAIRS += _CARDS_IN_CONTEXT

_SECRETS += [text for text, _ in _PAIRS]
_PAIR_VALUES = dict(_PAIRS)


def test_the_corpus_is_as_big_as_promised():
    assert len(_NON_SECRETS) >= 200, len(_NON_SECRETS)
    assert len(_SECRETS) >= 100, len(_SECRETS)
    assert len(set(_NON_SECRETS)) == len(_NON_SECRETS)


@pytest.mark.parametrize("text", _NON_SECRETS)
def test_no_false_positive(text):
    assert redact(text) == text
    assert not is_secret_shaped(text)


@pytest.mark.parametrize("key", _KEYS)
def test_no_key_survives(key):
    for context in _KEY_CONTEXTS:
        text = context.format(key)
        out = redact(text)
        assert key not in out, out
        assert REDACTED in out
        assert is_secret_shaped(text)


@pytest.mark.parametrize("text", _SECRETS)
def test_no_miss(text):
    out = redact(text)
    assert REDACTED in out
    value = _PAIR_VALUES.get(text)
    if value is not None:
        assert value not in out.replace(REDACTED, ""), out


def _luhn(number: str) -> bool:
    return _luhn_complete(number[:-1]) == number


def test_the_card_corpus_is_what_it_claims():
    assert len(_CARD_TEXTS) >= 60, len(_CARD_TEXTS)
    for text in _CARD_TEXTS:
        digits = text.replace(" ", "").replace("-", "")
        assert 13 <= len(digits) <= 19 and _luhn(digits), text
    # The numbers kept on purpose that pass the Luhn check: another rule keeps them, not luck.
    assert all(_luhn(number) for number in _KEPT_THOUGH_LUHN_VALID)
    assert not _luhn("4532015112830367") and not _luhn("4532015112830367"[:16])
    assert redact("4532015112830366") == REDACTED  # the order id's digits alone would go


@pytest.mark.parametrize("card", _CARD_TEXTS)
def test_a_card_number_that_fails_luhn_stays(card):
    # The same number with its last digit changed is an order or a reference number, not a card.
    wrong = card[:-1] + str((int(card[-1]) + 1) % 10)
    for context in ("{}", "Order {} shipped.", "ref: {}"):
        text = context.format(wrong)
        assert redact(text) == text


def test_the_text_around_a_secret_stays():
    assert redact("I paid with 4111 1111 1111 1111 yesterday.") == f"I paid with {REDACTED} yesterday."
    assert redact("my password is hunter2, and the user is ada") == f"my password is {REDACTED}, and the user is ada"
    assert redact("user ada\npass Winter2026!\nthanks") == f"user ada\npass {REDACTED}\nthanks"
    assert redact('the wifi password is "correct horse" (ask Ada)') == (
        f'the wifi password is "{REDACTED}" (ask Ada)')
    assert redact(f"please use {CANARY} now") == f"please use {REDACTED} now"
    assert redact("Your verification code: 482 913, valid 5 minutes") == (
        f"Your verification code: {REDACTED}, valid 5 minutes")
    assert redact("pin: 4821\nname: Ada") == f"pin: {REDACTED}\nname: Ada"
