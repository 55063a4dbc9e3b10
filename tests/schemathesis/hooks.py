"""Schemathesis hooks for flashgate (loaded through SCHEMATHESIS_HOOKS).

- Requests to the origin's signed routes are signed as the gate signs them
  (FLASHGATE_SIGNING_SECRET), so schemathesis reaches their logic instead of
  their 401.
- The check `refusal_changes_nothing` reads the state of the product
  FLASHGATE_GUARD_PRODUCT before and after every request to it, and fails if
  a refused request (4xx) changed it. The state is the stats without the
  outcome counters and the delivery telemetry, which refusals do change.
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

SECRET = os.environ.get("FLASHGATE_SIGNING_SECRET", "").encode()
SIGNED = {("POST", "/v1/reservations/batch"), ("PUT", "/v1/products/{id}")}
GATE = os.environ.get("FLASHGATE_GATE_URL", "")
GUARD = os.environ.get("FLASHGATE_GUARD_PRODUCT", "")
ADMIN = os.environ.get("FLASHGATE_ADMIN_TOKEN", "")

_before = {}


def _guard_state():
    r = requests.get(
        f"{GATE}/admin/products/{GUARD}/stats",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    r.raise_for_status()
    stats = r.json()
    stats.pop("counters", None)
    outbox = stats.get("outbox", {})
    for telemetry in ("last_error", "last_success_ms", "rejected_oversell"):
        outbox.pop(telemetry, None)
    return stats


def _touches_guard(case):
    return bool(GATE and GUARD) and (case.path_parameters or {}).get("product_id") == GUARD


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if _touches_guard(case):
        _before[id(case)] = _guard_state()
    if not SECRET or (case.method.upper(), case.path) not in SIGNED:
        return
    # The bytes the requests transport sends for a JSON body.
    plain = (dict, list, str, int, float, bool)
    body = json.dumps(case.body).encode("utf-8") if isinstance(case.body, plain) else b""
    ts = str(int(time.time() * 1000))
    mac = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    if case.headers is None:
        case.headers = {}
    case.headers["X-Flashgate-Timestamp"] = ts
    case.headers["X-Flashgate-Signature"] = f"v1={mac}"


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
