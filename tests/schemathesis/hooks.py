"""Schemathesis hooks for flashgate (loaded through SCHEMATHESIS_HOOKS).

- Credentials, by the operation's security scheme in openapi.yaml: the
  bearer tokens in FLASHGATE_CREDENTIALS (JSON, scheme name -> token) are
  sent as `Authorization: Bearer`, and requests to signed operations are
  signed as the shop's payment backend (`paymentSignature`, with
  FLASHGATE_PAYMENT_KEYS) or the gate's outbox (`forwardSignature`, with
  FLASHGATE_FORWARD_KEYS) sign them: flashgate-v2 over the purpose, key id,
  timestamp, method, path and body digest. So schemathesis reaches each
  route's logic, not only its 401. A scheme with no credential given is
  left alone, and is refused.
- The check `refusal_changes_nothing` reads the state of the product
  FLASHGATE_GUARD_PRODUCT before and after every request to it, and fails if
  a refused request (4xx) changed it. The state is the stats without the
  outcome counters, the snapshot count, the object's work and the delivery
  telemetry, which refusals do change.
- `filter_failure` keeps every failure except one: a 503 `overloaded` with
  `Retry-After`, the documented answer of a product at its `reservations_max`
  (a positive run may configure a record limit of 1). Any other 5xx fails.
"""

import hashlib
import hmac
import json
import os
import time

import requests
import schemathesis

CREDENTIALS = json.loads(os.environ.get("FLASHGATE_CREDENTIALS") or "{}")
SIGNERS = {
    "paymentSignature": ("payment", os.environ.get("FLASHGATE_PAYMENT_KEYS", "")),
    "forwardSignature": ("forward", os.environ.get("FLASHGATE_FORWARD_KEYS", "")),
}
GATE = os.environ.get("FLASHGATE_GATE_URL", "")
GUARD = os.environ.get("FLASHGATE_GUARD_PRODUCT", "")
ADMIN = os.environ.get("FLASHGATE_ADMIN_TOKEN", "")

_before = {}


def _signing_key(key_set, now_ms):
    """The key a signer uses: the newest active one (see wire/src/keys.rs)."""
    keys = []
    for entry in key_set.split(","):
        head, secret = entry.strip().split(":", 1)
        kid, _, activate = head.partition("@")
        keys.append((int(activate or 0), kid, secret))
    active = [k for k in keys if k[0] <= now_ms]
    _, kid, secret = max(active) if active else min(keys)
    return kid, secret.encode()


def _body_bytes(case):
    """The bytes the requests transport sends for the case's body."""
    plain = (dict, list, str, int, float, bool)
    if isinstance(case.body, plain):
        return json.dumps(case.body).encode("utf-8")
    if isinstance(case.body, bytes):
        return case.body
    return b""


def _sign(case, purpose, key_set):
    now_ms = int(time.time() * 1000)
    kid, secret = _signing_key(key_set, now_ms)
    digest = hashlib.sha256(_body_bytes(case)).hexdigest()
    fields = ["flashgate-v2", purpose, kid, str(now_ms), case.method.upper(), case.formatted_path, digest]
    canonical = "".join(f"{f}\n" for f in fields).encode()
    mac = hmac.new(secret, canonical, hashlib.sha256).hexdigest()
    case.headers["X-Flashgate-Key-Id"] = kid
    case.headers["X-Flashgate-Timestamp"] = str(now_ms)
    case.headers["X-Flashgate-Signature"] = f"v2={mac}"


def _schemes(case):
    security = case.operation.definition.raw.get("security") or []
    return [name for requirement in security for name in requirement]


def _guard_state():
    r = requests.get(
        f"{GATE}/admin/products/{GUARD}/stats",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    r.raise_for_status()
    stats = r.json()
    stats.pop("counters", None)
    # Telemetry too: every edge refresh is counted, refusals included, and
    # every request the object answers is work in a batch.
    stats.pop("snapshots", None)
    stats.pop("work", None)
    outbox = stats.get("outbox", {})
    for telemetry in ("last_error", "last_success_ms", "refused"):
        outbox.pop(telemetry, None)
    return stats


def _touches_guard(case):
    return bool(GATE and GUARD) and (case.path_parameters or {}).get("product_id") == GUARD


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if _touches_guard(case):
        _before[id(case)] = _guard_state()
    if case.headers is None:
        case.headers = {}
    for scheme in _schemes(case):
        if scheme in CREDENTIALS:
            # Replaces the placeholder schemathesis sends for a bearer
            # scheme it has no credential for; the refusals of bad
            # credentials are tested by tests/e2e/trust.test.mjs.
            for name in [k for k in case.headers if k.lower() == "authorization"]:
                del case.headers[name]
            case.headers["Authorization"] = f"Bearer {CREDENTIALS[scheme]}"
            break
        purpose, key_set = SIGNERS.get(scheme, (None, ""))
        if purpose and key_set:
            _sign(case, purpose, key_set)
            break


@schemathesis.check
def refusal_changes_nothing(ctx, response, case):
    before = _before.pop(id(case), None)
    if before is None or response.status_code < 400:
        return None
    after = _guard_state()
    if after != before:
        raise AssertionError(
            f"a refused request ({response.status_code}) changed the product:\n"
            f"before {before}\nafter  {after}"
        )
    return None


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    if getattr(failure, "code", None) != "ST101" or response.status_code != 503:
        return True
    try:
        code = json.loads(response.content).get("code")
    except (ValueError, AttributeError):
        return True
    return not (code == "overloaded" and "retry-after" in {k.lower() for k in response.headers})
