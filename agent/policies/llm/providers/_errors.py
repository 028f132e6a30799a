"""One place that tells a retriable SDK failure from a final one."""

from __future__ import annotations

from crashcart.agent.policies.llm._messages import ModelError

RETRIABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


def model_error(provider: str, e: Exception) -> ModelError:
    """Both SDKs name their errors alike: APIStatusError (with status_code), APITimeoutError and
    APIConnectionError. Matching on the names keeps this free of either SDK's import."""
    status = getattr(e, "status_code", None)
    kind = type(e).__name__
    if status is not None:
        detail = _body_message(e) or str(e)
        return ModelError(f"{provider}: HTTP {status} ({kind}): {detail[:300]}",
                          retriable=status in RETRIABLE_STATUS or status >= 500, status=status)
    if kind in {"APITimeoutError", "APIConnectionError"}:
        return ModelError(f"{provider}: {kind}: {str(e)[:300]}", retriable=True)
    return ModelError(f"{provider}: {kind}: {str(e)[:300]}", retriable=False)


def _body_message(e: Exception) -> str | None:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return None
