"""Object-store errors in the AWS C++ SDK's words, as Arrow's S3 filesystem (pyarrow, Ray) prints them."""

from __future__ import annotations

import pytest

from crashcart.agent.verdict import diagnose_text


@pytest.mark.parametrize("line", [
    "OSError: When uploading part for key 'runs/a/ckpt/model-00002.safetensors' in bucket 'ml': AWS Error UNKNOWN "
    "(HTTP status 502) during UploadPart operation: Unable to parse ExceptionName: BadGateway Message: Bad Gateway",
    "OSError: When getting information for key 'ds/train/part-7.parquet' in bucket 'lake': AWS Error SLOW_DOWN "
    "during HeadObject operation: Please slow down.",
    "OSError: When listing objects under key 'ds/' in bucket 'lake': AWS Error SERVICE_UNAVAILABLE during "
    "ListObjectsV2 operation: Service is unable to handle request.",
])
def test_transient_object_store_errors_are_retried(line: str) -> None:
    verdict = diagnose_text("Traceback (most recent call last):\n" + line + "\n")
    assert (verdict.diagnosis, verdict.remedy) == ("s3_timeout", "resubmit")


@pytest.mark.parametrize("line", [
    # A client error is not a transient one: the same request fails the same way again.
    "OSError: When reading information for key 'x.parquet' in bucket 'lake': AWS Error UNKNOWN (HTTP status 404) "
    "during HeadObject operation: No response body.",
    "OSError: When initiating multiple part upload for key 'y' in bucket 'ml': AWS Error ACCESS_DENIED during "
    "CreateMultipartUpload operation: Access Denied",
])
def test_client_errors_are_not_transient(line: str) -> None:
    assert diagnose_text("Traceback (most recent call last):\n" + line + "\n").diagnosis != "s3_timeout"
